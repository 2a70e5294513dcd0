"""Procedural synthetic RGB-D world: the embedded default dataset.

Each scene is a checkered ground plane plus 3-6 textured primitives (spheres,
yaw-rotated boxes, upright cylinders), ray-cast analytically with vectorised
numpy into RGB, metric depth, object ids and normals, seen by one or more
pinhole cameras. A line-drawing rendering of the same geometry (`sketch`)
plays the role of ImageNet-Sketch: same content, different appearance.

Conventions (shared with `taskgeom.data.real`):

- World frame: right-handed, metres, up = +y, ground plane y = 0. The main
  object stands near the origin; every camera looks at it.
- Camera frame: OpenCV, x right, y down, z forward. `cam_to_world` (4x4) maps
  camera-frame points to world points: columns 0-2 are the camera axes in
  world coordinates, column 3 is the camera centre.
- Intrinsics K = [[f, 0, cx], [0, f, cy], [0, 0, 1]] in pixels, with OpenCV
  pixel centres: pixel (row i, column j) sits at image point (x=j, y=i), so a
  centred principal point is ((W-1)/2, (H-1)/2).
- Depth: z-depth in the camera frame (not ray length), float32 metres. The
  sky and anything beyond the far plane `max_depth` (50 m by default) get
  exactly `max_depth`, so depth is finite everywhere.
- object_id: -1 sky, 0 ground, k >= 1 the k-th primitive; 1 is the main
  object, whose shape x texture pattern is the scene's class label.

Determinism: scene i of a world depends only on (seed, i) and view v of it
only on (seed, i, v), through `np.random.SeedSequence(seed, spawn_key=...)`,
so chunked rendering equals one big call and any resolution sees the same
scene and cameras. Rendering is point-sampled (one ray per pixel centre, no
anti-aliasing) and has no cast shadows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

SHAPES: tuple[str, ...] = ("sphere", "box", "cylinder")
PATTERNS: tuple[str, ...] = ("stripes", "checker")
CLASS_NAMES: tuple[str, ...] = tuple(f"{s}-{p}" for s in SHAPES for p in PATTERNS)
RESOLUTIONS: tuple[int, ...] = (64, 96, 128)

AMBIENT = 0.35  # share of light that reaches surfaces facing away from the sun
_EPS = 1e-6  # minimum ray parameter, so a surface never occludes itself
_UP = np.array([0.0, 1.0, 0.0])


@dataclass(frozen=True)
class WorldSpec:
    """Ranges the world samples from (all inclusive; lengths in metres).

    `camera_distance` is the horizontal distance from the main object,
    `camera_height` the camera's height above the ground.
    """

    num_objects: tuple[int, int] = (3, 6)
    fov_deg: tuple[float, float] = (45.0, 70.0)
    camera_distance: tuple[float, float] = (4.0, 8.0)
    camera_height: tuple[float, float] = (1.0, 4.0)
    max_depth: float = 50.0

    def __post_init__(self) -> None:
        for name in ("num_objects", "fov_deg", "camera_distance", "camera_height"):
            lo, hi = getattr(self, name)
            if not lo <= hi:
                raise ValueError(f"WorldSpec.{name}: expected (low, high) with low <= high, got {(lo, hi)}")
        if self.num_objects[0] < 1:
            raise ValueError(f"WorldSpec.num_objects: need at least the main object, got {self.num_objects}")
        if not (0.0 < self.fov_deg[0] and self.fov_deg[1] < 180.0):
            raise ValueError(f"WorldSpec.fov_deg: expected degrees in (0, 180), got {self.fov_deg}")
        if self.camera_height[0] <= 0.0 or self.max_depth <= 0.0:
            raise ValueError("WorldSpec: camera_height and max_depth must be positive")

    def as_dict(self) -> dict:
        """Plain values (tuples as lists) for HDF5 attributes and JSON."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Primitive:
    """One textured solid. `center` is the geometric centre; `half_size` the
    half-extents of its local bounding box: sphere (r, r, r), box (hx, hy, hz),
    cylinder (r, half_height, r) with its axis along +y. `yaw` (radians, about
    +y) turns the box and every primitive's texture.

    Texture: solid 3-D pattern in the object's yaw frame, `frequency` cycles
    per metre; stripes run across `stripe_dir`, checker cells are cubes.
    """

    shape: str
    center: tuple[float, float, float]
    half_size: tuple[float, float, float]
    yaw: float = 0.0
    color: tuple[float, float, float] = (0.8, 0.3, 0.2)
    pattern_color: tuple[float, float, float] = (0.2, 0.08, 0.05)
    pattern: str = "stripes"
    frequency: float = 3.0
    stripe_dir: tuple[float, float, float] = (0.0, 1.0, 0.0)
    phase: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        if self.shape not in SHAPES or self.pattern not in PATTERNS:
            raise ValueError(f"Primitive: shape must be in {SHAPES} and pattern in {PATTERNS}, "
                             f"got {self.shape!r}, {self.pattern!r}")

    @property
    def footprint(self) -> float:
        """Radius of the primitive's shadow on the ground plane (any yaw)."""
        hx, _, hz = self.half_size
        return float(np.hypot(hx, hz)) if self.shape == "box" else float(hx)


