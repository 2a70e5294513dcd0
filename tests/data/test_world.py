"""Tests for the synthetic RGB-D world (taskgeom.data.world)."""

from __future__ import annotations

import numpy as np
import pytest

from taskgeom.data import world as W
from taskgeom.data.world import (
    CLASS_NAMES,
    FAMILIES,
    RESOLUTIONS,
    Primitive,
    Scene,
    WorldSpec,
    backproject,
    look_at,
    relative_pose,
    render,
    render_split,
    sample_scene,
    sketch,
)

KEYS = {"rgb": np.uint8, "sketch": np.uint8, "depth": np.float32, "K": np.float32,
        "cam_to_world": np.float32, "label": np.int64, "family": np.int8, "object_id": np.int16}


def _to_world(points: np.ndarray, cam_to_world: np.ndarray) -> np.ndarray:
    """(..., 3) camera-frame points to world."""
    return points @ cam_to_world[:3, :3].T + cam_to_world[:3, 3]


def _dilate(mask: np.ndarray) -> np.ndarray:
    """(H, W) mask grown by one pixel in the 8-neighbourhood."""
    padded = np.pad(mask, 1)
    h, w = mask.shape
    return np.any([padded[i:i + h, j:j + w] for i in range(3) for j in range(3)], axis=0)


@pytest.fixture(scope="module")
def two_view() -> dict[str, np.ndarray]:
    return render_split(4, seed=11, resolution=128, views=2)


# --------------------------------------------------------------------------- API and determinism


def test_class_names_and_resolutions():
    assert len(CLASS_NAMES) == 20 and len(set(CLASS_NAMES)) == 20
    assert CLASS_NAMES[0] == "sphere-stripes" and CLASS_NAMES[5] == "box-checker"
    assert CLASS_NAMES[-1] == "fractal-marble"
    assert RESOLUTIONS == (64, 96, 128)


@pytest.mark.parametrize("resolution", RESOLUTIONS)
def test_shapes_and_dtypes(resolution):
    out = render_split(2, seed=0, resolution=resolution, views=3)
    assert set(out) == set(KEYS)
    r = resolution
    expected = {"rgb": (2, 3, r, r, 3), "sketch": (2, 3, r, r, 3), "depth": (2, 3, r, r), "K": (2, 3, 3, 3),
                "cam_to_world": (2, 3, 4, 4), "label": (2,), "family": (2,), "object_id": (2, 3, r, r)}
    for key, shape in expected.items():
        assert out[key].shape == shape, key
        assert out[key].dtype == KEYS[key], key
    assert np.all(out["depth"] > 0) and np.all(out["depth"] <= WorldSpec().max_depth)
    assert np.all((out["object_id"] == -1) == (out["depth"] == WorldSpec().max_depth))
    assert np.all(out["object_id"] >= -1)
    # Rotations are orthonormal and right-handed; K has the principal point at the centre.
    rot = out["cam_to_world"][..., :3, :3].astype(np.float64)
    np.testing.assert_allclose(rot @ np.swapaxes(rot, -1, -2), np.broadcast_to(np.eye(3), rot.shape), atol=1e-6)
    np.testing.assert_allclose(np.linalg.det(rot), 1.0, atol=1e-6)
    np.testing.assert_allclose(out["K"][..., 0, 2], (r - 1) / 2)


def test_same_seed_same_arrays_different_seed_different():
    a = render_split(3, seed=5, resolution=64, views=2)
    b = render_split(3, seed=5, resolution=64, views=2)
    c = render_split(3, seed=6, resolution=64, views=2)
    for key in KEYS:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["rgb"], c["rgb"])
    assert not np.array_equal(a["depth"], c["depth"])


def test_chunked_equals_whole_and_views_are_prefix_stable():
    whole = render_split(5, seed=3, resolution=64, views=2)
    parts = [render_split(2, seed=3, resolution=64, views=2, start=0),
             render_split(3, seed=3, resolution=64, views=2, start=2)]
    one_view = render_split(5, seed=3, resolution=64, views=1)
    for key in KEYS:
        np.testing.assert_array_equal(whole[key], np.concatenate([p[key] for p in parts]))
        if key not in ("label", "family"):
            np.testing.assert_array_equal(whole[key][:, :1], one_view[key])


