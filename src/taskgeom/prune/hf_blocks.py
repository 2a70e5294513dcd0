"""Adapter for transformers DINOv2 layers (Depth-Anything-V2's backbone, ``Dinov2Layer``, and
``Dinov2WithRegistersLayer``): the layer's forward re-derived explicitly, so that ToMe's
proportional attention can bias its logits and its keys and class-token attention come out of the
same pass (the counterpart of ``timm_blocks`` for timm ViTs).

The re-derivation follows transformers' ``Dinov2Layer.forward`` with eager attention, operation by
operation: norm1 -> q/k/v projections split into heads -> (q·kᵀ)·scaling (+ log size) -> softmax ->
weights·v -> output projection -> layer_scale1 -> drop_path + residual -> norm2 -> mlp (MLP or
SwiGLU, the layer's own module) -> layer_scale2 -> drop_path + residual. Attention dropout is left
out, as in eval mode (the hosts are frozen).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from taskgeom.prune.timm_blocks import AttentionStats, size_bias


def dinov2_layer_types() -> tuple[type, ...]:
    """The transformers layer classes re-derived here (imported on first use: transformers loads slowly).

    Returns:
        ``Dinov2Layer`` and, where transformers has it, ``Dinov2WithRegistersLayer``.
    """
    from transformers.models.dinov2.modeling_dinov2 import Dinov2Layer

    try:
        from transformers.models.dinov2_with_registers.modeling_dinov2_with_registers import (
            Dinov2WithRegistersLayer,
        )
    except ImportError:  # transformers before the registers variant
        return (Dinov2Layer,)
    return Dinov2Layer, Dinov2WithRegistersLayer


@dataclass(frozen=True)
class _Attention:
    """A DINOv2 attention's projections and head layout, whatever the transformers version calls them."""

    query: nn.Module
    key: nn.Module
    value: nn.Module
    output: nn.Module
    head_dim: int
    scaling: float


def _attention_parts(layer: nn.Module) -> _Attention:
    """transformers 5.x: ``attention.{q,k,v,o}_proj``; 4.x: ``attention.attention.{query,key,value}``
    and ``attention.output.dense``."""
    attn = layer.attention
    if hasattr(attn, "q_proj"):
        return _Attention(attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, attn.head_dim, attn.scaling)
    inner = attn.attention
    head_dim = inner.attention_head_size
    return _Attention(inner.query, inner.key, inner.value, attn.output.dense, head_dim,
                      getattr(inner, "scaling", head_dim**-0.5))


def _layer_pass(layer: nn.Module, x: Tensor, size: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """x (B, N, C) -> (output (B, N, C), keys (B, H, N, head_dim), attention weights (B, H, N, N))."""
    a = _attention_parts(layer)
    h = layer.norm1(x)
    heads = (*h.shape[:-1], -1, a.head_dim)
    q = a.query(h).view(heads).transpose(1, 2)
    k = a.key(h).view(heads).transpose(1, 2)
    v = a.value(h).view(heads).transpose(1, 2)
    logits = torch.matmul(q, k.transpose(2, 3)) * a.scaling
    if size is not None:
        logits = logits + size_bias(size)
    weights = nn.functional.softmax(logits, dim=-1)
    out = torch.matmul(weights, v).transpose(1, 2).reshape(*h.shape[:-1], -1)
    x = layer.drop_path(layer.layer_scale1(a.output(out))) + x
    x = layer.drop_path(layer.layer_scale2(layer.mlp(layer.norm2(x)))) + x
    return x, k, weights


@dataclass(frozen=True)
class Dinov2AttentionBlock:
    """One transformers DINOv2 layer as an attention block (see ``taskgeom.prune.blocks``).

    Attributes:
        layer: a ``Dinov2Layer`` or ``Dinov2WithRegistersLayer``.
    """

    layer: nn.Module

    def forward(self, x: Tensor, size: Tensor | None = None) -> Tensor:
        """The layer itself, or with proportional attention when ``size`` is given.

        Args:
            x: (B, N, C) tokens entering the layer.
            size: (B, N, 1) the tokens each token stands for, or None.

        Returns:
            (B, N, C), the layer's output.
        """
        if size is None:
            out = self.layer(x)
            return out[0] if isinstance(out, tuple) else out  # transformers 4.x layers return (h, *extras)
        return _layer_pass(self.layer, x, size)[0]

    def with_stats(self, x: Tensor, size: Tensor | None = None) -> tuple[Tensor, AttentionStats]:
        """``forward`` with the keys and the class token's attention (averaged over heads) from the same pass.

        Args:
            x: (B, N, C) tokens entering the layer.
            size: (B, N, 1) the tokens each token stands for, or None.

        Returns:
            The layer's output (B, N, C) and AttentionStats: keys (B, N, head_dim), cls_attn (B, N).
        """
        out, keys, weights = _layer_pass(self.layer, x, size)
        return out, AttentionStats(keys=keys.mean(dim=1), cls_attn=weights[:, :, 0].mean(dim=1))
