"""Task metrics for the zoo (accuracy, depth AbsRel / δ1, camera error) and the pose encoding
of the multi-view camera head."""

from __future__ import annotations

import numpy as np
import torch
from scipy.spatial.transform import Rotation
from torch import Tensor

SKY_FRACTION = 0.98  # pixels at ≥ 98% of the far plane are sky: no valid depth


def pose_encoding(cam_to_world: np.ndarray, K: np.ndarray, size: int) -> np.ndarray:
    """Each view's pose in the first camera's frame, as translation (3), unit quaternion xyzw with
    w ≥ 0 (4), field of view x, y in radians (2) (VGGT's absT_quaR_FoV encoding).

    Args:
        cam_to_world: (S, V, 4, 4) camera-to-world matrices of S scenes, V views each.
        K: (S, V, 3, 3) intrinsics in pixels.
        size: the image side in pixels.

    Returns:
        (S, V, 9) float32 encodings; view 0's is the identity pose.
    """
    rel = np.linalg.inv(cam_to_world[:, :1]) @ cam_to_world  # (S, V, 4, 4)
    quat = Rotation.from_matrix(rel[..., :3, :3].reshape(-1, 3, 3)).as_quat().reshape(*rel.shape[:2], 4)
    quat = quat * np.where(quat[..., 3:] < 0, -1.0, 1.0)
    fov = 2.0 * np.arctan(size / (2.0 * np.stack([K[..., 0, 0], K[..., 1, 1]], axis=-1)))
    return np.concatenate([rel[..., :3, 3], quat, fov], axis=-1).astype(np.float32)


def camera_errors(pred: np.ndarray, target: np.ndarray) -> dict[str, float]:
    """Rotation error (degrees, geodesic) and translation error (m) over views 1.. of pose encodings.

    Args:
        pred: (S, V, 9) predicted encodings (quaternions need not be unit).
        target: (S, V, 9) true encodings.

    Returns:
        rot_err_deg and trans_err_m, each the mean over scenes and views 1…V − 1.
    """
    p, t = pred[:, 1:].reshape(-1, 9), target[:, 1:].reshape(-1, 9)
    qp = p[:, 3:7] / np.linalg.norm(p[:, 3:7], axis=1, keepdims=True)
    dot = np.abs(np.sum(qp * t[:, 3:7], axis=1)).clip(0.0, 1.0)
    return {"rot_err_deg": float(np.degrees(2 * np.arccos(dot)).mean()),
            "trans_err_m": float(np.linalg.norm(p[:, :3] - t[:, :3], axis=1).mean())}


def valid_depth(depth: Tensor, max_depth: float) -> Tensor:
    """The pixels with valid (non-sky) ground truth: depth below ``SKY_FRACTION`` of the far plane.

    Args:
        depth: ground-truth depth, any shape.
        max_depth: the far plane.

    Returns:
        A bool mask of the same shape.
    """
    return depth < SKY_FRACTION * max_depth


def depth_metrics(pred: Tensor, target: Tensor, max_depth: float) -> dict[str, float]:
    """AbsRel and δ1 (max ratio < 1.25) over pixels with valid (non-sky) ground truth.

    Args:
        pred: predicted depth, the shape of ``target``.
        target: ground-truth depth, e.g. (B, H, W).
        max_depth: the far plane (``valid_depth``).

    Returns:
        abs_rel and delta1, over all valid pixels of the batch.
    """
    mask = valid_depth(target, max_depth)
    p, t = pred[mask].clamp_min(1e-6), target[mask]
    ratio = torch.maximum(p / t, t / p)
    return {"abs_rel": float(((p - t).abs() / t).mean()), "delta1": float((ratio < 1.25).float().mean())}


def median_scaled(pred: Tensor, target: Tensor, max_depth: float) -> Tensor:
    """Scale each predicted depth map so its median over valid pixels matches the target's
    (the per-image scale alignment of monocular depth evaluation, Eigen et al., 2014).

    Args:
        pred: (B, ...) predicted depth.
        target: (B, ...) ground-truth depth.
        max_depth: the far plane (``valid_depth``).

    Returns:
        (B, ...) the scaled predictions.
    """
    mask = valid_depth(target, max_depth)
    scale = torch.stack([t[m].median() / p[m].clamp_min(1e-6).median() for p, t, m in zip(pred, target, mask)])
    return pred * scale.view(-1, *[1] * (pred.ndim - 1))


def silog(pred: Tensor, target: Tensor, mask: Tensor | None = None, lam: float = 0.85) -> Tensor:
    """Scale-invariant log error (Eigen et al., 2014), per image: sqrt(mean(d²) − λ·mean(d)²), d = log p − log t.

    Args:
        pred: (B, ...) positive predicted depth.
        target: (B, ...) positive ground truth.
        mask: (B, ...) pixels counted; None for all.
        lam: λ.

    Returns:
        (B,).
    """
    d = torch.log(pred.clamp_min(1e-6)) - torch.log(target.clamp_min(1e-6))
    d = d.flatten(1)
    w = torch.ones_like(d) if mask is None else mask.flatten(1).to(d.dtype)
    count = w.sum(1).clamp_min(1.0)
    mean, mean_sq = (d * w).sum(1) / count, (d * d * w).sum(1) / count
    return torch.sqrt((mean_sq - lam * mean**2).clamp_min(0.0))