def test_all_labels_occur():
    labels = [sample_scene(0, i).label for i in range(150)]  # a split's labels, without rendering it
    assert render_split(4, seed=0, resolution=8)["label"].tolist() == labels[:4]
    assert set(labels) == set(range(len(CLASS_NAMES)))


def test_spec_validation_and_as_dict():
    spec = WorldSpec(num_objects=(1, 2), fov_deg=(50.0, 50.0))
    assert spec.as_dict() == {"num_objects": [1, 2], "fov_deg": [50.0, 50.0], "camera_distance": [4.0, 8.0],
                              "camera_height": [1.0, 4.0], "max_depth": 50.0, "room_share": 0.0,
                              "room_size": [4.5, 6.5], "room_height": [2.6, 3.4],
                              "room_camera_distance": [2.5, 3.8], "room_camera_height": [0.9, 2.0],
                              "room_fov_deg": [45.0, 70.0]}
    out = render_split(6, seed=0, resolution=64, spec=spec)
    assert out["object_id"].max() <= 2
    np.testing.assert_allclose(out["K"][..., 0, 0], 32 / np.tan(np.radians(25.0)), rtol=1e-6)
    with pytest.raises(ValueError, match="num_objects"):
        WorldSpec(num_objects=(4, 3))
    with pytest.raises(ValueError, match="fov_deg"):
        WorldSpec(fov_deg=(45.0, 190.0))
    with pytest.raises(ValueError, match="room_fov_deg"):
        WorldSpec(room_fov_deg=(0.0, 50.0))
    with pytest.raises(ValueError, match="room_share"):
        WorldSpec(room_share=1.5)
    with pytest.raises(ValueError, match="inside the walls"):
        WorldSpec(room_size=(3.0, 4.0))


def test_rooms_take_their_own_field_of_view():
    """Rooms draw their field of view from room_fov_deg, outdoor scenes from fov_deg; the draw
    consumes the same random numbers either way, so outdoor scenes and the rooms' other
    camera draws are those of a world whose rooms share the outdoor range."""
    shared, fixed = WorldSpec(room_share=0.5), WorldSpec(room_share=0.5, room_fov_deg=(57.5, 57.5))
    a, b = (render_split(12, seed=4, resolution=16, views=2, spec=s) for s in (shared, fixed))
    room = b["family"] == FAMILIES.index("room")
    assert room.any() and (~room).any()
    fov = np.degrees(2 * np.arctan(8 / b["K"][..., 0, 0]))  # (S, V)
    np.testing.assert_allclose(fov[room], 57.5, rtol=1e-5)
    assert np.ptp(np.degrees(2 * np.arctan(8 / a["K"][room][..., 0, 0]))) > 1.0
    for key in ("rgb", "depth", "K", "cam_to_world"):
        np.testing.assert_array_equal(a[key][~room], b[key][~room])
    np.testing.assert_array_equal(a["cam_to_world"][room], b["cam_to_world"][room])


# --------------------------------------------------------------------------- geometry


def _single(primitive: Primitive, eye, target, resolution: int = 65):
    camera = look_at(np.array(eye, float), np.array(target, float), 60.0)
    return render(Scene(objects=(primitive,)), camera, resolution), camera