@dataclass(frozen=True)
class Scene:
    """Primitives (objects[0] is the main object), a sun and background colours."""

    objects: tuple[Primitive, ...]
    light_dir: tuple[float, float, float] = (0.4, 0.8, 0.3)  # towards the sun; normalised on use
    ground_colors: tuple[tuple[float, ...], tuple[float, ...]] = ((0.55, 0.52, 0.45), (0.45, 0.43, 0.37))
    ground_tile: float = 1.0  # metres per checker tile
    sky_colors: tuple[tuple[float, ...], tuple[float, ...]] = ((0.78, 0.85, 0.92), (0.35, 0.55, 0.85))

    @property
    def label(self) -> int:
        """Class id of the main object: shape index * 2 + pattern index (see CLASS_NAMES)."""
        main = self.objects[0]
        return SHAPES.index(main.shape) * len(PATTERNS) + PATTERNS.index(main.pattern)


@dataclass(frozen=True, eq=False)  # eq=False: arrays have no truth value; compare by identity
class Camera:
    """Pinhole camera with square pixels and a centred principal point; the
    field of view spans the image width (= height, images are square)."""

    cam_to_world: np.ndarray = field(repr=False)  # (4, 4) float64
    fov_deg: float

    def K(self, resolution: int) -> np.ndarray:
        """(3, 3) float64 intrinsics for a resolution x resolution image."""
        f = 0.5 * resolution / np.tan(np.radians(self.fov_deg) / 2)
        c = (resolution - 1) / 2  # OpenCV pixel centres, see module docstring
        return np.array([[f, 0.0, c], [0.0, f, c], [0.0, 0.0, 1.0]])


@dataclass(frozen=True)
class Render:
    """One rendered view. rgb (H,W,3) uint8, depth (H,W) float32 z-depth,
    object_id (H,W) int16, normal (H,W,3) float32 world-space (0 on sky),
    shade (H,W) float32 Lambert factor in [AMBIENT, 1] (1 on sky),
    pattern (H,W) bool, True where an object shows its pattern colour."""

    rgb: np.ndarray
    depth: np.ndarray
    object_id: np.ndarray
    normal: np.ndarray
    shade: np.ndarray
    pattern: np.ndarray


# --------------------------------------------------------------------------- cameras and geometry


def look_at(eye: np.ndarray, target: np.ndarray, fov_deg: float) -> Camera:
    """Camera at `eye` looking at `target`, image x axis level (no roll)."""
    eye, target = np.asarray(eye, float), np.asarray(target, float)
    z = target - eye
    x = np.cross(z, _UP)  # right = forward x up for an OpenCV (y-down) camera
    if np.linalg.norm(x) < 1e-9 * np.linalg.norm(z):
        raise ValueError("look_at: viewing direction is vertical, camera roll is undefined")
    z, x = z / np.linalg.norm(z), x / np.linalg.norm(x)
    c2w = np.eye(4)
    c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = x, np.cross(z, x), z, eye
    return Camera(c2w, float(fov_deg))


