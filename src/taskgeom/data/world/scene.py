"""What a world is made of: its sampling ranges, textured primitives and scenes."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

SHAPES: tuple[str, ...] = ("sphere", "box", "cylinder", "cone", "fractal")
PATTERNS: tuple[str, ...] = ("stripes", "checker", "spots", "marble")
FAMILIES: tuple[str, ...] = ("outdoor", "room")
CLASS_NAMES: tuple[str, ...] = tuple(f"{s}-{p}" for s in SHAPES for p in PATTERNS)
RESOLUTIONS: tuple[int, ...] = (64, 96, 128)

AMBIENT = 0.35  # default share of light that reaches surfaces facing away from the light
UP = np.array([0.0, 1.0, 0.0])  # the world frame's up axis


@dataclass(frozen=True)
class WorldSpec:
    """Ranges the world samples from (all inclusive; lengths in metres).

    `camera_distance` is the horizontal distance from the main object,
    `camera_height` the camera's height above the ground; `room_*` the same
    inside rooms, whose half-widths are `room_size` and ceiling `room_height`;
    `room_fov_deg` is the rooms' field of view; the profiles give it a single
    value, as NYU-Depth-V2 comes from one camera, so that a room's metric depth
    is not confounded with an unknown focal length.
    `room_share` is the probability that a scene is a room.

    Attributes:
        num_objects: (low, high) objects per scene, the main object included (low ≥ 1).
        fov_deg: (low, high) outdoor field of view, degrees in (0, 180).
        camera_distance: (low, high) outdoor horizontal distance to the main object.
        camera_height: (low, high) outdoor camera height (low > 0).
        max_depth: the far plane (> 0).
        room_share: the probability that a scene is a room.
        room_size: (low, high) a room's half-widths.
        room_height: (low, high) a room's ceiling height.
        room_camera_distance: (low, high) in rooms; at least 0.5 m inside the walls.
        room_camera_height: (low, high) in rooms; at least 0.3 m below the ceiling.
        room_fov_deg: (low, high) in rooms, degrees in (0, 180).
    """

    num_objects: tuple[int, int] = (3, 6)
    fov_deg: tuple[float, float] = (45.0, 70.0)
    camera_distance: tuple[float, float] = (4.0, 8.0)
    camera_height: tuple[float, float] = (1.0, 4.0)
    max_depth: float = 50.0
    room_share: float = 0.0
    room_size: tuple[float, float] = (4.5, 6.5)
    room_height: tuple[float, float] = (2.6, 3.4)
    room_camera_distance: tuple[float, float] = (2.5, 3.8)
    room_camera_height: tuple[float, float] = (0.9, 2.0)
    room_fov_deg: tuple[float, float] = (45.0, 70.0)

    def __post_init__(self) -> None:
        """Check every range.

        Raises:
            ValueError: a range with low > high, or a value outside its bounds, naming the field.
        """
        for name in ("num_objects", "fov_deg", "camera_distance", "camera_height", "room_size", "room_height",
                     "room_camera_distance", "room_camera_height", "room_fov_deg"):
            lo, hi = getattr(self, name)
            if not lo <= hi:
                raise ValueError(f"WorldSpec.{name}: expected (low, high) with low <= high, got {(lo, hi)}")
        if self.num_objects[0] < 1:
            raise ValueError(f"WorldSpec.num_objects: need at least the main object, got {self.num_objects}")
        for name in ("fov_deg", "room_fov_deg"):
            lo, hi = getattr(self, name)
            if not (0.0 < lo and hi < 180.0):
                raise ValueError(f"WorldSpec.{name}: expected degrees in (0, 180), got {(lo, hi)}")
        if self.camera_height[0] <= 0.0 or self.max_depth <= 0.0:
            raise ValueError("WorldSpec: camera_height and max_depth must be positive")
        if not 0.0 <= self.room_share <= 1.0:
            raise ValueError(f"WorldSpec.room_share: expected a probability, got {self.room_share}")
        if (self.room_camera_distance[1] + 0.5 > self.room_size[0]
                or self.room_camera_height[1] + 0.3 > self.room_height[0]):
            raise ValueError("WorldSpec: room cameras must stay 0.5 m inside the walls and 0.3 m below the ceiling")

    def as_dict(self) -> dict:
        """Plain values (tuples as lists) for HDF5 attributes and JSON.

        Returns:
            field name -> value.
        """
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Primitive:
    """One textured solid. `center` is the geometric centre; `half_size` the
    half-extents of its local bounding box: sphere (r, r, r), box (hx, hy, hz),
    cylinder (r, half_height, r) with its axis along +y, cone the same with its
    apex at the top, fractal (w, half_height, w): two crossed vertical panels
    (the object frame's x-y and z-y planes) cut to the IFS fractal of
    `texture_seed` (`ifs.fractal_mask`). `yaw` (radians, about +y) turns the
    primitive and its texture.

    Texture: solid 3-D pattern in the object's yaw frame, `frequency` cycles
    per metre (`textures.pattern_mask`), its colours modulated by fractal
    noise; `texture_seed` seeds the noise, the spots, the veins, the fractal.

    Attributes:
        shape: one of SHAPES.
        center: (3,) world position, metres.
        half_size: (3,) half-extents (above).
        yaw: radians about +y.
        color: RGB in [0, 1] of the base.
        pattern_color: RGB in [0, 1] of the pattern.
        pattern: one of PATTERNS.
        frequency: pattern cycles per metre.
        stripe_dir: (3,) the stripes' direction in the object frame.
        phase: (3,) offset, metres, added to object-frame points before scaling by `frequency`.
        texture_seed: seeds the texture (and a fractal's shape).
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
    texture_seed: int = 0

    def __post_init__(self) -> None:
        """Check the shape and pattern.

        Raises:
            ValueError: a shape not in SHAPES or a pattern not in PATTERNS.
        """
        if self.shape not in SHAPES or self.pattern not in PATTERNS:
            raise ValueError(f"Primitive: shape must be in {SHAPES} and pattern in {PATTERNS}, "
                             f"got {self.shape!r}, {self.pattern!r}")

    @property
    def footprint(self) -> float:
        """Radius of the primitive's shadow on the ground plane (any yaw)."""
        hx, _, hz = self.half_size
        return float(np.hypot(hx, hz)) if self.shape in ("box", "fractal") else float(hx)


@dataclass(frozen=True)
class Scene:
    """Primitives (objects[0] is the main object), a light and the surroundings.

    Outdoor (`room` None): a ground plane, hills on a circle of `hills[0]` metres around the
    origin with a base height `hills[1]` and relief `hills[2]` (a 1/f profile in azimuth), a sky
    with clouds covering about `clouds` of it, and the sun at infinity towards `light_dir`.
    Room (`room` = (half-width x, ceiling height, half-width z)): floor y = 0, four walls and a
    ceiling around the origin, lit by a lamp at `light_pos`. Both: `ground_colors` are the two
    ends of the floor's or ground's leaf palette (`textures.dead_leaves`, leaves of `leaf_size`
    metres and smaller), `wall_colors` the walls' and the hills' palette; `texture_seed` seeds
    every surrounding texture. With `texture_seed` 0 and `room`, `hills` None the surroundings
    are plain: a single-colour ground and a cloudless sky (hand-made test scenes).

    Attributes:
        objects: the primitives, the main object first.
        light_dir: (3,) towards the sun, normalised on use.
        ground_colors: two RGB ends of the ground's or floor's palette.
        sky_colors: RGB at the horizon and at the zenith.
        wall_colors: two RGB ends of the walls' and hills' palette.
        light_color: RGB of the light.
        ambient: the share of light reaching surfaces facing away from it.
        leaf_size: the largest dead-leaves size, metres.
        clouds: the sky's cloud cover, in [0, 1].
        hills: (radius, base height, relief) outdoors, or None.
        room: (half-width x, ceiling height, half-width z), or None outdoors.
        light_pos: (3,) the lamp in a room, or None.
        texture_seed: seeds every surrounding texture.
    """

    objects: tuple[Primitive, ...]
    light_dir: tuple[float, float, float] = (0.4, 0.8, 0.3)  # towards the sun; normalised on use
    ground_colors: tuple[tuple[float, ...], tuple[float, ...]] = ((0.55, 0.52, 0.45), (0.45, 0.43, 0.37))
    sky_colors: tuple[tuple[float, ...], tuple[float, ...]] = ((0.78, 0.85, 0.92), (0.35, 0.55, 0.85))
    wall_colors: tuple[tuple[float, ...], tuple[float, ...]] = ((0.75, 0.72, 0.66), (0.55, 0.5, 0.45))
    light_color: tuple[float, float, float] = (1.0, 1.0, 1.0)
    ambient: float = AMBIENT
    leaf_size: float = 1.0
    clouds: float = 0.0
    hills: tuple[float, float, float] | None = None
    room: tuple[float, float, float] | None = None
    light_pos: tuple[float, float, float] | None = None
    texture_seed: int = 0

    @property
    def family(self) -> str:
        """"room" or "outdoor" (see FAMILIES)."""
        return "outdoor" if self.room is None else "room"

    @property
    def label(self) -> int:
        """Class id of the main object: shape index * len(PATTERNS) + pattern index (see CLASS_NAMES)."""
        main = self.objects[0]
        return SHAPES.index(main.shape) * len(PATTERNS) + PATTERNS.index(main.pattern)

