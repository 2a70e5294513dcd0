"""Choosing which patch tokens go: the count for a ratio η, and the split of a score map into
kept and removed tokens. Prefix tokens (CLS, registers) are never removed."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def num_removed(patches: int, ratio: float) -> int:
    """Patch tokens removed at pruning ratio η: P − ceil((1 − η)·P), so that EViT's ceil((1 − η)·P)
    kept tokens and every other method remove the same number."""
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"pruning ratio must be in [0, 1), got {ratio}")
    return patches - math.ceil((1.0 - ratio) * patches - 1e-9)


def split_lowest(scores: Tensor, k: int, prefix: int) -> tuple[Tensor, Tensor]:
    """scores (B, N), higher = keep -> (keep_idx (B, N − k), drop_idx (B, k)), both ascending in
    token order; the ``prefix`` first tokens are always kept."""
    patch = scores[:, prefix:]
    order = patch.argsort(dim=1, stable=True) + prefix                    # lowest first
    drop = order[:, :k].sort(dim=1).values
    rest = order[:, k:]
    lead = torch.arange(prefix, device=scores.device).expand(scores.shape[0], prefix)
    keep = torch.cat([lead, rest], dim=1).sort(dim=1).values
    return keep, drop


def gather_tokens(x: Tensor, idx: Tensor) -> Tensor:
    """x (B, N, C), idx (B, K) -> (B, K, C)."""
    return x.gather(1, idx[..., None].expand(-1, -1, x.shape[-1]))


def scatter_tokens(full: Tensor, idx: Tensor, x: Tensor) -> Tensor:
    """full (B, N, C) with rows idx (B, K) replaced by x (B, K, C); a new tensor."""
    return full.scatter(1, idx[..., None].expand(-1, -1, full.shape[-1]), x)