def relative_pose(cam_to_world_a: np.ndarray, cam_to_world_b: np.ndarray) -> np.ndarray:
    """Pose of camera b in camera a's frame: (..., 4, 4) T_ab = T_a^-1 T_b,
    mapping b-frame points to a-frame points."""
    a = np.asarray(cam_to_world_a, dtype=np.float64)
    rot_t = np.swapaxes(a[..., :3, :3], -1, -2)
    a_inv = np.zeros_like(a)
    a_inv[..., :3, :3] = rot_t  # rigid inverse: exact, unlike np.linalg.inv
    a_inv[..., :3, 3] = -(rot_t @ a[..., :3, 3:])[..., 0]
    a_inv[..., 3, 3] = 1.0
    return a_inv @ np.asarray(cam_to_world_b, dtype=np.float64)


def backproject(depth: np.ndarray, K: np.ndarray) -> np.ndarray:
    """Camera-frame points (..., H, W, 3) of z-depth (..., H, W) under
    intrinsics K (..., 3, 3), OpenCV pixel centres: X = (j - cx) z / fx."""
    depth = np.asarray(depth)
    K = np.asarray(K, dtype=np.float64)
    h, w = depth.shape[-2:]
    fx, fy = K[..., 0, 0, None, None], K[..., 1, 1, None, None]
    cx, cy = K[..., 0, 2, None, None], K[..., 1, 2, None, None]
    x = (np.arange(w) - cx) / fx * depth
    y = (np.arange(h)[:, None] - cy) / fy * depth
    return np.stack([x, y, np.broadcast_to(depth, x.shape)], axis=-1).astype(depth.dtype)


def _rays(camera: Camera, resolution: int) -> tuple[np.ndarray, np.ndarray]:
    """Origin (3,) and world directions (P, 3), P = resolution**2 in row-major
    pixel order, scaled so the camera-frame z component is 1: a hit at ray
    parameter t then has z-depth exactly t."""
    K = camera.K(resolution)
    s = (np.arange(resolution) - K[0, 2]) / K[0, 0]
    cam = np.empty((resolution, resolution, 3))
    cam[..., 0], cam[..., 1], cam[..., 2] = s[None, :], s[:, None], 1.0
    c2w = camera.cam_to_world
    return c2w[:3, 3].copy(), cam.reshape(-1, 3) @ c2w[:3, :3].T


# --------------------------------------------------------------------------- ray casting
# Each `_hit_*` returns the ray parameter t of the first visible hit, shape
# (P, n) for n primitives, +inf where the ray misses.


