"""Choosing which patch tokens go: the count for a ratio η, and the split of a score map into
kept and removed tokens. Prefix tokens (CLS, registers) are never removed."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def num_removed(patches: int, ratio: float) -> int:
    """Patch tokens removed at pruning ratio η: P − ceil((1 − η)·P), so that EViT's ceil((1 − η)·P)
    kept tokens and every other method remove the same number.

    Args:
        patches: P, the patch tokens.
        ratio: η in [0, 1).

    Returns:
        The number of patch tokens removed.

    Raises:
        ValueError: η is outside [0, 1).
    """
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"pruning ratio must be in [0, 1), got {ratio}")
    return patches - math.ceil((1.0 - ratio) * patches - 1e-9)


def split_lowest(scores: Tensor, k: int, prefix: int) -> tuple[Tensor, Tensor]:
    """Split the tokens into kept and removed by score; the ``prefix`` first tokens are always kept.

    Args:
        scores: (B, N), higher = keep.
        k: patch tokens to remove.
        prefix: the leading tokens never removed.

    Returns:
        keep_idx (B, N − k) and drop_idx (B, k), both ascending in token order; ties are broken
        by position (a stable sort), so removal is deterministic.
    """
    patch = scores[:, prefix:]
    order = patch.argsort(dim=1, stable=True) + prefix                    # lowest first
    drop = order[:, :k].sort(dim=1).values
    rest = order[:, k:]
    lead = torch.arange(prefix, device=scores.device).expand(scores.shape[0], prefix)
    keep = torch.cat([lead, rest], dim=1).sort(dim=1).values
    return keep, drop


def gather_tokens(x: Tensor, idx: Tensor) -> Tensor:
    """The rows idx of every item.

    Args:
        x: (B, N, C).
        idx: (B, K) integer indices into N.

    Returns:
        (B, K, C).
    """
    return x.gather(1, idx[..., None].expand(-1, -1, x.shape[-1]))


def scatter_tokens(full: Tensor, idx: Tensor, x: Tensor) -> Tensor:
    """full with rows idx replaced by x; a new tensor.

    Args:
        full: (B, N, C).
        idx: (B, K) integer indices into N.
        x: (B, K, C) the new rows.

    Returns:
        (B, N, C).
    """
    return full.scatter(1, idx[..., None].expand(-1, -1, full.shape[-1]), x)
