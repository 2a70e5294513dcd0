"""One token reduction after the fit's block, recording where every original token went.

Merge path (pooled outputs), as ``prune.cls_merge.reduce_tokens`` does it for each method's
``merge`` (``prune.methods``): the lowest-scoring patch tokens are averaged into the nearest kept
patch token (``keys``: key cosine, size-weighted; ``pullback``: the SPN's single-token pullback
distance, weights exp(score)·size), fused into one extra token (``fuse``, EViT), or ToMe's
bipartite matching merges them (``bipartite``). ``Reduced.owner`` maps each original position
to the running token that stands for it, so the final block's output is expanded back to the full
sequence (a merged token copied to every position it absorbed): the model's own norm, pooling
(average pooling then weighs each merged token by its size) and head see the shapes they expect.

Prune path (dense outputs), as ``prune.llf.pruned_forward`` with a one-block schedule: the
lowest-scoring patch tokens stop running and keep their value (frozen) in every later block
output; ``bipartite`` merges instead, and its merged tokens are unmerged wherever a full grid is
read.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from taskgeom.models.vit import Grid
from taskgeom.patching.pullback import pullback_distance
from taskgeom.prune.evit import evit_fuse
from taskgeom.prune.methods import Method
from taskgeom.prune.scores import LearnedMetric, scores_for
from taskgeom.prune.select import split_lowest
from taskgeom.prune.soft_merge import cosine_distance, merge_into_nearest
from taskgeom.prune.timm_blocks import AttentionStats
from taskgeom.prune.tome import bipartite_soft_matching, merge_wavg


@dataclass
class Reduced:
    """The running tokens after the reduction.

    Attributes:
        h: (B, K, D) the running tokens (fuse: the fused token last).
        size: (B, K, 1) the original tokens each stands for, or None (all ones).
        positions: (B, K) their grid positions (prefix first), or None where a token has no single
            position (fuse, bipartite).
        owner: (B, N) for each original position, the index of the running token standing for it.
        kept: (B, K') the positions the method kept by its scores, prefix first; None for bipartite.
    """

    h: Tensor
    size: Tensor | None
    positions: Tensor | None
    owner: Tensor
    kept: Tensor | None


def owners(keep: Tensor, drop: Tensor, dest: Tensor, n: int) -> Tensor:
    """owner (B, N): kept position keep[j] -> j, removed position drop[t] -> dest[t].

    Args:
        keep: (B, K) kept positions.
        drop: (B, k) removed positions.
        dest: (B, k) the running token each removed one went into.
        n: N, the original tokens.

    Returns:
        (B, N) long.
    """
    owner = torch.empty(keep.shape[0], n, dtype=torch.long, device=keep.device)
    owner.scatter_(1, keep, torch.arange(keep.shape[1], device=keep.device).expand_as(keep))
    return owner.scatter_(1, drop, dest)


def _bipartite(h: Tensor, stats: AttentionStats, k: int, prefix: int) -> tuple[Tensor, Tensor, Tensor]:
    """ToMe's matching: merged tokens (B, N − k, D), their sizes, and each original token's owner."""
    merge, unmerge = bipartite_soft_matching(stats.keys, k, class_token=prefix > 0)
    out, size = merge_wavg(merge, h)
    index = torch.arange(out.shape[1], device=h.device, dtype=torch.float64)
    owner = unmerge(index[None, :, None].expand(h.shape[0], -1, 1)).squeeze(-1).round().long()
    return out, size, owner


def scores_of(method: Method, h: Tensor, stats: AttentionStats | None, grid: Grid, learned: LearnedMetric | None,
              generator: torch.Generator | None) -> Tensor:
    """The method's scores (B, N) of every token of h (B, N, D), higher = keep; a learned method
    sees h in its head's dtype.

    Args:
        method: the method's record.
        h: (B, N, D) the tokens the fit's block output.
        stats: that block's attention statistics, or None.
        grid: the images' grid.
        learned: the fit's metric (methods with ``learned``).
        generator: random's generator.

    Returns:
        (B, N) scores.
    """
    if learned is not None and method.learned:
        h = h.to(next(learned.head.parameters()).dtype)
    idx = torch.arange(h.shape[1], device=h.device).expand(h.shape[0], -1)
    return scores_for(method.name, h, idx, stats, grid, learned, generator)


def reduce_merge(method: Method, h: Tensor, stats: AttentionStats | None, k: int, grid: Grid,
                 learned: LearnedMetric | None, generator: torch.Generator | None) -> Reduced:
    """Remove k patch tokens of h (B, N, D) by ``method`` (module docstring, merge path).

    Args:
        method: the method's record.
        h: (B, N, D) the tokens the fit's block output.
        stats: that block's attention statistics (methods that read them), or None.
        k: patch tokens to remove, ≥ 1.
        grid: the images' grid.
        learned: the fit's metric: the head (and for ``pullback`` the SPN).
        generator: random's generator.

    Returns:
        The Reduced tokens.
    """
    prefix, n = grid.prefix, h.shape[1]
    if method.merge == "bipartite":
        out, size, owner = _bipartite(h, stats, k, prefix)
        return Reduced(out, size, None, owner, None)
    scores = scores_of(method, h, stats, grid, learned, generator)
    keep, drop = split_lowest(scores, k, prefix)
    if method.merge == "fuse":
        fused = torch.full_like(drop, keep.shape[1])
        return Reduced(evit_fuse(h, scores.to(h.dtype), k, prefix), None, None, owners(keep, drop, fused, n), keep)
    if method.merge == "pullback":
        distance = pullback_distance(learned.spn, learned.base, grid, h, keep, drop, prefix)
        weight = scores.exp().to(h.dtype)
    else:
        distance, weight = cosine_distance(stats.keys, keep, drop, prefix), None
    out, size = merge_into_nearest(h, torch.ones_like(h[..., :1]), keep, drop, distance, weight, prefix)
    dest = distance.argmin(dim=-1) + prefix
    return Reduced(out, size, keep, owners(keep, drop, dest, n), keep)


@dataclass
class Selected:
    """The running tokens of the prune path, gathered from each block's full-grid input.

    Attributes:
        full: (B, N, D) the fit's block output as later blocks and the decoder read it.
        reps: (B, K) the full-grid position each running token is read from.
        size: (B, K, 1) the tokens each stands for (bipartite), or None.
        owner: (B, N) each position's running token (bipartite: a merged token is unmerged to every
            position it absorbed), or None (removed tokens stay frozen).
        kept: (B, K) the positions kept by the scores; None for bipartite.
    """

    full: Tensor
    reps: Tensor
    size: Tensor | None
    owner: Tensor | None
    kept: Tensor | None


def select_prune(method: Method, h: Tensor, stats: AttentionStats | None, k: int, grid: Grid,
                 learned: LearnedMetric | None, generator: torch.Generator | None) -> Selected:
    """Hard pruning (bipartite: merging) of k patch tokens after the fit's block (module docstring).

    Args:
        method: the method's record.
        h: (B, N, D) the tokens the fit's block output.
        stats: that block's attention statistics (methods that read them), or None.
        k: patch tokens to remove, ≥ 1.
        grid: the images' grid.
        learned: the fit's metric (methods with ``learned``).
        generator: random's generator.

    Returns:
        The Selected tokens.
    """
    if method.merge == "bipartite":
        out, size, owner = _bipartite(h, stats, k, grid.prefix)
        n = h.shape[1]
        reps = torch.full((h.shape[0], out.shape[1]), n, dtype=torch.long, device=h.device)
        reps = reps.scatter_reduce(1, owner, torch.arange(n, device=h.device).expand_as(owner), "amin")
        return Selected(out.gather(1, owner[..., None].expand(-1, -1, h.shape[-1])), reps, size, owner, None)
    keep, _ = split_lowest(scores_of(method, h, stats, grid, learned, generator), k, grid.prefix)
    return Selected(h, keep, None, None, keep)
