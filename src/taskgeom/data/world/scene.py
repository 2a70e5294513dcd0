"""What a world is made of: its sampling ranges, textured primitives and scenes."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

SHAPES: tuple[str, ...] = ("sphere", "box", "cylinder")
PATTERNS: tuple[str, ...] = ("stripes", "checker")
CLASS_NAMES: tuple[str, ...] = tuple(f"{s}-{p}" for s in SHAPES for p in PATTERNS)
RESOLUTIONS: tuple[int, ...] = (64, 96, 128)

AMBIENT = 0.35  # share of light that reaches surfaces facing away from the sun
UP = np.array([0.0, 1.0, 0.0])  # the world frame's up axis


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

