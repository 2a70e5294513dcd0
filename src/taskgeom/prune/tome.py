"""Token Merging (Bolya et al., ICLR 2023): bipartite soft matching, size-weighted merging, and
the "ToMe score" used to select tokens.

Follows facebookresearch/ToMe ``tome/merge.py``: tokens alternate into sets A (even) and B (odd),
each A token is matched to its most similar B token by cosine similarity of the attention keys
(averaged over heads), and the r best-matched A tokens are merged into their B partners. The class
token is protected: it is never merged away, and it stays first.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

MergeFn = Callable[..., Tensor]


def _identity(x: Tensor, mode: str = "mean") -> Tensor:
    """The merge and unmerge of a matching that merges nothing."""
    return x


def bipartite_soft_matching(metric: Tensor, r: int, class_token: bool = True) -> tuple[MergeFn, MergeFn]:
    """ToMe's bipartite soft matching: pair each A token with its most similar B token and choose
    the r best-matched pairs to merge.

    Args:
        metric: (B, N, C) the tokens' similarity features (ToMe: the attention keys averaged over
            heads); compared by cosine similarity.
        r: tokens to remove; capped at half the unprotected tokens, and r ≤ 0 gives identities.
        class_token: token 0 is the class token: never merged away, and kept first.

    Returns:
        (merge, unmerge). ``merge(x, mode="mean")``: x (B, N, C') -> (B, N − r, C'), the unmerged
        A tokens (class token first) then the B tokens, each B token reduced with the A tokens
        merged into it (``mode`` is a ``scatter_reduce`` reduction, the B token itself included).
        ``unmerge(x)``: (B, N − r, C') -> (B, N, C'), every token back at its place, merged ones
        copying their destination.
    """
    protected = int(class_token)
    t = metric.shape[1]
    r = min(r, (t - protected) // 2)
    if r <= 0:
        return _identity, _identity
    with torch.no_grad():
        metric = metric / metric.norm(dim=-1, keepdim=True)
        a, b = metric[..., ::2, :], metric[..., 1::2, :]
        scores = a @ b.transpose(-1, -2)                                  # (B, Na, Nb)
        if class_token:
            scores[..., 0, :] = -math.inf
        node_max, node_idx = scores.max(dim=-1)                           # best B partner of each A token
        edge_idx = node_max.argsort(dim=-1, descending=True)[..., None]   # (B, Na, 1)
        unm_idx = edge_idx[..., r:, :]
        src_idx = edge_idx[..., :r, :]
        dst_idx = node_idx[..., None].gather(dim=-2, index=src_idx)
        if class_token:
            unm_idx = unm_idx.sort(dim=1)[0]                              # class token back in front

    def merge(x: Tensor, mode: str = "mean") -> Tensor:
        src, dst = x[..., ::2, :], x[..., 1::2, :]
        n, t1, c = src.shape
        unm = src.gather(dim=-2, index=unm_idx.expand(n, t1 - r, c))
        src = src.gather(dim=-2, index=src_idx.expand(n, r, c))
        dst = dst.scatter_reduce(-2, dst_idx.expand(n, r, c), src, reduce=mode)
        return torch.cat([unm, dst], dim=1)

    def unmerge(x: Tensor) -> Tensor:
        unm_len = unm_idx.shape[1]
        unm, dst = x[..., :unm_len, :], x[..., unm_len:, :]
        n, _, c = unm.shape
        src = dst.gather(dim=-2, index=dst_idx.expand(n, r, c))
        out = torch.zeros(n, t, c, device=x.device, dtype=x.dtype)
        out[..., 1::2, :] = dst
        out.scatter_(dim=-2, index=(2 * unm_idx).expand(n, unm_len, c), src=unm)
        out.scatter_(dim=-2, index=(2 * src_idx).expand(n, r, c), src=src)
        return out

    return merge, unmerge


def merge_wavg(merge: MergeFn, x: Tensor, size: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Size-weighted average merge (ToMe's ``merge_wavg``).

    Args:
        merge: a merge function from ``bipartite_soft_matching``.
        x: (B, N, C) tokens.
        size: (B, N, 1) how many original tokens each stands for; None for ones.

    Returns:
        The merged x (B, N − r, C), each a size-weighted mean, and the merged size (B, N − r, 1).
    """
    if size is None:
        size = torch.ones_like(x[..., :1])
    x = merge(x * size, mode="sum")
    size = merge(size, mode="sum")
    return x / size, size


def tome_score(keys: Tensor) -> Tensor:
    """The ToMe score as a token importance: 1 − the highest cosine similarity of a token's mean
    key to any other token's, so redundant tokens score low.

    Args:
        keys: (B, N, C) attention keys averaged over heads.

    Returns:
        (B, N) scores.
    """
    k = keys / keys.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    sim = k @ k.transpose(-1, -2)
    sim.diagonal(dim1=-2, dim2=-1).fill_(-math.inf)
    return 1.0 - sim.max(dim=-1).values