@pytest.mark.parametrize("primitive, eye, target, expected_depth, expected_id", [
    # Camera straight at a sphere: centre depth = distance - radius.
    (Primitive("sphere", (0.0, 1.0, 0.0), (0.5, 0.5, 0.5)), (0, 1, -5), (0, 1, 0), 4.5, 1),
    # Face of an axis-aligned box, then its vertical edge after a 45 deg yaw.
    (Primitive("box", (0.0, 1.0, 0.0), (0.5, 0.4, 0.3)), (0, 1, -5), (0, 1, 0), 4.7, 1),
    (Primitive("box", (0.0, 1.0, 0.0), (0.5, 0.4, 0.5), yaw=np.pi / 4), (0, 1, -5), (0, 1, 0),
     5 - 0.5 * np.sqrt(2), 1),
    # Cylinder wall seen from the side, then its top cap seen from above.
    (Primitive("cylinder", (0.0, 1.0, 0.0), (0.5, 0.6, 0.5)), (-6, 1, 0), (0, 1, 0), 5.5, 1),
    (Primitive("cylinder", (0.0, 1.0, 0.0), (0.5, 0.6, 0.5)), (0, 5.6, -3), (0, 1.6, 0), 5.0, 1),
    # Bare ground in front of the object.
    (Primitive("sphere", (0.0, 1.0, 5.0), (0.5, 0.5, 0.5)), (0, 3, -4), (0, 0, 0), 5.0, 0),
])
def test_centre_pixel_depth_matches_analytic_geometry(primitive, eye, target, expected_depth, expected_id):
    view, _ = _single(primitive, eye, target)  # 65 x 65: pixel (32, 32) lies on the optical axis
    assert view.depth[32, 32] == pytest.approx(expected_depth, abs=1e-4)
    assert view.object_id[32, 32] == expected_id


def test_centre_pixel_normal_faces_camera():
    view, camera = _single(Primitive("sphere", (0.0, 1.0, 0.0), (0.5, 0.5, 0.5)), (0, 1, -5), (0, 1, 0))
    np.testing.assert_allclose(view.normal[32, 32], [0, 0, -1], atol=1e-6)
    assert view.object_id[0, 0] == -1 and view.depth[0, 0] == 50.0
    assert view.object_id[-1, 32] == 0  # ground below the sphere


def _surface_error(prim: Primitive, points: np.ndarray) -> np.ndarray:
    """Distance-like error (P,) of world points from a primitive's surface, in units of its size."""
    c, s = np.cos(prim.yaw), np.sin(prim.yaw)
    q = points - prim.center
    q = np.stack([c * q[:, 0] - s * q[:, 2], q[:, 1], s * q[:, 0] + c * q[:, 2]], -1) / prim.half_size
    rho = np.hypot(q[:, 0], q[:, 2])
    if prim.shape == "sphere":
        return np.linalg.norm(q, axis=1) - 1
    if prim.shape == "box":
        return np.abs(q).max(axis=1) - 1
    if prim.shape == "cylinder":
        return np.maximum(rho, np.abs(q[:, 1])) - 1
    if prim.shape == "cone":  # side: rho = (1 - y) / 2 in units of (r, h); base: y = -1
        side, base = rho - (1 - q[:, 1]) / 2, q[:, 1] + 1
        return np.where(np.abs(base) < np.abs(side), base, side)
    # fractal: on one of the panels z = 0 or x = 0, within its extent
    return np.maximum(np.minimum(np.abs(q[:, 0]), np.abs(q[:, 2])), np.abs(q).max(axis=1) - 1)


@pytest.mark.parametrize("room_share", [0.0, 1.0])
def test_every_pixel_lies_on_its_surface(room_share):
    """Backprojected depth lands on the surface named by object_id: the ground (or a room's
    floor, walls, ceiling) or the hills for id 0, the primitive's surface for the others."""
    spec = WorldSpec(room_share=room_share)
    tol = 2e-3  # float32 depth and pose
    checked = set()
    for index in range(6):
        scene = W.sample_scene(11, index, spec)
        camera = W.sample_cameras(scene, 11, index, 1, spec)[0]
        view = render(scene, camera, 96)
        points = _to_world(backproject(view.depth.astype(np.float64), camera.K(96)), camera.cam_to_world)
        env = points[view.object_id == 0]
        if scene.room is None:
            radius = scene.hills[0]
            on_hills = np.abs(np.hypot(env[:, 0], env[:, 2]) - radius) < tol * radius
            assert (np.abs(env[:, 1]) < tol * 10)[~on_hills].all()
        else:
            assert (view.object_id >= 0).all()
            hx, height, hz = scene.room
            err = np.min(np.abs([env[:, 0] - hx, env[:, 0] + hx, env[:, 1], env[:, 1] - height,
                                 env[:, 2] - hz, env[:, 2] + hz]), axis=0)
            assert err.max() < tol * 10
        for k, prim in enumerate(scene.objects, start=1):
            if (view.object_id == k).sum() >= 4:
                err = _surface_error(prim, points[view.object_id == k])
                assert np.abs(err).max() < tol / min(prim.half_size[:2]), (prim.shape, index)
                checked.add(prim.shape)
    assert len(checked) >= 4


