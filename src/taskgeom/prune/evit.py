"""EViT (Liang et al., ICLR 2022): keep the tokens the class token attends to most, fuse the
inattentive ones into one token weighted by that attention."""

from __future__ import annotations

import torch
from torch import Tensor

from taskgeom.prune.select import gather_tokens, split_lowest


def evit_fuse(x: Tensor, cls_attn: Tensor, k: int, prefix: int = 1) -> Tensor:
    """x (B, N, C), cls_attn (B, N) the class token's attention averaged over heads, k patch tokens
    to drop -> (B, N − k + 1, C): prefix, the N − prefix − k most attended patches in token order,
    then the fused token Σ a_t x_t / Σ a_t over the dropped ones. k = 0 returns x unchanged."""
    if k == 0:
        return x
    keep, drop = split_lowest(cls_attn, k, prefix)
    a = cls_attn.gather(1, drop)[..., None]                                # (B, k, 1)
    fused = (gather_tokens(x, drop) * a).sum(1, keepdim=True) / a.sum(1, keepdim=True).clamp_min(1e-12)
    return torch.cat([gather_tokens(x, keep), fused], dim=1)
