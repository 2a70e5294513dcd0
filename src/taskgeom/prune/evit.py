"""EViT (Liang et al., ICLR 2022): keep the tokens the class token attends to most, fuse the
inattentive ones into one token weighted by that attention."""

from __future__ import annotations

import torch
from torch import Tensor

from taskgeom.prune.select import gather_tokens, split_lowest


def evit_fuse(x: Tensor, cls_attn: Tensor, k: int, prefix: int = 1) -> Tensor:
    """Keep the most attended patch tokens and fuse the rest into one, Σ a_t x_t / Σ a_t.

    Args:
        x: (B, N, C) tokens.
        cls_attn: (B, N) the class token's attention to each token, averaged over heads.
        k: patch tokens to drop; 0 returns x unchanged.
        prefix: the leading tokens (CLS, registers), always kept.

    Returns:
        (B, N − k + 1, C): the prefix, the N − prefix − k most attended patches in token order,
        then the fused token over the dropped ones.
    """
    if k == 0:
        return x
    keep, drop = split_lowest(cls_attn, k, prefix)
    a = cls_attn.gather(1, drop)[..., None]                                # (B, k, 1)
    fused = (gather_tokens(x, drop) * a).sum(1, keepdim=True) / a.sum(1, keepdim=True).clamp_min(1e-12)
    return torch.cat([gather_tokens(x, keep), fused], dim=1)
