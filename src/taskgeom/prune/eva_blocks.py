"""Adapter for timm ``Eva`` blocks (EVA-02): the block on the running tokens with the rotary
embedding of their grid positions, proportional attention over merged tokens, and the attention
statistics the baselines select by (the counterpart of ``timm_blocks`` for timm ViT blocks).

The host (``models/adapters/timm_any.py``, its ``pruning_block`` hook) gives the rotary embedding
rows of the running patch tokens: (K', d) for one sequence, (B, 1, K', d) or, for per-head
embeddings, (B, H, K', d) per item; the prefix tokens take none (Eva rotates only the tokens after
its ``num_prefix_tokens``). The explicit pass follows ``EvaBlock.forward`` and
``EvaAttention.forward`` (timm 1.x) on the math path, operation by operation: norm1 -> q/k/v (fused
with the q and v biases, or separate projections) -> q_norm, k_norm -> rotary embedding of the
patch queries and keys -> (q·scale)·kᵀ (+ log size) -> softmax -> weights·v -> scale norm -> gate
-> proj -> gamma_1 -> drop_path1 + residual -> norm2 -> mlp -> gamma_2 -> drop_path2 + residual.
Attention dropout is left out, as in eval mode (the hosts are frozen). The keys in the statistics
are the ones the attention uses, rotated.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F_
from timm.layers.pos_embed_sincos import apply_rot_embed_cat
from torch import Tensor, nn

from taskgeom.prune.timm_blocks import AttentionStats, size_bias


def _rotated(attn: nn.Module, t: Tensor, rope: Tensor | None, like: Tensor) -> Tensor:
    """t (B, H, N, hd) with the patch rows (after the prefix) rotated by ``rope``."""
    if rope is None:
        return t
    npt = attn.num_prefix_tokens
    rotated = apply_rot_embed_cat(t[:, :, npt:, :], rope, half=getattr(attn, "rotate_half", False))
    return torch.cat([t[:, :, :npt, :], rotated], dim=2).type_as(like)


def _qkv(attn: nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """x (B, N, C) -> q, k, v (B, H, N, hd), as ``EvaAttention`` projects them."""
    B, N, _ = x.shape
    if attn.qkv is None:
        heads = (B, N, attn.num_heads, -1)
        return (attn.q_proj(x).reshape(heads).transpose(1, 2), attn.k_proj(x).reshape(heads).transpose(1, 2),
                attn.v_proj(x).reshape(heads).transpose(1, 2))
    if attn.q_bias is None:
        qkv = attn.qkv(x)
    else:
        bias = torch.cat((attn.q_bias, attn.k_bias, attn.v_bias))
        qkv = attn.qkv(x) + bias if attn.qkv_bias_separate else F_.linear(x, weight=attn.qkv.weight, bias=bias)
    return qkv.reshape(B, N, 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)


def eva_block_with_stats(block: nn.Module, x: Tensor, rope: Tensor | None,
                         size: Tensor | None = None) -> tuple[Tensor, AttentionStats]:
    """An ``EvaBlock`` computed explicitly (module docstring), with its keys and the class token's attention.

    Args:
        block: a timm ``EvaBlock`` with ``EvaAttention``.
        x: (B, N, C) tokens entering the block, prefix first.
        rope: the rotary embedding rows of its N − prefix patch tokens, or None.
        size: (B, N, 1) the tokens each token stands for, or None.

    Returns:
        The block's output (B, N, C) and AttentionStats: keys (B, N, head_dim), cls_attn (B, N).
    """
    attn = block.attn
    h = block.norm1(x)
    gate = attn.gate(h).sigmoid() if attn.gate is not None else None
    q, k, v = _qkv(attn, h)
    q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = _rotated(attn, q, rope, v), _rotated(attn, k, rope, v)
    logits = (q * attn.scale) @ k.transpose(-2, -1)                       # (B, H, N, N)
    if size is not None:
        logits = logits + size_bias(size)
    weights = logits.softmax(dim=-1)
    out = attn.norm((weights @ v).transpose(1, 2).reshape(*x.shape[:2], -1))
    if gate is not None:
        out = out * gate
    out = attn.proj(out)
    x = x + block.drop_path1(out if block.gamma_1 is None else block.gamma_1 * out)
    mlp = block.mlp(block.norm2(x))
    x = x + block.drop_path2(mlp if block.gamma_2 is None else block.gamma_2 * mlp)
    return x, AttentionStats(keys=k.mean(dim=1), cls_attn=weights[:, :, 0].mean(dim=1))


@dataclass(frozen=True)
class EvaAttentionBlock:
    """One timm Eva block on tokens at known grid positions, as an attention block (see
    ``taskgeom.prune.blocks``): ``forward`` is the block's own, whatever its attention;
    ``with_stats`` re-derives the pre-norm ``EvaBlock`` with ``EvaAttention``.

    Attributes:
        block: the ``EvaBlock``.
        rope: the rotary embedding rows of the running patch tokens (module docstring), or None
            for a model without one.
    """

    block: nn.Module
    rope: Tensor | None

    def _check(self, x: Tensor) -> None:
        """Raise ValueError unless the rotary rows match the patch tokens of ``x`` (B, N, C)."""
        patches = x.shape[1] - self.block.attn.num_prefix_tokens
        if self.rope is not None and self.rope.shape[-2] != patches:
            raise ValueError(f"EVA's rotary embedding has {self.rope.shape[-2]} rows for {patches} patch tokens: "
                             "tokens at no single grid position (ToMe's matching, EViT's fused token) cannot be "
                             "rotated; hard pruning and merging into kept tokens keep their positions")

    def forward(self, x: Tensor, size: Tensor | None = None) -> Tensor:
        """The block itself, with proportional attention when ``size`` is given.

        Args:
            x: (B, N, C) tokens entering the block, prefix first.
            size: (B, N, 1) the tokens each token stands for, or None.

        Returns:
            (B, N, C), the block's output.

        Raises:
            ValueError: the rotary rows do not match the patch tokens.
        """
        self._check(x)
        return self.block(x, rope=self.rope, attn_mask=size_bias(size))

    def with_stats(self, x: Tensor, size: Tensor | None = None) -> tuple[Tensor, AttentionStats]:
        """``eva_block_with_stats``.

        Args:
            x: (B, N, C) tokens entering the block, prefix first.
            size: (B, N, 1) the tokens each token stands for, or None.

        Returns:
            The block's output (B, N, C) and its AttentionStats.

        Raises:
            ValueError: the rotary rows do not match the patch tokens.
            TypeError: a post-norm block or another attention than ``EvaAttention`` (not re-derived here).
        """
        from timm.models.eva import EvaAttention, EvaBlock

        if not isinstance(self.block, EvaBlock) or not isinstance(self.block.attn, EvaAttention):
            raise TypeError(f"{type(self.block).__name__} with {type(self.block.attn).__name__}: the attention "
                            "statistics are re-derived for timm's pre-norm EvaBlock with EvaAttention only")
        self._check(x)
        return eva_block_with_stats(self.block, x, self.rope, size)
