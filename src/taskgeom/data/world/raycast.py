"""Analytic ray casting of a scene into RGB, depth, object ids and normals."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from taskgeom.data.world.camera import Camera
from taskgeom.data.world.scene import AMBIENT, PATTERNS, SHAPES, UP, Scene

_EPS = 1e-6  # minimum ray parameter, so a surface never occludes itself


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
    normal[on_ground] = UP
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
