"""Analytic ray casting of a scene into RGB, depth, object ids and normals.

A view casts one ray per pixel centre against the surroundings (`environment`) and every
primitive, shades the nearest hit with its albedo, the light and a shadow ray towards the light
(primitives cast shadows on everything), fades distant surfaces into the horizon's haze, and
shows the sky where nothing is hit within the far plane.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from taskgeom.data.world.camera import Camera
from taskgeom.data.world.environment import cast as cast_environment
from taskgeom.data.world.environment import sky
from taskgeom.data.world.environment import surface as environment_surface
from taskgeom.data.world.ifs import GRID, fractal_mask
from taskgeom.data.world.scene import SHAPES, Scene
from taskgeom.data.world.textures import fractal_noise, pattern_mask

_EPS = 1e-6  # minimum ray parameter, so a surface never occludes itself
_SHADOW_OFFSET = 1e-4  # shadow rays start this far off the surface, along its normal


@dataclass(frozen=True)
class Render:
    """One rendered view, every array (H, W) or (H, W, 3), H = W.

    Attributes:
        rgb: (H, W, 3) uint8.
        depth: (H, W) float32 z-depth, max_depth where nothing is hit (sky, beyond the far plane).
        object_id: (H, W) int16: k + 1 on the scene's k-th primitive, 0 on the surroundings, −1 where
            nothing is hit within the far plane (sky included).
        normal: (H, W, 3) float32 world-space normals (0 on sky).
        shade: (H, W) float32 light factor in [ambient, 1] (1 on sky).
        pattern: (H, W) bool, True where an object shows its pattern colour.
    """

    rgb: np.ndarray
    depth: np.ndarray
    object_id: np.ndarray
    normal: np.ndarray
    shade: np.ndarray
    pattern: np.ndarray


def _rays(camera: Camera, resolution: int) -> tuple[np.ndarray, np.ndarray]:
    """Origins (P, 3) and world directions (P, 3), P = resolution**2 in row-major
    pixel order, scaled so the camera-frame z component is 1: a hit at ray
    parameter t then has z-depth exactly t."""
    K = camera.K(resolution)
    s = (np.arange(resolution) - K[0, 2]) / K[0, 0]
    cam = np.empty((resolution, resolution, 3))
    cam[..., 0], cam[..., 1], cam[..., 2] = s[None, :], s[:, None], 1.0
    c2w = camera.cam_to_world
    d = cam.reshape(-1, 3) @ c2w[:3, :3].T
    return np.broadcast_to(c2w[:3, 3], d.shape), d


# --------------------------------------------------------------------------- primitives
# Each `_hit_*` takes ray origins o (P, 3) and directions d (P, 3) and returns the ray
# parameter t of the first visible hit, shape (P, n) for n primitives, +inf where it misses.


def _local(o: np.ndarray, d: np.ndarray, center: np.ndarray, yaw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rays in each primitive's yaw frame: origins and directions (P, n, 3)."""
    cos, sin = np.cos(yaw), np.sin(yaw)
    oc = o[:, None, :] - center[None]
    rot = lambda v: np.stack([cos * v[..., 0] - sin * v[..., 2], v[..., 1], sin * v[..., 0] + cos * v[..., 2]], -1)  # noqa: E731
    return rot(oc), rot(np.broadcast_to(d[:, None, :], oc.shape))


def _hit_spheres(o, d, center, half, yaw, seeds) -> np.ndarray:
    """Spheres of radius half[:, 0]: roots of |o + t d - c|^2 = r^2."""
    oc = o[:, None, :] - center[None]
    a = np.einsum("pi,pi->p", d, d)[:, None]
    b = np.einsum("pi,pni->pn", d, oc)  # half the linear coefficient
    c = np.einsum("pni,pni->pn", oc, oc) - half[:, 0] ** 2
    disc = b * b - a * c
    sq = np.sqrt(np.maximum(disc, 0.0))
    near, far = (-b - sq) / a, (-b + sq) / a
    t = np.where(near > _EPS, near, far)  # far root: origin inside the sphere
    return np.where((disc >= 0) & (t > _EPS), t, np.inf)


