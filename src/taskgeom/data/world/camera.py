"""Pinhole cameras: intrinsics, poses and the geometry between them (conventions: see the package)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from taskgeom.data.world.scene import UP


@dataclass(frozen=True, eq=False)  # eq=False: arrays have no truth value; compare by identity
class Camera:
    """Pinhole camera with square pixels and a centred principal point; the
    field of view spans the image width (= height, images are square).

    Attributes:
        cam_to_world: (4, 4) float64, camera-frame points to world-frame points (OpenCV axes).
        fov_deg: the field of view across the image, in degrees.
    """

    cam_to_world: np.ndarray = field(repr=False)  # (4, 4) float64
    fov_deg: float

    def K(self, resolution: int) -> np.ndarray:
        """(3, 3) float64 intrinsics for a resolution x resolution image.

        Args:
            resolution: the image side in pixels.

        Returns:
            K with f = resolution / (2 tan(fov / 2)) and principal point (resolution − 1) / 2.
        """
        f = 0.5 * resolution / np.tan(np.radians(self.fov_deg) / 2)
        c = (resolution - 1) / 2  # OpenCV pixel centres, see the package docstring
        return np.array([[f, 0.0, c], [0.0, f, c], [0.0, 0.0, 1.0]])


def look_at(eye: np.ndarray, target: np.ndarray, fov_deg: float) -> Camera:
    """Camera at `eye` looking at `target`, image x axis level (no roll).

    Args:
        eye: (3,) the camera centre, world frame.
        target: (3,) the point on the optical axis.
        fov_deg: the field of view in degrees.

    Returns:
        The Camera.

    Raises:
        ValueError: the viewing direction is vertical.
    """
    eye, target = np.asarray(eye, float), np.asarray(target, float)
    z = target - eye
    x = np.cross(z, UP)  # right = forward x up for an OpenCV (y-down) camera
    if np.linalg.norm(x) < 1e-9 * np.linalg.norm(z):
        raise ValueError("look_at: viewing direction is vertical, camera roll is undefined")
    z, x = z / np.linalg.norm(z), x / np.linalg.norm(x)
    c2w = np.eye(4)
    c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = x, np.cross(z, x), z, eye
    return Camera(c2w, float(fov_deg))


def relative_pose(cam_to_world_a: np.ndarray, cam_to_world_b: np.ndarray) -> np.ndarray:
    """Pose of camera b in camera a's frame: T_ab = T_a^-1 T_b, mapping b-frame points to a-frame
    points (T_a inverted rigidly, exactly).

    Args:
        cam_to_world_a: (..., 4, 4) rigid camera-to-world poses.
        cam_to_world_b: (..., 4, 4), broadcast against a.

    Returns:
        (..., 4, 4) float64.
    """
    a = np.asarray(cam_to_world_a, dtype=np.float64)
    rot_t = np.swapaxes(a[..., :3, :3], -1, -2)
    a_inv = np.zeros_like(a)
    a_inv[..., :3, :3] = rot_t  # rigid inverse: exact, unlike np.linalg.inv
    a_inv[..., :3, 3] = -(rot_t @ a[..., :3, 3:])[..., 0]
    a_inv[..., 3, 3] = 1.0
    return a_inv @ np.asarray(cam_to_world_b, dtype=np.float64)


def backproject(depth: np.ndarray, K: np.ndarray) -> np.ndarray:
    """Camera-frame points of z-depth under intrinsics K, OpenCV pixel centres: X = (j - cx) z / fx.

    Args:
        depth: (..., H, W) z-depth.
        K: (..., 3, 3) intrinsics.

    Returns:
        (..., H, W, 3) points (x right, y down, z forward), in depth's dtype.
    """
    depth = np.asarray(depth)
    K = np.asarray(K, dtype=np.float64)
    h, w = depth.shape[-2:]
    fx, fy = K[..., 0, 0, None, None], K[..., 1, 1, None, None]
    cx, cy = K[..., 0, 2, None, None], K[..., 1, 2, None, None]
    x = (np.arange(w) - cx) / fx * depth
    y = (np.arange(h)[:, None] - cy) / fy * depth
    return np.stack([x, y, np.broadcast_to(depth, x.shape)], axis=-1).astype(depth.dtype)
