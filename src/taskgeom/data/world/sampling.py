"""Random scenes and cameras of a world, and rendering whole splits of it.

Scene i of a world depends only on (seed, i) and view v of it only on (seed, i, v).
"""

from __future__ import annotations

import numpy as np

from taskgeom.data.world.camera import Camera, look_at
from taskgeom.data.world.drawing import sketch
from taskgeom.data.world.raycast import render
from taskgeom.data.world.scene import CLASS_NAMES, FAMILIES, PATTERNS, SHAPES, Primitive, Scene, WorldSpec

DEFAULT_SPEC = WorldSpec()  # frozen, so one default serves every call


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
    elif shape == "fractal":
        w = size * rng.uniform(0.8, 1.1)
        half = (w, size * rng.uniform(0.9, 1.3), w)
    else:  # cylinder, cone
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
        texture_seed=int(rng.integers(2**31)),
    )


def _furniture(rng: np.random.Generator, room: tuple[float, float, float], count: int) -> list[Primitive]:
    """`count` boxes and cylinders standing against a room's walls (cabinets, tables, stools)."""
    hx, _, hz = room
    out = []
    for _ in range(count):
        shape = ("box", "box", "cylinder")[rng.integers(3)]
        size = rng.uniform(0.3, 0.55)
        wall, along = int(rng.integers(4)), rng.uniform(-0.8, 0.8)
        inset = size + 0.05
        xz = [((hx - inset) * (1 - 2 * (wall // 2)), along * hz), (along * hx, (hz - inset) * (1 - 2 * (wall // 2)))][
            wall % 2]
        out.append(_sample_primitive(rng, shape, PATTERNS[rng.integers(len(PATTERNS))], size, xz))
    return out


def _surroundings(rng: np.random.Generator, room: bool, spec: WorldSpec) -> dict:
    """A scene's light and surroundings (Scene fields), outdoors or in a room."""
    tint = np.array(_hsv_to_rgb(rng.uniform(0.05, 0.6), rng.uniform(0.0, 0.15), 1.0))
    ground_hue = rng.uniform()
    ground = np.array(_hsv_to_rgb(ground_hue, rng.uniform(0.1, 0.45), rng.uniform(0.4, 0.7)))
    ground_far = np.array(_hsv_to_rgb((ground_hue + rng.uniform(-0.08, 0.08)) % 1, rng.uniform(0.1, 0.5),
                                      rng.uniform(0.2, 0.45)))
    walls = np.array(_hsv_to_rgb(rng.uniform(), rng.uniform(0.05, 0.4), rng.uniform(0.55, 0.9)))
    out = {"ground_colors": (tuple(ground), tuple(ground_far)), "light_color": tuple(tint),
           "ambient": float(rng.uniform(0.25, 0.5)), "texture_seed": int(rng.integers(1, 2**31))}
    if room:
        size = (float(rng.uniform(*spec.room_size)), float(rng.uniform(*spec.room_height)),
                float(rng.uniform(*spec.room_size)))
        lamp = (float(rng.uniform(-1.5, 1.5)), size[1] - 0.05, float(rng.uniform(-1.5, 1.5)))
        return out | {"room": size, "light_pos": lamp, "leaf_size": float(rng.uniform(0.3, 0.8)),
                      "wall_colors": (tuple(walls), tuple(walls * rng.uniform(0.5, 0.8)))}
    azimuth, elevation = rng.uniform(0, 2 * np.pi), rng.uniform(np.radians(20), np.radians(70))
    light = (np.cos(elevation) * np.cos(azimuth), np.sin(elevation), np.cos(elevation) * np.sin(azimuth))
    hill = np.array(_hsv_to_rgb(rng.uniform(0.15, 0.45), rng.uniform(0.2, 0.5), rng.uniform(0.3, 0.6)))
    sky = np.array([0.78, 0.85, 0.92]) + rng.normal(0, 0.03, 3), np.array([0.35, 0.55, 0.85]) + rng.normal(0, 0.05, 3)
    return out | {
        "light_dir": tuple(float(x) for x in light), "leaf_size": float(rng.uniform(0.8, 2.0)),
        "clouds": float(rng.uniform(0.1, 0.6)),
        "hills": (float(rng.uniform(22.0, 32.0)), float(rng.uniform(4.0, 8.0)), float(rng.uniform(1.5, 5.0))),
        "wall_colors": (tuple(hill), tuple(hill * rng.uniform(0.4, 0.7))),
        "sky_colors": tuple(tuple(np.clip(c, 0, 1)) for c in sky),
    }


def sample_scene(seed: int, index: int, spec: WorldSpec = DEFAULT_SPEC) -> Scene:
    """Scene `index` of the world `seed`: a room with probability `spec.room_share`, else an
    outdoor scene. The main object (uniform over the classes; smaller in rooms) stands within
    0.2 m of the origin; the others stand on a ring around it, spaced in angle and clear of it
    and of each other; rooms add 2-4 pieces of furniture against their walls.

    Args:
        seed: the world's seed.
        index: the scene's index; scene i draws from its own stream, so scenes are independent.
        spec: the ranges sampled from.

    Returns:
        The Scene.
    """
    rng = _rng(seed, index, 0)
    room = bool(rng.uniform() < spec.room_share)
    n = int(rng.integers(spec.num_objects[0], spec.num_objects[1] + 1))
    label = int(rng.integers(len(CLASS_NAMES)))
    main = _sample_primitive(rng, SHAPES[label // len(PATTERNS)], PATTERNS[label % len(PATTERNS)],
                             rng.uniform(0.6, 1.0) if room else rng.uniform(1.0, 1.6),
                             tuple(rng.uniform(-0.2, 0.2, 2)))
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
    surroundings = _surroundings(rng, room, spec)
    if room:
        objects += _furniture(rng, surroundings["room"], int(rng.integers(2, 5)))
    return Scene(objects=tuple(objects), **surroundings)


def sample_cameras(scene: Scene, seed: int, index: int, views: int, spec: WorldSpec = DEFAULT_SPEC) -> list[Camera]:
    """`views` cameras around the main object of scene `index`. Each looks at
    the main object's centre (jittered by ~0.1 m) from an azimuth chosen among
    8 random candidates so its line of sight clears the other objects'
    footprints where possible; later views stay within ±60° of the first's azimuth.

    Args:
        scene: the scene (``sample_scene(seed, index, spec)``).
        seed: the world's seed.
        index: the scene's index; view v draws from its own stream.
        views: cameras.
        spec: the ranges sampled from.

    Returns:
        ``views`` Cameras.
    """
    main, others = scene.objects[0], scene.objects[1:]
    target = np.asarray(main.center)
    centers = np.array([p.center for p in others]).reshape(-1, 3)[:, [0, 2]]
    radii = np.array([p.footprint for p in others])
    cameras = []
    first = 0.0  # the first view's azimuth: set at v == 0, read by the later views
    for v in range(views):
        rng = _rng(seed, index, 1, v)
        room = scene.room is not None
        distance = rng.uniform(*(spec.room_camera_distance if room else spec.camera_distance))
        height = rng.uniform(*(spec.room_camera_height if room else spec.camera_height))
        fov = rng.uniform(*(spec.room_fov_deg if room else spec.fov_deg))
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
                 spec: WorldSpec = DEFAULT_SPEC, start: int = 0) -> dict[str, np.ndarray]:
    """Scenes start..start+num_scenes-1 of the world with this seed, each from ``views`` cameras.

    Args:
        num_scenes: S.
        seed: the world's seed.
        resolution: H = W.
        views: V.
        spec: the ranges sampled from.
        start: the first scene's index.

    Returns:
        rgb (S,V,H,W,3) uint8, sketch (S,V,H,W,3) uint8, depth (S,V,H,W) float32,
        K (S,V,3,3) float32, cam_to_world (S,V,4,4) float32, label (S,) int64,
        family (S,) int8 (index into FAMILIES), object_id (S,V,H,W) int16.

    Raises:
        ValueError: a negative count or start, or views or resolution below 1.
    """
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
        "family": np.empty((s,), np.int8),
        "object_id": np.empty((s, v, r, r), np.int16),
    }
    for i in range(s):
        scene = sample_scene(seed, start + i, spec)
        out["label"][i], out["family"][i] = scene.label, FAMILIES.index(scene.family)
        for j, camera in enumerate(sample_cameras(scene, seed, start + i, views, spec)):
            view = render(scene, camera, resolution, spec.max_depth)
            out["rgb"][i, j], out["depth"][i, j], out["object_id"][i, j] = view.rgb, view.depth, view.object_id
            out["sketch"][i, j] = sketch(view)
            out["K"][i, j], out["cam_to_world"][i, j] = camera.K(resolution), camera.cam_to_world
    return out
