"""Token reduction for CLS decoders (paper §7.1): one reduction after block ``layer``, then the
remaining blocks on fewer tokens, with proportional attention where tokens stand for several.

Every method (``prune.methods``) removes P − ceil((1 − η)·P) patch tokens, folded in as its
``merge`` says:
  keys        its lowest-scoring tokens, each merged into the nearest kept patch token by key
              cosine, size-weighted (tome_score: the most redundant; random: a seeded choice)
  pullback    its lowest-scoring tokens, each merged into the kept patch token nearest in the single-token
              pullback distance of the SPN, averaged with weights exp(score)·size (importance: the head
              regresses standardised log importance, so exp(score) is a relative importance)
  fuse        its lowest-scoring tokens fused into one token weighted by their scores (evit: the
              least attended by the class token)
  bipartite   ToMe's bipartite soft matching with r = the same count, size-weighted, proportional attention
Tokens merged into kept ones keep those tokens' grid positions (a host whose blocks read positions,
EVA, is given them); a fused or matched token has none.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from taskgeom.models.host import ProbeHost
from taskgeom.prune.blocks import attention_block
from taskgeom.prune.evit import evit_fuse
from taskgeom.prune.methods import lookup
from taskgeom.prune.scores import LearnedMetric, grid_of, scores_for
from taskgeom.prune.select import num_removed, split_lowest
from taskgeom.prune.soft_merge import cosine_distance, merge_into_nearest, pullback_distance
from taskgeom.prune.tome import bipartite_soft_matching, merge_wavg


def reduce_tokens(method: str, h: Tensor, stats, k: int, grid, learned: LearnedMetric | None,
                  generator: torch.Generator | None) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """h (B, N, D) after the reduction block -> (h' (B, N', D), size (B, N', 1) or None, positions).

    Args:
        method: a name in ``prune.methods.METHODS`` (module docstring).
        h: (B, N, D) the tokens the reduction block output.
        stats: that block's AttentionStats (None where the method reads no attention).
        k: patch tokens to remove.
        grid: the token Grid of the images (its ``prefix`` tokens are never removed).
        learned: the importance head and SPN (methods with ``learned``).
        generator: draws random's scores.

    Returns:
        The reduced tokens (B, N − k, D) (fuse: (B, N − k + 1, D), the fused token last), the
        tokens each stands for (B, N', 1), or None for fuse, whose tokens stand for one each, and
        the reduced tokens' positions in the full sequence (B, N − k), or None where a token has no
        single position (fuse, bipartite).
    """
    m, prefix = lookup(method), grid.prefix
    if m.merge == "bipartite":
        merge, _ = bipartite_soft_matching(stats.keys, k, class_token=prefix > 0)
        return (*merge_wavg(merge, h), None)
    idx = torch.arange(h.shape[1], device=h.device).expand(h.shape[0], -1)
    scores = scores_for(method, h, idx, stats, grid, learned, generator)
    if m.merge == "fuse":
        return evit_fuse(h, scores, k, prefix), None, None
    keep, drop = split_lowest(scores, k, prefix)
    size = torch.ones_like(h[..., :1])
    if m.merge == "pullback":
        distance = pullback_distance(h, learned.metric(h, grid), keep, drop, prefix)
        return (*merge_into_nearest(h, size, keep, drop, distance, scores.exp(), prefix), keep)
    distance = cosine_distance(stats.keys, keep, drop, prefix)
    return (*merge_into_nearest(h, size, keep, drop, distance, None, prefix), keep)


def _check(host: ProbeHost, decoder: str, layer: int) -> int:
    """The final block's index, once ``decoder`` reads only it and ``layer`` is below it."""
    last = host.num_blocks - 1
    if tuple(host.decoder_layers(decoder)) != (last,):
        raise ValueError(f"soft merging serves decoders reading only the final block; {decoder!r} reads "
                         f"{list(host.decoder_layers(decoder))} (use hard prune + LLF)")
    if not 0 <= layer < last:
        raise ValueError(f"merge layer {layer} must be below the final block {last}")
    return last


@torch.no_grad()
def unreduced_prefix(host: ProbeHost, images: Tensor, layer: int) -> tuple[Tensor, Any]:
    """images (B, 3, H, W) -> (h (B, N, D) entering block ``layer``, the host's context): the part of
    ``merged_forward`` that no method changes, so a caller can compute it once per batch.

    Args:
        host: the frozen model.
        images: (B, 3, H, W) preprocessed images.
        layer: the block after which tokens will be reduced.

    Returns:
        The tokens entering block ``layer`` (B, N, D) and the host's embedding context.
    """
    h, ctx = host.embed(images)
    for i in range(layer):
        h = host.block(i, h, ctx)
    return h, ctx


@torch.no_grad()
def merged_forward_from(host: ProbeHost, decoder: str, prefix: tuple[Tensor, Any], layer: int, method: str,
                        ratio: float, learned: LearnedMetric | None = None,
                        generator: torch.Generator | None = None) -> Tensor:
    """``merged_forward`` from ``unreduced_prefix(host, images, layer)``: the same output, bit for bit.

    Args:
        host: the frozen model.
        decoder: a decoder reading only the final block.
        prefix: ``unreduced_prefix(host, images, layer)``.
        layer: the block after which tokens are reduced, below the final block.
        method: a name in ``prune.methods.METHODS``.
        ratio: η in [0, 1), the fraction of patch tokens removed (``num_removed``).
        learned: the importance head and SPN (methods with ``learned``).
        generator: draws random's scores.

    Returns:
        (B, M), the decoder's output.

    Raises:
        ValueError: the decoder reads other blocks than the final one, or ``layer`` is not below it.
    """
    last = _check(host, decoder, layer)
    m = lookup(method)
    h, ctx = prefix
    grid = grid_of(ctx)
    k = num_removed(grid.rows * grid.cols, ratio)
    reduced, size, positions = False, None, None
    for i in range(layer, last + 1):
        if i == layer and k > 0:
            h, stats = (attention_block(host, i, ctx).with_stats(h) if m.reads_attention(merging=True)
                        else (host.block(i, h, ctx), None))
            h, size, positions = reduce_tokens(method, h, stats, k, grid, learned, generator)
            reduced = True
        elif reduced:
            h = attention_block(host, i, ctx, positions).forward(h, size)
        else:
            h = host.block(i, h, ctx)
    return host.decode(decoder, {last: h}, ctx)


def merged_forward(host: ProbeHost, decoder: str, images: Tensor, layer: int, method: str, ratio: float,
                   learned: LearnedMetric | None = None, generator: torch.Generator | None = None) -> Tensor:
    """images (B, 3, H, W) -> decoder output (B, M) with tokens reduced after block ``layer``.
    The decoder must read only the final block (a CLS decoder).

    Args:
        host: the frozen model.
        decoder: a decoder reading only the final block.
        images: (B, 3, H, W) preprocessed images.
        layer: the block after which tokens are reduced, below the final block.
        method: a name in ``prune.methods.METHODS``.
        ratio: η in [0, 1), the fraction of patch tokens removed (``num_removed``).
        learned: the importance head and SPN (methods with ``learned``).
        generator: draws random's scores.

    Returns:
        (B, M), the decoder's output.
    """
    _check(host, decoder, layer)
    return merged_forward_from(host, decoder, unreduced_prefix(host, images, layer), layer, method, ratio,
                               learned, generator)
