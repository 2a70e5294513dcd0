"""The tiny zoo's training losses, one per task (``train.TASKS``): each maps (model, batch of
tensors) to a scalar; depth is compared in log space over the valid pixels (``valid_depth``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F_
from torch import Tensor, nn

from taskgeom.data.splits import to_input
from taskgeom.evaluate.tasks import valid_depth


def log_depth_l1(pred: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """Mean |log pred − log target| over the masked pixels, a scalar.

    Args:
        pred: (B, ...) predicted depth (clamped at 1e-6).
        target: (B, ...) positive depth.
        mask: (B, ...) the valid pixels (bool or 0 / 1).

    Returns:
        () the mean over the masked pixels (0 with none).
    """
    diff = (torch.log(pred.clamp_min(1e-6)) - torch.log(target)).abs()
    return (diff * mask).sum() / mask.sum().clamp_min(1.0)


def cls_loss(model: nn.Module, b: dict[str, Tensor]) -> Tensor:
    """Cross-entropy with label smoothing 0.1, a scalar.

    Args:
        model: the model being trained.
        b: the batch as tensors (rgb (B, H, W, 3) uint8, label (B,)).

    Returns:
        () the loss, differentiable in the model's parameters.
    """
    return F_.cross_entropy(model(to_input(b["rgb"])), b["label"], label_smoothing=0.1)


def dpt_loss(model: nn.Module, b: dict[str, Tensor]) -> Tensor:
    """Log-depth L1 over valid pixels, a scalar.

    Args:
        model: the model being trained.
        b: the batch as tensors (rgb (B, H, W, 3) uint8, depth (B, H, W); ``max_depth`` a scalar).

    Returns:
        () the loss, differentiable in the model's parameters.
    """
    return log_depth_l1(model(to_input(b["rgb"])), b["depth"], valid_depth(b["depth"], b["max_depth"]))


def trunk_loss(model: nn.Module, b: dict[str, Tensor]) -> Tensor:
    """Cross-entropy of the class plus the log-depth L1 of the depth head, from one forward: a scalar.

    Args:
        model: the model being trained.
        b: the batch as tensors (rgb (B, H, W, 3) uint8, label (B,), depth (B, H, W); ``max_depth`` a scalar).

    Returns:
        () the loss, differentiable in the model's parameters.
    """
    out = model(to_input(b["rgb"]))
    return (F_.cross_entropy(out["logits"], b["label"], label_smoothing=0.1)
            + log_depth_l1(out["depth"], b["depth"], valid_depth(b["depth"], b["max_depth"])))


CAMERA_WEIGHT = 5.0


def mv_loss(model: nn.Module, b: dict[str, Tensor]) -> Tensor:
    """``CAMERA_WEIGHT`` · smooth L1 of poses + log-depth L1 + 0.1 · point-map L1 (valid pixels): a scalar.

    Args:
        model: the model being trained.
        b: the batch as tensors (rgb (B, V, H, W, 3) uint8, depth, pose (B, V, 9), points (B, V, 3, H, W), max_depth).

    Returns:
        () the loss, differentiable in the model's parameters.
    """
    out = model(to_input(b["rgb"]))
    mask = valid_depth(b["depth"], b["max_depth"])
    point_err = (out["pointmap"] - b["points"]).abs().sum(2)  # (B, V, H, W)
    # The camera term is upweighted: unweighted, the dense depth/point terms dominate and the
    # camera head stays at the mean pose within the short CPU training budget.
    return (CAMERA_WEIGHT * F_.smooth_l1_loss(out["camera"], b["pose"], beta=0.1)
            + log_depth_l1(out["depth"], b["depth"], mask)
            + 0.1 * (point_err * mask).sum() / mask.sum().clamp_min(1.0))
