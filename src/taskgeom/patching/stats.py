"""The attention statistics (``prune.timm_blocks.AttentionStats``: keys averaged over heads, the
class token's attention) of the block after which tokens go, for the methods that read them,
from the same pass as the block's output.

timm blocks use the registry's explicit re-derivations (``prune.timm_blocks.block_with_stats``,
``prune.eva_blocks.EvaAttentionBlock`` with the block's rotary embedding). A transformers layer
runs its own forward while hooks read its attention's query and key projections (ViT and DINOv2
project them alike: ``attention.q_proj``, ``attention.k_proj``, ``num_attention_heads``,
``head_dim``, ``scaling``); the class token's attention is softmax(q₀·kᵀ·scaling), averaged over
heads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from taskgeom.prune.timm_blocks import AttentionStats, block_with_stats


def _hf_stats(block: nn.Module, run: Callable[[], Tensor]) -> tuple[Tensor, AttentionStats]:
    """Run a transformers layer (``run``) with hooks on its query and key projections."""
    attn = block.attention
    seen: dict[str, Tensor] = {}
    hooks = [attn.q_proj.register_forward_hook(lambda m, a, out: seen.__setitem__("q", out)),
             attn.k_proj.register_forward_hook(lambda m, a, out: seen.__setitem__("k", out))]
    try:
        out = run()
    finally:
        for hook in hooks:
            hook.remove()
    b, n = seen["k"].shape[:2]
    k = seen["k"].reshape(b, n, attn.num_attention_heads, attn.head_dim)     # (B, N, H, hd)
    q0 = seen["q"][:, 0].reshape(b, attn.num_attention_heads, attn.head_dim)  # (B, H, hd)
    weights = (torch.einsum("bhd,bnhd->bhn", q0, k) * attn.scaling).softmax(dim=-1)
    return out, AttentionStats(keys=k.mean(dim=2), cls_attn=weights.mean(dim=1))


def with_stats(family: str, block: nn.Module, x: Tensor, rope: Any, run: Callable[[], Tensor]
               ) -> tuple[Tensor, AttentionStats]:
    """The block's output on x (B, N, D) and its attention statistics.

    Args:
        family: the model's family (``families.Structure.family``).
        block: the block.
        x: (B, N, D) its input tokens.
        rope: EVA's rotary embedding as the block was given it, or None.
        run: the block's own call on x (what a transformers layer runs).

    Returns:
        (B, N, D) and the AttentionStats (keys (B, N, head_dim), cls_attn (B, N)).
    """
    if family == "timm-vit":
        return block_with_stats(block, x)
    if family == "timm-eva":
        from taskgeom.prune.eva_blocks import EvaAttentionBlock

        return EvaAttentionBlock(block, rope).with_stats(x)
    return _hf_stats(block, run)
