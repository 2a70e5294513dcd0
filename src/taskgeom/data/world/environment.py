"""A scene's surroundings: ground, hills and sky outdoors; floor, walls and ceiling in rooms.

Parts (the `part` codes `cast` returns): GROUND (y = 0: the outdoor ground or a room's floor),
HILLS (outdoors: the inside of a vertical cylinder of radius R around the origin, up to a height
H(azimuth) = base + relief · s(azimuth), s a 1/f profile in azimuth, so the skyline is
scale-invariant like a natural one), WALL_X / WALL_Z (a room's walls x = ±hx, z = ±hz) and
CEILING (y = room height). Every part is textured with `textures`: the ground and floor with
dead leaves and fractal grain, the hills and walls with fractal noise between their two colours.
The sky darkens from the horizon to the zenith and carries clouds: fractal noise on a plane
300 m up, thresholded to cover about `Scene.clouds` of it.
"""

from __future__ import annotations

from functools import lru_cache
from statistics import NormalDist

import numpy as np

from taskgeom.data.world.scene import Scene
from taskgeom.data.world.textures import dead_leaves, fractal_noise

GROUND, HILLS, WALL_X, WALL_Z, CEILING = range(5)
CLOUD_HEIGHT = 300.0  # metres
_EPS = 1e-6
_PROFILE_TERMS = 24