def test_same_scene_at_64_and_128_has_consistent_depth():
    low, high = render_split(3, seed=2, resolution=64), render_split(3, seed=2, resolution=128)
    np.testing.assert_allclose(high["K"][..., :2, :2], 2 * low["K"][..., :2, :2], rtol=1e-6)
    np.testing.assert_array_equal(low["cam_to_world"], high["cam_to_world"])
    # A 64-pixel centre sits at the shared corner of a 2x2 block of 128-pixels.
    # Average disparity, not depth: 1/z is affine in pixel coordinates on planes.
    disparity = (1.0 / high["depth"].astype(np.float64)).reshape(3, 1, 64, 2, 64, 2).mean(axis=(3, 5))
    ids = high["object_id"].reshape(3, 1, 64, 2, 64, 2)
    seen = low["object_id"] >= 0
    same = (ids == low["object_id"][:, :, :, None, :, None]).all(axis=(3, 5)) & seen
    assert same.sum() > 0.9 * seen.sum()
    rel = np.abs(1.0 / disparity - low["depth"]) / low["depth"]
    assert np.median(rel[same]) < 1e-4 and np.quantile(rel[same], 0.99) < 0.01


def test_relative_pose_matches_inverse():
    out = render_split(2, seed=4, resolution=64, views=3)
    c2w = out["cam_to_world"].astype(np.float64)
    pose = relative_pose(c2w[:, 1], c2w[:, 2])  # batched over scenes
    np.testing.assert_allclose(pose, np.linalg.inv(c2w[:, 1]) @ c2w[:, 2], atol=1e-5)
    np.testing.assert_allclose(relative_pose(c2w[0, 0], c2w[0, 0]), np.eye(4), atol=1e-6)
    # Composition: (a <- b)(b <- c) = (a <- c).
    np.testing.assert_allclose(relative_pose(c2w[0, 0], c2w[0, 1]) @ relative_pose(c2w[0, 1], c2w[0, 2]),
                               relative_pose(c2w[0, 0], c2w[0, 2]), atol=1e-5)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_points_seen_in_two_views_map_between_them(index):
    """Backproject view 0, move the points to view 1 with relative_pose,
    project with K: they land on view-1 pixels of the same surface at the
    same depth (up to the half-pixel rounding of the projection)."""
    res = 128
    scene = W.sample_scene(11, index)
    cams = W.sample_cameras(scene, 11, index, views=2)
    v0, v1 = (render(scene, cam, res) for cam in cams)
    K0, K1 = cams[0].K(res), cams[1].K(res)
    pose = relative_pose(cams[1].cam_to_world, cams[0].cam_to_world)  # view 0 in view 1's frame

    p0 = backproject(v0.depth.astype(np.float64), K0)  # (H, W, 3) view-0 frame
    world = _to_world(p0, cams[0].cam_to_world)
    p1 = p0 @ pose[:3, :3].T + pose[:3, 3]
    np.testing.assert_allclose(p1, (world - cams[1].cam_to_world[:3, 3]) @ cams[1].cam_to_world[:3, :3], atol=1e-6)
    uv = p1 @ K1.T
    u, v = np.round(uv[..., 0] / uv[..., 2]).astype(int), np.round(uv[..., 1] / uv[..., 2]).astype(int)
    inside = (p1[..., 2] > 0) & (u >= 1) & (u < res - 1) & (v >= 1) & (v < res - 1)
    # Keep surfaces facing both cameras at least 15 deg off grazing (others may
    # be hidden by their own object in view 1) and away from silhouettes.
    facing = []
    for cam in cams:
        to_cam = cam.cam_to_world[:3, 3] - world
        cos = np.einsum("hwc,hwc->hw", v0.normal.astype(np.float64), to_cam) / np.linalg.norm(to_cam, axis=-1)
        facing.append(cos > 0.25)
    u, v = np.clip(u, 1, res - 2), np.clip(v, 1, res - 2)
    interior = np.all([v1.object_id[v + dv, u + du] == v0.object_id
                       for dv in (-1, 0, 1) for du in (-1, 0, 1)], axis=0)
    keep = inside & facing[0] & facing[1] & interior & (v0.object_id >= 0)
    assert keep.sum() > 200
    z = p1[..., 2][keep]
    rel = np.abs(v1.depth[v[keep], u[keep]] - z) / z
    assert np.median(rel) < 0.01 and rel.max() < 0.05