def _hit_boxes(o, d, center, half, yaw, seeds) -> np.ndarray:
    """Yaw-rotated boxes: slab method (Kay & Kajiya 1986) in each box's own frame."""
    ol, dl = _local(o, d, center, yaw)
    with np.errstate(divide="ignore", invalid="ignore"):  # axis-parallel rays give +-inf slabs
        t1 = (-half - ol) / dl
        t2 = (half - ol) / dl
    t_in = np.minimum(t1, t2).max(-1)
    t_out = np.maximum(t1, t2).min(-1)
    t = np.where(t_in > _EPS, t_in, t_out)
    return np.where((t_in <= t_out) & (t > _EPS), t, np.inf)


def _nearest_wall_or_cap(ol, dl, a, b, c, radius_at, half_height, cap_tops) -> np.ndarray:
    """Nearest root of the side quadric a t^2 + 2 b t + c = 0 within |y| <= h, and of the caps
    y = ±h (those in `cap_tops`) within radius_at(y) of the axis."""
    disc = b * b - a * c
    sq = np.sqrt(np.maximum(disc, 0.0))
    best = np.full(disc.shape, np.inf)
    oy, dy = ol[..., 1], dl[..., 1]
    with np.errstate(divide="ignore", invalid="ignore"):  # rays parallel to the wall or the caps
        for t in ((-b - sq) / a, (-b + sq) / a):
            ok = (disc >= 0) & (t > _EPS) & (np.abs(oy + t * dy) <= half_height)
            best = np.where(ok & (t < best), t, best)
        for sign in cap_tops:
            t = (sign * half_height - oy) / dy
            rho2 = (ol[..., 0] + t * dl[..., 0]) ** 2 + (ol[..., 2] + t * dl[..., 2]) ** 2
            ok = (t > _EPS) & (rho2 <= radius_at(sign) ** 2)
            best = np.where(ok & (t < best), t, best)
    return best


def _hit_cylinders(o, d, center, half, yaw, seeds) -> np.ndarray:
    """Upright capped cylinders (radius half[:, 0], half-height half[:, 1])."""
    ol, dl = _local(o, d, center, yaw)
    r, h = half[:, 0], half[:, 1]
    a = dl[..., 0] ** 2 + dl[..., 2] ** 2
    b = dl[..., 0] * ol[..., 0] + dl[..., 2] * ol[..., 2]
    c = ol[..., 0] ** 2 + ol[..., 2] ** 2 - r**2
    return _nearest_wall_or_cap(ol, dl, a, b, c, lambda sign: r, h, (1.0, -1.0))


def _hit_cones(o, d, center, half, yaw, seeds) -> np.ndarray:
    """Upright cones, apex at y = +h: x^2 + z^2 = k^2 (h - y)^2, k = r / 2h, and the base cap."""
    ol, dl = _local(o, d, center, yaw)
    r, h = half[:, 0], half[:, 1]
    k2 = (r / (2 * h)) ** 2
    w0 = h - ol[..., 1]  # h - y at t = 0; h - y = w0 - t dy
    a = dl[..., 0] ** 2 + dl[..., 2] ** 2 - k2 * dl[..., 1] ** 2
    b = ol[..., 0] * dl[..., 0] + ol[..., 2] * dl[..., 2] + k2 * w0 * dl[..., 1]
    c = ol[..., 0] ** 2 + ol[..., 2] ** 2 - k2 * w0**2
    return _nearest_wall_or_cap(ol, dl, a, b, c, lambda sign: r, h, (-1.0,))


def _hit_fractals(o, d, center, half, yaw, seeds) -> np.ndarray:
    """Two crossed vertical panels per primitive (local planes z = 0 and x = 0), |across| <= w,
    |y| <= h, cut to the fractal mask of its seed."""
    ol, dl = _local(o, d, center, yaw)
    best = np.full(ol.shape[:2], np.inf)
    for j, seed in enumerate(seeds):
        mask = fractal_mask(int(seed))
        w, h = half[j, 0], half[j, 1]
        for normal_axis, across in ((2, 0), (0, 2)):
            with np.errstate(divide="ignore", invalid="ignore"):
                t = -ol[:, j, normal_axis] / dl[:, j, normal_axis]
            u, y = ol[:, j, across] + t * dl[:, j, across], ol[:, j, 1] + t * dl[:, j, 1]
            inside = (t > _EPS) & (np.abs(u) <= w) & (np.abs(y) <= h)
            col = np.clip(((u / w + 1) / 2 * GRID).astype(int), 0, GRID - 1)
            row = np.clip(((y / h + 1) / 2 * GRID).astype(int), 0, GRID - 1)
            ok = inside & mask[np.where(inside, row, 0), np.where(inside, col, 0)]
            best[:, j] = np.where(ok & (t < best[:, j]), t, best[:, j])
    return best