def _hit_ground(o: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Plane y = 0: (P, 1)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = -o[1] / d[:, 1:2]
    return np.where(t > _EPS, t, np.inf)


def _hit_spheres(o: np.ndarray, d: np.ndarray, center: np.ndarray, radius: np.ndarray) -> np.ndarray:
    """Spheres center (n,3), radius (n,): roots of |o + t d - c|^2 = r^2."""
    oc = o - center
    a = np.einsum("pi,pi->p", d, d)[:, None]
    b = d @ oc.T  # half the linear coefficient
    c = np.einsum("ni,ni->n", oc, oc) - radius**2
    disc = b * b - a * c
    sq = np.sqrt(np.maximum(disc, 0.0))
    near, far = (-b - sq) / a, (-b + sq) / a
    t = np.where(near > _EPS, near, far)  # far root: camera inside the sphere
    return np.where((disc >= 0) & (t > _EPS), t, np.inf)


def _hit_boxes(o: np.ndarray, d: np.ndarray, center: np.ndarray, half: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    """Yaw-rotated boxes center (n,3), half-extents (n,3), yaw (n,): slab
    method (Kay & Kajiya 1986) in each box's own frame."""
    cos, sin = np.cos(yaw), np.sin(yaw)
    oc = o - center
    o_local = np.stack([cos * oc[:, 0] - sin * oc[:, 2], oc[:, 1], sin * oc[:, 0] + cos * oc[:, 2]], -1)
    dx, dy, dz = d[:, 0:1], d[:, 1:2], d[:, 2:3]
    d_local = np.stack([dx * cos - dz * sin, np.broadcast_to(dy, (len(d), len(yaw))), dx * sin + dz * cos], -1)
    with np.errstate(divide="ignore", invalid="ignore"):  # axis-parallel rays give +-inf slabs
        t1 = (-half - o_local) / d_local
        t2 = (half - o_local) / d_local
    t_in = np.minimum(t1, t2).max(-1)
    t_out = np.maximum(t1, t2).min(-1)
    t = np.where(t_in > _EPS, t_in, t_out)
    return np.where((t_in <= t_out) & (t > _EPS), t, np.inf)


def _hit_cylinders(o: np.ndarray, d: np.ndarray, center: np.ndarray, radius: np.ndarray,
                   half_height: np.ndarray) -> np.ndarray:
    """Upright capped cylinders center (n,3), radius (n,), half_height (n,):
    the nearest of the side wall (quadratic in x, z) and the two caps."""
    oc = o - center
    dx, dy, dz = d[:, 0:1], d[:, 1:2], d[:, 2:3]
    a = dx * dx + dz * dz
    b = dx * oc[:, 0] + dz * oc[:, 2]
    c = oc[:, 0] ** 2 + oc[:, 2] ** 2 - radius**2
    disc = b * b - a * c
    sq = np.sqrt(np.maximum(disc, 0.0))
    best = np.full(disc.shape, np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):  # vertical rays never meet the wall
        for t in ((-b - sq) / a, (-b + sq) / a):
            ok = (disc >= 0) & (t > _EPS) & (np.abs(oc[:, 1] + t * dy) <= half_height)
            best = np.where(ok & (t < best), t, best)
        for cap in (half_height, -half_height):
            t = (cap - oc[:, 1]) / dy
            ok = (t > _EPS) & ((oc[:, 0] + t * dx) ** 2 + (oc[:, 2] + t * dz) ** 2 <= radius**2)
            best = np.where(ok & (t < best), t, best)
    return best


def _object_arrays(scene: Scene) -> dict[str, np.ndarray]:
    """Stack the primitives' fields into (N, ...) arrays."""
    objs = scene.objects
    return {
        "shape": np.array([SHAPES.index(p.shape) for p in objs], dtype=np.int64),
        "center": np.array([p.center for p in objs], dtype=np.float64).reshape(-1, 3),
        "half": np.array([p.half_size for p in objs], dtype=np.float64).reshape(-1, 3),
        "yaw": np.array([p.yaw for p in objs], dtype=np.float64),
        "color": np.array([p.color for p in objs], dtype=np.float64).reshape(-1, 3),
        "pattern_color": np.array([p.pattern_color for p in objs], dtype=np.float64).reshape(-1, 3),
        "pattern": np.array([PATTERNS.index(p.pattern) for p in objs], dtype=np.int64),
        "frequency": np.array([p.frequency for p in objs], dtype=np.float64),
        "stripe_dir": np.array([p.stripe_dir for p in objs], dtype=np.float64).reshape(-1, 3),
        "phase": np.array([p.phase for p in objs], dtype=np.float64).reshape(-1, 3),
    }


def _cast(o: np.ndarray, d: np.ndarray, obj: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Nearest hit over ground and all primitives: t (P,) and hit index (P,):
    -1 ground, k >= 0 primitive k; t = inf where nothing is hit."""
    columns, owners = [_hit_ground(o, d)], [np.array([-1])]
    for shape, fn in zip(SHAPES, (_hit_spheres, _hit_boxes, _hit_cylinders)):
        idx = np.flatnonzero(obj["shape"] == SHAPES.index(shape))
        if idx.size == 0:
            continue
        c, h = obj["center"][idx], obj["half"][idx]
        if shape == "sphere":
            columns.append(fn(o, d, c, h[:, 0]))
        elif shape == "box":
            columns.append(fn(o, d, c, h, obj["yaw"][idx]))
        else:
            columns.append(fn(o, d, c, h[:, 0], h[:, 1]))
        owners.append(idx)
    t_all = np.concatenate(columns, axis=1)
    col = np.argmin(t_all, axis=1)
    return t_all[np.arange(len(d)), col], np.concatenate(owners)[col]


def _yaw_to_local(v: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Apply R_y(yaw)^T to vectors (P, 3) with per-row cos, sin (P,)."""
    return np.stack([cos * v[:, 0] - sin * v[:, 2], v[:, 1], sin * v[:, 0] + cos * v[:, 2]], -1)


def _yaw_to_world(v: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Apply R_y(yaw) to vectors (P, 3) with per-row cos, sin (P,)."""
    return np.stack([cos * v[:, 0] + sin * v[:, 2], v[:, 1], -sin * v[:, 0] + cos * v[:, 2]], -1)


def _surface(p: np.ndarray, k: np.ndarray, obj: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normals (P,3), albedo (P,3) and pattern mask (P,) at hit points p (P,3)
    on primitives k (P,)."""
    cos, sin = np.cos(obj["yaw"][k]), np.sin(obj["yaw"][k])
    q = _yaw_to_local(p - obj["center"][k], cos, sin)  # object frame
    half, shape = obj["half"][k], obj["shape"][k]

    # Normal in the object frame. Sphere: q / r. Box: the face whose slab the
    # point lies on, i.e. the axis with the largest |q| / half. Cylinder: a cap
    # when |y| / h_half >= rho / r, else radial.
    n = q / half
    box = shape == SHAPES.index("box")
    if box.any():
        ratio = np.abs(n[box])
        face = ratio == ratio.max(axis=1, keepdims=True)
        n[box] = np.where(face, np.sign(q[box]), 0.0)
    cyl = shape == SHAPES.index("cylinder")
    if cyl.any():
        qc, hc = q[cyl], half[cyl]
        cap = np.abs(qc[:, 1]) / hc[:, 1] >= np.hypot(qc[:, 0], qc[:, 2]) / hc[:, 0]
        n[cyl] = np.where(cap[:, None], [0.0, 1.0, 0.0] * np.sign(qc), qc * [1.0, 0.0, 1.0])
    n /= np.linalg.norm(n, axis=1, keepdims=True)

    # Solid textures: two-colour stripes across stripe_dir or a 3-D checker.
    u = (q + obj["phase"][k]) * obj["frequency"][k, None]
    stripes = np.floor(2.0 * np.einsum("pi,pi->p", u, obj["stripe_dir"][k])) % 2 == 1
    checker = np.floor(u).sum(axis=1) % 2 == 1
    pattern = np.where(obj["pattern"][k] == PATTERNS.index("stripes"), stripes, checker)
    albedo = np.where(pattern[:, None], obj["pattern_color"][k], obj["color"][k])
    return _yaw_to_world(n, cos, sin), albedo, pattern


def render(scene: Scene, camera: Camera, resolution: int, max_depth: float = 50.0) -> Render:
    """Ray-cast one resolution x resolution view of `scene` (see module conventions)."""
    o, d = _rays(camera, resolution)
    obj = _object_arrays(scene)
    t, k = _cast(o, d, obj)
    hit = t <= max_depth  # the far plane clips the ground near the horizon
    on_obj = hit & (k >= 0)
    on_ground = hit & (k < 0)
    depth = np.where(hit, t, max_depth)
    p = o + depth[:, None] * d

    normal = np.zeros_like(d)
    albedo = np.zeros_like(d)
    pattern = np.zeros(len(d), dtype=bool)
    normal[on_ground] = _UP
    g = p[on_ground]
    tile = (np.floor(g[:, 0] / scene.ground_tile) + np.floor(g[:, 2] / scene.ground_tile)) % 2 == 1
    albedo[on_ground] = np.where(tile[:, None], scene.ground_colors[1], scene.ground_colors[0])
    normal[on_obj], albedo[on_obj], pattern[on_obj] = _surface(p[on_obj], k[on_obj], obj)

    light = np.asarray(scene.light_dir, float) / np.linalg.norm(scene.light_dir)
    shade = np.where(hit, AMBIENT + (1.0 - AMBIENT) * np.maximum(normal @ light, 0.0), 1.0)

    # Sky: horizon colour to zenith colour with elevation; distant surfaces
    # fade into the horizon colour (aerial perspective), hiding the far plane.
    horizon, zenith = (np.asarray(c, float) for c in scene.sky_colors)
    elevation = np.clip(d[:, 1] / np.linalg.norm(d, axis=1), 0.0, 1.0) ** 0.6
    sky = horizon + elevation[:, None] * (zenith - horizon)
    fog = (depth / max_depth)[:, None] ** 1.5
    color = np.where(hit[:, None], albedo * shade[:, None] * (1 - fog) + fog * horizon, sky)

    hw = (resolution, resolution)
    return Render(
        rgb=np.round(np.clip(color, 0.0, 1.0) * 255).astype(np.uint8).reshape(*hw, 3),
        depth=depth.astype(np.float32).reshape(hw),
        object_id=np.where(hit, k + 1, -1).astype(np.int16).reshape(hw),
        normal=normal.astype(np.float32).reshape(*hw, 3),
        shade=shade.astype(np.float32).reshape(hw),
        pattern=pattern.reshape(hw),
    )


# --------------------------------------------------------------------------- line drawing

PAPER = np.array([246, 243, 234], dtype=np.uint8)
INK = np.array([28, 28, 38], dtype=np.uint8)  # contours and creases
PENCIL = np.array([120, 118, 125], dtype=np.uint8)  # texture pattern boundaries
HATCH = np.array([182, 180, 184], dtype=np.uint8)  # shading strokes
_CREASE_COS = np.cos(np.radians(35.0))


def _thicken(mask: np.ndarray, width: int) -> np.ndarray:
    """Grow 1-pixel lines (H,W) to about `width` pixels (right and down)."""
    out = mask.copy()
    for s in range(1, width):
        out[s:, :] |= mask[:-s, :]
        out[:, s:] |= mask[:, :-s]
    return out


def sketch(view: Render) -> np.ndarray:
    """Pencil line drawing (H,W,3) uint8 of a rendered view.

    Dark contours where object ids change (drawn on the nearer side, so they
    hug occluding silhouettes at depth discontinuities) and at creases
    (normals turning by > 35 deg); lighter lines at texture pattern boundaries,
    so the class (shape x pattern) stays recognisable; diagonal hatching on
    objects' shaded sides (cross-hatching where darkest); paper elsewhere.
    Line widths and hatch spacing scale with resolution / 64.
    """
    ids, depth, normal, pattern = view.object_id, view.depth, view.normal, view.pattern
    h, w = ids.shape
    contour = np.zeros((h, w), dtype=bool)
    texture = np.zeros((h, w), dtype=bool)
    for a, b in (((slice(None, -1), slice(None)), (slice(1, None), slice(None))),
                 ((slice(None), slice(None, -1)), (slice(None), slice(1, None)))):
        same = ids[a] == ids[b]
        a_nearer = depth[a] <= depth[b]
        contour[a] |= ~same & a_nearer
        contour[b] |= ~same & ~a_nearer
        on_object = same & (ids[a] >= 1)
        contour[a] |= on_object & (np.einsum("hwc,hwc->hw", normal[a], normal[b]) < _CREASE_COS)
        texture[a] |= on_object & (pattern[a] != pattern[b])

    scale = w / 64
    width, period = max(1, round(scale)), max(3, round(4 * scale))
    rows, cols = np.arange(h)[:, None], np.arange(w)[None, :]
    objects = ids >= 1
    hatch = objects & (view.shade < 0.6) & ((rows + cols) % period < width)
    hatch |= objects & (view.shade < 0.45) & ((rows - cols) % period < width)

    out = np.broadcast_to(PAPER, (h, w, 3)).copy()
    out[hatch] = HATCH
    out[_thicken(texture, width)] = PENCIL
    out[_thicken(contour, width)] = INK
    return out


# --------------------------------------------------------------------------- sampling


def _rng(seed: int, *key: int) -> np.random.Generator:
    """Independent stream for (seed, *key): scene i uses (i, 0), view v of it (i, 1, v)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


def _hsv_to_rgb(h: float, s: float, v: float) -> tuple[float, float, float]:
    i = int(h * 6) % 6
    f = h * 6 - int(h * 6)
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    return ((v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q))[i]


def _unit(v: np.ndarray) -> tuple[float, float, float]:
    return tuple(float(x) for x in v / np.linalg.norm(v))


def _sample_primitive(rng: np.random.Generator, shape: str, pattern: str, size: float,
                      xz: tuple[float, float]) -> Primitive:
    """A primitive of roughly `size` metres half-extent resting on the ground at xz."""
    if shape == "sphere":
        half = (size, size, size)
    elif shape == "box":
        half = tuple(float(x) for x in size * rng.uniform(0.6, 1.0, 3))
    else:
        r = size * rng.uniform(0.7, 1.0)
        half = (r, size * rng.uniform(0.8, 1.4), r)
    color = _hsv_to_rgb(rng.uniform(), rng.uniform(0.5, 0.9), rng.uniform(0.65, 0.95))
    frequency = rng.uniform(1.2, 2.2) / float(np.mean(half))  # 2-4 stripes/cells across the object
    return Primitive(
        shape=shape,
        center=(float(xz[0]), half[1], float(xz[1])),
        half_size=half,
        yaw=float(rng.uniform(0, 2 * np.pi)),
        color=color,
        pattern_color=tuple(float(c) * rng.uniform(0.15, 0.35) for c in color),
        pattern=pattern,
        frequency=float(frequency),
        stripe_dir=_unit(rng.normal(size=3)),
        phase=tuple(float(x) for x in rng.uniform(0, 1 / frequency, 3)),
    )


def sample_scene(seed: int, index: int, spec: WorldSpec = WorldSpec()) -> Scene:
    """Scene `index` of the world `seed`. The main object (uniform over the 6
    classes) stands within 0.2 m of the origin; the others stand on a ring
    around it, spaced in angle and clear of it and of each other."""
    rng = _rng(seed, index, 0)
    n = int(rng.integers(spec.num_objects[0], spec.num_objects[1] + 1))
    label = int(rng.integers(len(CLASS_NAMES)))
    main = _sample_primitive(rng, SHAPES[label // len(PATTERNS)], PATTERNS[label % len(PATTERNS)],
                             rng.uniform(1.0, 1.6), tuple(rng.uniform(-0.2, 0.2, 2)))
    objects = [main]
    start = rng.uniform(0, 2 * np.pi)
    for j in range(n - 1):
        shape, pattern = SHAPES[rng.integers(len(SHAPES))], PATTERNS[rng.integers(len(PATTERNS))]
        size = rng.uniform(0.2, 0.4)
        angle = start + 2 * np.pi * (j + rng.uniform(-0.2, 0.2)) / (n - 1)
        # Bound the distance from the main centre with footprints: boxes
        # reach hypot(hx, hz) <= sqrt(2) * size from their centre.
        ring = main.footprint + np.sqrt(2) * size + 0.2 + rng.uniform(0, 0.6)
        xz = (main.center[0] + ring * np.cos(angle), main.center[2] + ring * np.sin(angle))
        objects.append(_sample_primitive(rng, shape, pattern, size, xz))
    azimuth, elevation = rng.uniform(0, 2 * np.pi), rng.uniform(np.radians(30), np.radians(75))
    light = (np.cos(elevation) * np.cos(azimuth), np.sin(elevation), np.cos(elevation) * np.sin(azimuth))
    ground = np.array(_hsv_to_rgb(rng.uniform(), rng.uniform(0.05, 0.3), rng.uniform(0.45, 0.65)))
    return Scene(
        objects=tuple(objects),
        light_dir=tuple(float(x) for x in light),
        ground_colors=(tuple(ground), tuple(ground * 0.8)),
        ground_tile=float(rng.uniform(0.7, 1.5)),
        sky_colors=(tuple(np.clip(np.array([0.78, 0.85, 0.92]) + rng.normal(0, 0.03, 3), 0, 1)),
                    tuple(np.clip(np.array([0.35, 0.55, 0.85]) + rng.normal(0, 0.05, 3), 0, 1))),
    )


def sample_cameras(scene: Scene, seed: int, index: int, views: int, spec: WorldSpec = WorldSpec()) -> list[Camera]:
    """`views` cameras around the main object of scene `index`. Each looks at
    the main object's centre (jittered by ~0.1 m) from an azimuth chosen among
    8 random candidates so its line of sight clears the other objects'
    footprints where possible."""
    main, others = scene.objects[0], scene.objects[1:]
    target = np.asarray(main.center)
    centers = np.array([p.center for p in others]).reshape(-1, 3)[:, [0, 2]]
    radii = np.array([p.footprint for p in others])
    cameras = []
    for v in range(views):
        rng = _rng(seed, index, 1, v)
        distance, height = rng.uniform(*spec.camera_distance), rng.uniform(*spec.camera_height)
        fov = rng.uniform(*spec.fov_deg)
        jitter = rng.normal(0.0, 0.1, 3)
        # Later views stay within ±60° of the first view's azimuth, so views overlap
        # (as in multi-view reconstruction data) and their relative pose is learnable.
        azimuth = rng.uniform(0, 2 * np.pi, 8) if v == 0 else first + rng.uniform(-np.pi / 3, np.pi / 3, 8)
        eyes = target[[0, 2]] + distance * np.stack([np.cos(azimuth), np.sin(azimuth)], -1)  # (8, 2)
        clearance = _segment_clearance(eyes, target[[0, 2]], centers, radii)
        best = int(np.argmax(clearance >= 0)) if (clearance >= 0).any() else int(np.argmax(clearance))
        if v == 0:
            first = azimuth[best]
        eye = np.array([eyes[best, 0], height, eyes[best, 1]])
        cameras.append(look_at(eye, target + jitter, fov))
    return cameras


def _segment_clearance(starts: np.ndarray, end: np.ndarray, centers: np.ndarray, radii: np.ndarray) -> np.ndarray:
    """Smallest gap (c,) between the 2-D segments starts (c,2) -> end (2,) and
    the discs centers (m,2), radii (m,); +inf with no discs."""
    if len(radii) == 0:
        return np.full(len(starts), np.inf)
    seg = end - starts  # (c, 2)
    rel = centers[None] - starts[:, None]  # (c, m, 2)
    s = np.clip(np.einsum("cmi,ci->cm", rel, seg) / np.einsum("ci,ci->c", seg, seg)[:, None], 0, 1)
    gap = np.linalg.norm(rel - s[..., None] * seg[:, None], axis=-1) - radii
    return gap.min(axis=1)


def render_split(num_scenes: int, seed: int, resolution: int, views: int = 1,
                 spec: WorldSpec = WorldSpec(), start: int = 0) -> dict[str, np.ndarray]:
    """Scenes start..start+num_scenes-1 of the world with this seed. Returns
    rgb (S,V,H,W,3) uint8, sketch (S,V,H,W,3) uint8, depth (S,V,H,W) float32,
    K (S,V,3,3) float32, cam_to_world (S,V,4,4) float32, label (S,) int64,
    object_id (S,V,H,W) int16."""
    if num_scenes < 0 or start < 0 or views < 1 or resolution < 1:
        raise ValueError(f"render_split: need num_scenes, start >= 0 and views, resolution >= 1, got "
                         f"{num_scenes=}, {start=}, {views=}, {resolution=}")
    s, v, r = num_scenes, views, resolution
    out = {
        "rgb": np.empty((s, v, r, r, 3), np.uint8),
        "sketch": np.empty((s, v, r, r, 3), np.uint8),
        "depth": np.empty((s, v, r, r), np.float32),
        "K": np.empty((s, v, 3, 3), np.float32),
        "cam_to_world": np.empty((s, v, 4, 4), np.float32),
        "label": np.empty((s,), np.int64),
        "object_id": np.empty((s, v, r, r), np.int16),
    }
    for i in range(s):
        scene = sample_scene(seed, start + i, spec)
        out["label"][i] = scene.label
        for j, camera in enumerate(sample_cameras(scene, seed, start + i, views, spec)):
            view = render(scene, camera, resolution, spec.max_depth)
            out["rgb"][i, j], out["depth"][i, j], out["object_id"][i, j] = view.rgb, view.depth, view.object_id
            out["sketch"][i, j] = sketch(view)
            out["K"][i, j], out["cam_to_world"][i, j] = camera.K(resolution), camera.cam_to_world
    return out