@lru_cache(maxsize=1024)
def _profile(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Amplitudes ∝ 1/k (normalised to peak 1) and phases of the hills' azimuth harmonics k = 1..24."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(13,)))
    amp = rng.uniform(0.5, 1.0, _PROFILE_TERMS) / np.arange(1, _PROFILE_TERMS + 1)
    return amp / amp.sum(), rng.uniform(0, 2 * np.pi, _PROFILE_TERMS)


def hill_height(azimuth: np.ndarray, scene: Scene) -> np.ndarray:
    """Height of the hills' skyline at the given azimuths (radians about +y).

    Args:
        azimuth: (P,) radians.
        scene: an outdoor scene with hills.

    Returns:
        (P,) heights in metres.
    """
    _, base, relief = scene.hills
    amp, phase = _profile(scene.texture_seed)
    k = np.arange(1, _PROFILE_TERMS + 1)
    return base + relief * np.cos(azimuth[:, None] * k + phase) @ amp


def _hit_ground(o: np.ndarray, d: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        t = -o[:, 1] / d[:, 1]
    return np.where(t > _EPS, t, np.inf)


def _hit_hills(o: np.ndarray, d: np.ndarray, scene: Scene) -> np.ndarray:
    """Far root of |o_xz + t d_xz| = R (origins inside the circle), below the skyline."""
    radius = scene.hills[0]
    a = d[:, 0] ** 2 + d[:, 2] ** 2
    b = o[:, 0] * d[:, 0] + o[:, 2] * d[:, 2]
    c = o[:, 0] ** 2 + o[:, 2] ** 2 - radius**2
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (-b + np.sqrt(np.maximum(b * b - a * c, 0.0))) / a
    p = o + t[:, None] * d
    below = p[:, 1] <= hill_height(np.arctan2(p[:, 2], p[:, 0]), scene)
    return np.where((t > _EPS) & below & (p[:, 1] >= 0), t, np.inf)


def _hit_room(o: np.ndarray, d: np.ndarray, scene: Scene) -> tuple[np.ndarray, np.ndarray]:
    """Exit point of the room's box for origins inside it: t (P,) and part (P,)."""
    hx, height, hz = scene.room
    lo, hi = np.array([-hx, 0.0, -hz]), np.array([hx, height, hz])
    with np.errstate(divide="ignore", invalid="ignore"):
        t_exit = np.where(d > 0, (hi - o) / d, np.where(d < 0, (lo - o) / d, np.inf))  # (P, 3)
    axis = np.argmin(t_exit, axis=1)
    t = t_exit[np.arange(len(d)), axis]
    part = np.choose(axis, [np.full(len(d), WALL_X), np.where(d[:, 1] > 0, CEILING, GROUND), np.full(len(d), WALL_Z)])
    return t, part


def cast(o: np.ndarray, d: np.ndarray, scene: Scene) -> tuple[np.ndarray, np.ndarray]:
    """Nearest hit of rays on the surroundings.

    Args:
        o: (P, 3) ray origins, world frame.
        d: (P, 3) ray directions.
        scene: the scene (a room's box, or the ground and hills).

    Returns:
        t (P,) ray parameters (inf: sky) and part (P,), a code among GROUND, HILLS, WALL_X, WALL_Z,
        CEILING.
    """
    if scene.room is not None:
        return _hit_room(o, d, scene)
    t = _hit_ground(o, d)
    part = np.full(len(d), GROUND)
    if scene.hills is not None:
        t_hills = _hit_hills(o, d, scene)
        part = np.where(t_hills < t, HILLS, part)
        t = np.minimum(t, t_hills)
    return t, part


def _mix(colors: tuple[tuple[float, ...], tuple[float, ...]], w: np.ndarray) -> np.ndarray:
    a, b = (np.asarray(c, float) for c in colors)
    return a + np.clip(w, 0.0, 1.0)[:, None] * (b - a)


def surface(p: np.ndarray, part: np.ndarray, scene: Scene) -> tuple[np.ndarray, np.ndarray]:
    """World normals and albedo at points on parts of the surroundings.

    Args:
        p: (P, 3) world points.
        part: (P,) their part codes (``cast``).
        scene: the scene, whose seed and colours texture them.

    Returns:
        normals (P, 3) and albedo (P, 3) in [0, 1].
    """
    seed = scene.texture_seed
    normal, albedo = np.zeros_like(p), np.zeros_like(p)
    g = part == GROUND
    normal[g] = (0.0, 1.0, 0.0)
    sizes = tuple(scene.leaf_size * 0.5**i for i in range(4))
    leaf, shade = dead_leaves(p[g][:, [0, 2]], seed, sizes)
    grain = fractal_noise(p[g][:, [0, 2]], seed + 1, 0.5 / scene.leaf_size, octaves=6)
    albedo[g] = _mix(scene.ground_colors, np.where(leaf < 0, 0.5, leaf)) * (0.85 + 0.3 * shade[:, None]) \
        * (1 + 0.12 * grain[:, None])
    h = part == HILLS
    normal[h] = -p[h] * (1.0, 0.0, 1.0) / np.hypot(p[h, 0], p[h, 2])[:, None]
    azimuth = np.arctan2(p[h, 2], p[h, 0]) * scene.hills[0] if scene.hills is not None else p[h, 0]
    noise = fractal_noise(np.stack([azimuth, p[h, 1]], -1), seed + 2, 0.05, octaves=6)
    albedo[h] = _mix(scene.wall_colors, 0.5 + 0.25 * noise)
    for code, axis in ((WALL_X, 0), (WALL_Z, 2), (CEILING, 1)):
        m = part == code
        normal[m, axis] = -np.sign(p[m, axis])
        noise = fractal_noise(p[m], seed + 3 + code, 0.3, octaves=6)
        tone = 0.5 + 0.25 * noise if code != CEILING else 0.1 + 0.1 * noise
        albedo[m] = _mix(scene.wall_colors, tone)
    return normal, np.clip(albedo, 0.0, 1.0)


def _cloud_threshold(cover: float) -> float:
    return NormalDist().inv_cdf(min(max(1.0 - cover, 1e-6), 1 - 1e-6))


def sky(o: np.ndarray, d: np.ndarray, scene: Scene) -> np.ndarray:
    """Sky colour along rays: horizon to zenith, with clouds above (outdoors).

    Args:
        o: (P, 3) ray origins.
        d: (P, 3) ray directions.
        scene: the scene (its sky colours, cloud cover and light).

    Returns:
        (P, 3) RGB colours.
    """
    horizon, zenith = (np.asarray(c, float) for c in scene.sky_colors)
    up = d[:, 1] / np.linalg.norm(d, axis=1)
    colour = horizon + (np.clip(up, 0.0, 1.0) ** 0.6)[:, None] * (zenith - horizon)
    if scene.clouds <= 0 or scene.room is not None:
        return colour
    rising = up > 1e-3
    t = (CLOUD_HEIGHT - o[rising, 1]) / d[rising, 1]
    at = o[rising][:, [0, 2]] + t[:, None] * d[rising][:, [0, 2]]
    density = fractal_noise(at, scene.texture_seed + 9, 1 / 3000, octaves=4)
    alpha = np.clip((density - _cloud_threshold(scene.clouds)) / 1.5, 0.0, 1.0) * np.clip(up[rising] / 0.15, 0.0, 1.0)
    cloud = np.asarray(scene.light_color, float) * (0.97 - 0.2 * np.clip(density - 1.5, 0.0, 1.0))[:, None]
    colour[rising] = colour[rising] * (1 - alpha[:, None]) + alpha[:, None] * cloud
    return colour