def test_backproject_batched_matches_single(two_view):
    depth, K = two_view["depth"], two_view["K"]
    batched = backproject(depth, K)
    assert batched.shape == depth.shape + (3,)
    np.testing.assert_allclose(batched[1, 1], backproject(depth[1, 1], K[1, 1]), rtol=1e-6)
    np.testing.assert_array_equal(batched[..., 2], depth)


# --------------------------------------------------------------------------- sketch domain


def test_sketch_has_different_statistics_from_rgb(two_view):
    rgb, drawing = two_view["rgb"].astype(float), two_view["sketch"].astype(float)
    near_white = lambda x: (x.min(axis=-1) > 225).mean()  # noqa: E731
    assert drawing.mean() > rgb.mean() + 50
    assert near_white(drawing) > 0.8 and near_white(rgb) < 0.05
    # A handful of flat pencil tones against thousands of shaded colours.
    colours = lambda x: len(np.unique(x.reshape(-1, 3), axis=0))  # noqa: E731
    assert colours(two_view["sketch"]) <= 4 < 1000 < colours(two_view["rgb"])


def test_sketch_lines_concentrate_on_depth_discontinuities(two_view):
    for i in range(4):
        depth, drawing = two_view["depth"][i, 0].astype(np.float64), two_view["sketch"][i, 0]
        # Depth discontinuity: disparity 1/z is affine on planes and smooth on
        # the primitives, so a large second difference marks occluding edges.
        disparity = 1.0 / depth
        edge = np.zeros(depth.shape, dtype=bool)
        edge[1:-1, :] |= np.abs(disparity[:-2] - 2 * disparity[1:-1] + disparity[2:]) > 0.02
        edge[:, 1:-1] |= np.abs(disparity[:, :-2] - 2 * disparity[:, 1:-1] + disparity[:, 2:]) > 0.02
        near = _dilate(edge)  # within 1 pixel of a discontinuity
        ink = drawing.max(axis=-1) < 60
        assert edge.sum() > 50
        assert _dilate(ink)[edge].mean() > 0.95  # the contour follows the discontinuities ...
        assert ink[near].mean() > 8 * ink[~near].mean()  # ... and ink is rare elsewhere


def test_sketch_of_hand_made_view_outlines_the_sphere():
    view, _ = _single(Primitive("sphere", (0.0, 1.0, 0.0), (0.5, 0.5, 0.5)), (0, 1, -5), (0, 1, 0))
    drawing = sketch(view)
    assert drawing.shape == view.rgb.shape and drawing.dtype == np.uint8
    # The middle row crosses sky - sphere - sky: ink exactly on the sphere's two outermost pixels.
    ink = np.flatnonzero(drawing[32].max(axis=-1) < 60)
    silhouette = np.flatnonzero(view.object_id[32] == 1)
    assert ink.tolist() == [silhouette.min(), silhouette.max()]