_HITS = {"sphere": _hit_spheres, "box": _hit_boxes, "cylinder": _hit_cylinders, "cone": _hit_cones,
         "fractal": _hit_fractals}


def _object_arrays(scene: Scene) -> dict[str, np.ndarray]:
    """Stack the primitives' fields into (N, ...) arrays."""
    objs = scene.objects
    return {
        "shape": np.array([SHAPES.index(p.shape) for p in objs], dtype=np.int64),
        "center": np.array([p.center for p in objs], dtype=np.float64).reshape(-1, 3),
        "half": np.array([p.half_size for p in objs], dtype=np.float64).reshape(-1, 3),
        "yaw": np.array([p.yaw for p in objs], dtype=np.float64),
        "seed": np.array([p.texture_seed for p in objs], dtype=np.int64),
    }


def _cast_objects(o: np.ndarray, d: np.ndarray, obj: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Nearest primitive hit: t (P,) (inf on a miss) and primitive index (P,) (-1 on a miss)."""
    t_best, k_best = np.full(len(d), np.inf), np.full(len(d), -1)
    for s, shape in enumerate(SHAPES):
        idx = np.flatnonzero(obj["shape"] == s)
        if idx.size == 0:
            continue
        t = _HITS[shape](o, d, obj["center"][idx], obj["half"][idx], obj["yaw"][idx], obj["seed"][idx])
        col = np.argmin(t, axis=1)
        t = t[np.arange(len(d)), col]
        closer = t < t_best
        t_best, k_best = np.where(closer, t, t_best), np.where(closer, idx[col], k_best)
    return t_best, k_best


def _yaw_to_world(v: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Apply R_y(yaw) to vectors (P, 3) with per-row cos, sin (P,)."""
    return np.stack([cos * v[:, 0] + sin * v[:, 2], v[:, 1], -sin * v[:, 0] + cos * v[:, 2]], -1)


def _local_normals(q: np.ndarray, dl: np.ndarray, half: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """Unit normals (P, 3) in the object frame at local hit points q (P, 3), local ray directions
    dl (P, 3). Sphere q / r; box: the face of the largest |q| / half; cylinder and cone: a cap
    where the point lies on its plane, else the side's gradient; fractal: the hit panel's axis,
    facing the ray."""
    n = q / half
    box = shape == SHAPES.index("box")
    ratio = np.abs(n[box])
    n[box] = np.where(ratio == ratio.max(axis=1, keepdims=True), np.sign(q[box]), 0.0)
    cyl = shape == SHAPES.index("cylinder")
    qc, hc = q[cyl], half[cyl]
    cap = np.abs(qc[:, 1]) / hc[:, 1] >= np.hypot(qc[:, 0], qc[:, 2]) / hc[:, 0]
    n[cyl] = np.where(cap[:, None], [0.0, 1.0, 0.0] * np.sign(qc), qc * [1.0, 0.0, 1.0])
    cone = shape == SHAPES.index("cone")
    qc, hc = q[cone], half[cone]
    k2 = (hc[:, 0] / (2 * hc[:, 1])) ** 2
    side = np.stack([qc[:, 0], k2 * (hc[:, 1] - qc[:, 1]), qc[:, 2]], -1)
    n[cone] = np.where((qc[:, 1] <= -hc[:, 1] * (1 - 1e-6))[:, None], [0.0, -1.0, 0.0], side)
    frac = shape == SHAPES.index("fractal")
    axis = np.where(np.abs(q[frac, 2]) <= np.abs(q[frac, 0]), 2, 0)
    panel = np.zeros((int(frac.sum()), 3))
    panel[np.arange(len(axis)), axis] = -np.sign(dl[frac][np.arange(len(axis)), axis] + 1e-300)
    n[frac] = panel
    return n / np.linalg.norm(n, axis=1, keepdims=True)


def _surface(p: np.ndarray, d: np.ndarray, k: np.ndarray, scene: Scene,
             obj: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normals (P,3), albedo (P,3) and pattern mask (P,) at hit points p (P,3) of rays d (P,3)
    on primitives k (P,)."""
    cos, sin = np.cos(obj["yaw"][k]), np.sin(obj["yaw"][k])
    rel = p - obj["center"][k]
    to_local = lambda v: np.stack([cos * v[:, 0] - sin * v[:, 2], v[:, 1], sin * v[:, 0] + cos * v[:, 2]], -1)  # noqa: E731
    q = to_local(rel)
    n = _local_normals(q, to_local(d), obj["half"][k], obj["shape"][k])
    albedo, pattern = np.zeros_like(p), np.zeros(len(p), dtype=bool)
    for j in np.unique(k):
        at, prim = k == j, scene.objects[j]
        u = (q[at] + prim.phase) * prim.frequency
        pattern[at] = pattern_mask(prim.pattern, u, np.broadcast_to(prim.stripe_dir, u.shape), prim.texture_seed)
        base = np.where(pattern[at, None], prim.pattern_color, prim.color)
        grain = fractal_noise(q[at], prim.texture_seed + 1, prim.frequency, octaves=4)
        albedo[at] = np.clip(base * (1 + 0.15 * grain[:, None]), 0.0, 1.0)
    return _yaw_to_world(n, cos, sin), albedo, pattern


def _lit(p: np.ndarray, normal: np.ndarray, scene: Scene, obj: dict[str, np.ndarray]) -> np.ndarray:
    """Light factor (P,) in [ambient, 1] at surface points p with normals (P, 3): Lambert's
    cosine towards the sun (outdoors) or the lamp (rooms), zero where a primitive lies between."""
    if scene.light_pos is None:
        to_light = np.broadcast_to(np.asarray(scene.light_dir, float) / np.linalg.norm(scene.light_dir), p.shape)
        reach = np.full(len(p), np.inf)
    else:
        to_light = np.asarray(scene.light_pos, float) - p
        reach = np.linalg.norm(to_light, axis=1)
        to_light = to_light / np.maximum(reach, 1e-9)[:, None]
    cosine = np.maximum(np.einsum("pi,pi->p", normal, to_light), 0.0)
    lit = cosine > 0
    t, _ = _cast_objects(p[lit] + _SHADOW_OFFSET * normal[lit], to_light[lit], obj)
    visible = np.zeros(len(p))
    visible[lit] = t >= reach[lit]
    return scene.ambient + (1.0 - scene.ambient) * cosine * visible


def render(scene: Scene, camera: Camera, resolution: int, max_depth: float = 50.0) -> Render:
    """Ray-cast one resolution x resolution view of `scene` (see the package conventions).

    Args:
        scene: the scene.
        camera: the camera.
        resolution: the image side in pixels.
        max_depth: the far plane, metres.

    Returns:
        The Render.
    """
    o, d = _rays(camera, resolution)
    obj = _object_arrays(scene)
    t_obj, k_obj = _cast_objects(o, d, obj)
    t_env, part = cast_environment(o, d, scene)
    on_obj_ray = t_obj < t_env
    t = np.minimum(t_obj, t_env)
    hit = t <= max_depth  # the far plane clips the ground near the horizon
    on_obj, on_env = hit & on_obj_ray, hit & ~on_obj_ray
    depth = np.where(hit, t, max_depth)
    p = o + depth[:, None] * d

    normal, albedo = np.zeros_like(d), np.zeros_like(d)
    pattern = np.zeros(len(d), dtype=bool)
    normal[on_env], albedo[on_env] = environment_surface(p[on_env], part[on_env], scene)
    normal[on_obj], albedo[on_obj], pattern[on_obj] = _surface(p[on_obj], d[on_obj], k_obj[on_obj], scene, obj)
    shade = np.ones(len(d))
    shade[hit] = _lit(p[hit], normal[hit], scene, obj)

    # Distant surfaces fade into the horizon colour (aerial perspective), hiding the far plane.
    horizon = np.asarray(scene.sky_colors[0], float)
    fog = (depth / max_depth)[:, None] ** 1.5
    lit = albedo * shade[:, None] * np.asarray(scene.light_color, float)
    color = np.where(hit[:, None], lit * (1 - fog) + fog * horizon, sky(o, d, scene))

    hw = (resolution, resolution)
    return Render(
        rgb=np.round(np.clip(color, 0.0, 1.0) * 255).astype(np.uint8).reshape(*hw, 3),
        depth=depth.astype(np.float32).reshape(hw),
        object_id=np.where(hit, np.where(on_obj_ray, k_obj + 1, 0), -1).astype(np.int16).reshape(hw),
        normal=normal.astype(np.float32).reshape(*hw, 3),
        shade=shade.astype(np.float32).reshape(hw),
        pattern=pattern.reshape(hw),
    )
