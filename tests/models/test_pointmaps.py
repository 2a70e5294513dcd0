"""tiny-mv's point-map targets agree with the ray-caster's own hit points."""

import numpy as np

from taskgeom.data.world import render_split
from taskgeom.data.world.camera import Camera
from taskgeom.data.world.raycast import _rays
from taskgeom.models.train import pointmaps


def test_point_maps_are_the_ray_casters_hits_in_the_first_cameras_frame():
    res = 24
    group = render_split(2, seed=3, resolution=res, views=2)
    points = pointmaps(group["depth"], group["K"], group["cam_to_world"])  # (S, V, 3, H, W)
    assert points.shape == (2, 2, 3, res, res)
    for s in range(2):
        first = group["cam_to_world"][s, 0].astype(np.float64)
        for v in range(2):
            c2w, K = group["cam_to_world"][s, v].astype(np.float64), group["K"][s, v].astype(np.float64)
            fov = np.degrees(2 * np.arctan(0.5 * res / K[0, 0]))
            origin, direction = _rays(Camera(c2w, fov), res)  # direction scaled to camera-frame z = 1
            hits = origin + group["depth"][s, v].reshape(-1, 1) * direction  # (H·W, 3) world points
            in_first = (hits - first[:3, 3]) @ first[:3, :3]  # world -> first camera frame
            expected = in_first.T.reshape(3, res, res)
            np.testing.assert_allclose(points[s, v], expected, rtol=1e-4, atol=1e-4)
