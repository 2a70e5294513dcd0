"""Procedural synthetic RGB-D world: the embedded default dataset.

Each scene is a main object and clutter (spheres, yaw-rotated boxes, upright
cylinders and cones, and FractalDB-style IFS fractals cut out of crossed
panels), textured with one of four solid patterns under fractal grain, in one
of two families of surroundings: outdoors (a dead-leaves ground, hills with a
1/f skyline, a sky with clouds, the sun) or a room (floor, walls, ceiling,
furniture, a lamp: finite depth everywhere, the NYU-Depth-V2 role). Primitives
cast shadows. The textures (`textures`) give the images a roughly 1/f² power
spectrum and occlusion edges at every scale, as natural images have (cf.
Baradad et al. 2021). Scenes are ray-cast analytically with vectorised numpy
into RGB, metric depth, object ids and normals, seen by one or more pinhole
cameras. A line-drawing rendering of the same geometry (`sketch`) plays the
role of ImageNet-Sketch: same content, different appearance.

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
- object_id: -1 sky, 0 the surroundings (ground, hills, floor, walls,
  ceiling), k >= 1 the k-th primitive; 1 is the main object, whose shape x
  texture pattern is the scene's class label (20 classes, `CLASS_NAMES`).

Determinism: scene i of a world depends only on (seed, i) and view v of it
only on (seed, i, v), through `np.random.SeedSequence(seed, spawn_key=...)`,
so chunked rendering equals one big call and any resolution sees the same
scene and cameras; textures are functions of the surface point (integer
hashes and seeded waves), never of the pixel grid. Rendering is point-sampled
(one ray per pixel centre, no anti-aliasing).

Modules: `scene` (what a world is made of: WorldSpec, Primitive, Scene),
`camera` (pinhole cameras and their geometry), `textures` and `ifs` (the
procedural textures and fractal shapes), `environment` (the surroundings),
`raycast` (rendering a view), `drawing` (its line drawing) and `sampling`
(random scenes, cameras, splits).
"""

from taskgeom.data.world.camera import Camera, backproject, look_at, relative_pose
from taskgeom.data.world.drawing import HATCH, INK, PAPER, PENCIL, sketch
from taskgeom.data.world.raycast import Render, render
from taskgeom.data.world.sampling import render_split, sample_cameras, sample_scene
from taskgeom.data.world.scene import (
    AMBIENT,
    CLASS_NAMES,
    FAMILIES,
    PATTERNS,
    RESOLUTIONS,
    SHAPES,
    Primitive,
    Scene,
    WorldSpec,
)

__all__ = [
    "AMBIENT", "CLASS_NAMES", "FAMILIES", "HATCH", "INK", "PAPER", "PATTERNS", "PENCIL", "RESOLUTIONS", "SHAPES",
    "Camera",
    "Primitive", "Render", "Scene", "WorldSpec", "backproject", "look_at", "relative_pose", "render", "render_split",
    "sample_cameras", "sample_scene", "sketch",
]
