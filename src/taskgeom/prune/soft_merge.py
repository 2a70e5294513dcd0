"""Soft merging of chosen tokens into their nearest kept token (paper §7.1, App. D).

Every removed token t is averaged into the kept patch token s nearest to it, with weights
w_t · size_t, and the destination's size grows by size_t, so later blocks can attend
proportionally. Nearness is a distance matrix from the removed to the kept patch tokens:
the cosine of attention keys for the baselines, the single-token pullback distance for
importance-guided merging.
"""

from __future__ import annotations

import torch
from torch import Tensor

from taskgeom.metric.spn import PredictedMetric
from taskgeom.prune.select import gather_tokens


def merge_into_nearest(x: Tensor, size: Tensor, keep: Tensor, drop: Tensor, distance: Tensor,
                       weight: Tensor | None = None, prefix: int = 1) -> tuple[Tensor, Tensor]:
    """Average every removed token into its nearest kept patch token, weights w_t · size_t.

    Args:
        x: (B, N, C) tokens.
        size: (B, N, 1) the tokens each stands for.
        keep: (B, K) kept positions, ascending with the prefix first.
        drop: (B, k) removed positions.
        distance: (B, k, K − prefix) from each removed token to each kept patch token.
        weight: (B, N) > 0, or None for a size-weighted mean.
        prefix: the leading tokens, which receive no merges.

    Returns:
        The merged tokens (B, K, C) and their sizes (B, K, 1).
    """
    w = size if weight is None else size * weight[..., None]
    dest = distance.argmin(dim=-1) + prefix                               # (B, k) positions in keep
    idx = dest[..., None]
    xw = gather_tokens(x * w, keep).scatter_add(1, idx.expand(-1, -1, x.shape[-1]), gather_tokens(x * w, drop))
    wk = gather_tokens(w, keep).scatter_add(1, idx, gather_tokens(w, drop))
    new_size = gather_tokens(size, keep).scatter_add(1, idx, gather_tokens(size, drop))
    return xw / wk, new_size


def cosine_distance(keys: Tensor, keep: Tensor, drop: Tensor, prefix: int = 1) -> Tensor:
    """1 − cos of attention keys between removed and kept patch tokens.

    Args:
        keys: (B, N, C) keys averaged over heads.
        keep: (B, K) kept positions, prefix first.
        drop: (B, k) removed positions.
        prefix: the leading tokens, left out as destinations.

    Returns:
        (B, k, K − prefix).
    """
    k = keys / keys.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return 1.0 - gather_tokens(k, drop) @ gather_tokens(k, keep[:, prefix:]).transpose(1, 2)


def pullback_distance(x: Tensor, metric: PredictedMetric, keep: Tensor, drop: Tensor, prefix: int = 1) -> Tensor:
    """Single-token pullback distance d(t, s)² = (x_s − x_t)ᵀ g_t (x_s − x_t), with g_t the SPN's
    rank-r metric restricted to perturbations of token t alone: g_t = U_t diag(λ) U_tᵀ + εI, U_t the
    rows of the modes U for token t (App. D, "per-token marginal metric"). Moving t onto s costs
    what the decoder's output would feel if t's features became s's. O(k·K·D·r) per image.

    Args:
        x: (B, N, D) tokens.
        metric: the SPN's PredictedMetric at x, U (B, N·D, r).
        keep: (B, K) kept positions, prefix first.
        drop: (B, k) removed positions.
        prefix: the leading tokens, left out as destinations.

    Returns:
        (B, k, K − prefix) squared distances.
    """
    b, n, d = x.shape
    U = metric.U.reshape(b, n, d, -1)
    A = U.gather(1, drop[..., None, None].expand(-1, -1, d, U.shape[-1])) * metric.lam.sqrt()[:, None, None]
    xt, xs = gather_tokens(x, drop), gather_tokens(x, keep[:, prefix:])   # (B, k, D), (B, K', D)
    diff = xs[:, None] - xt[:, :, None]                                    # (B, k, K', D)
    low_rank = torch.einsum("bkdr,bksd->bksr", A, diff).pow(2).sum(-1)
    return low_rank + metric.eps[:, None, None] * diff.pow(2).sum(-1)
