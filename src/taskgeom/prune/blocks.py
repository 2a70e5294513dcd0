"""The host-independent front of the block-level primitives token merging and pruning use:
``attention_block(host, i)`` is block i with proportional attention over merged tokens and the
attention statistics (keys, class-token attention) the baselines select by, whatever library the
host's transformer comes from.

Implementations: timm ViT blocks at ``host.vit.blocks`` (``timm_blocks``: the zoo's CLS and DPT
models, the paper's DINOv2 / CLIP) and transformers DINOv2 layers at
``host.model.backbone.encoder.layer`` (``hf_blocks``: Depth-Anything-V2) or another path in
``HF_LAYER_PATHS``. Importance and random selection need neither (they read no attention).
"""

from __future__ import annotations

from typing import Any, Protocol

from torch import Tensor

from taskgeom.prune.hf_blocks import Dinov2AttentionBlock, dinov2_layer_types
from taskgeom.prune.timm_blocks import AttentionStats, TimmAttentionBlock

__all__ = ["HF_LAYER_PATHS", "AttentionBlock", "AttentionStats", "attention_block"]

# where a host keeps a transformers DINOv2 encoder's layers (DepthAnythingHost: the first)
HF_LAYER_PATHS = ("model.backbone.encoder.layer", "backbone.encoder.layer", "encoder.layer")


class AttentionBlock(Protocol):
    """One transformer block. x (B, N, C); size (B, N, 1): the tokens each token stands for
    (ToMe's proportional attention adds log(size) to every logit over the key axis), or None."""

    def forward(self, x: Tensor, size: Tensor | None = None) -> Tensor:
        """x -> the block's output (B, N, C).

        Args:
            x: (B, N, C) tokens entering the block.
            size: (B, N, 1) the tokens each token stands for, or None for plain attention.

        Returns:
            (B, N, C), the block's output.
        """
        ...

    def with_stats(self, x: Tensor, size: Tensor | None = None) -> tuple[Tensor, AttentionStats]:
        """``forward`` with the keys and the class token's attention, averaged over heads, from the same pass.

        Args:
            x: (B, N, C) tokens entering the block.
            size: (B, N, 1) the tokens each token stands for, or None for plain attention.

        Returns:
            The block's output (B, N, C) and its AttentionStats (keys (B, N, head_dim), cls_attn (B, N)).
        """
        ...


def _hf_layers(host: Any) -> Any:
    """The transformers encoder layers at the first of ``HF_LAYER_PATHS`` the host has, or None."""
    for path in HF_LAYER_PATHS:
        obj = host
        for name in path.split("."):
            obj = getattr(obj, name, None)
        if obj is not None:
            return obj
    return None


def attention_block(host: Any, i: int) -> AttentionBlock:
    """Block i of ``host`` with proportional attention and fused attention statistics.

    Args:
        host: a model with a timm ViT at ``host.vit`` or transformers DINOv2 layers at one of
            ``HF_LAYER_PATHS``.
        i: the block's index.

    Returns:
        A TimmAttentionBlock or a Dinov2AttentionBlock wrapping that block.

    Raises:
        TypeError: the host has neither a timm ViT at ``host.vit`` nor transformers DINOv2 layers.
    """
    vit = getattr(host, "vit", None)
    if vit is not None and hasattr(vit, "blocks"):
        return TimmAttentionBlock(vit.blocks[i])
    layers = _hf_layers(host)
    if layers is not None and isinstance(layers[i], dinov2_layer_types()):
        return Dinov2AttentionBlock(layers[i])
    raise TypeError(f"{type(host).__name__}: ToMe and EViT read attention keys from a timm ViT at host.vit or "
                    f"transformers DINOv2 layers (at host.{' / host.'.join(HF_LAYER_PATHS)}); this host has "
                    "neither (importance and random selection work on any host)")
