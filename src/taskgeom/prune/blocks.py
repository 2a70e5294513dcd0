"""The host-independent front of the block-level primitives token merging and pruning use:
``attention_block(host, i, ctx, positions)`` is block i with proportional attention over merged
tokens and the attention statistics (keys, class-token attention) the baselines select by, for the
running tokens at ``positions`` of the full sequence, whatever library the host's transformer
comes from; ``run_block`` runs block i on those tokens.

A host says this itself through its one optional hook, ``host.pruning_block(i, ctx, positions)``
(``models.host.PrunableHost``): block i as an ``AttentionBlock``, given whatever the block reads
besides the tokens for those positions (EVA's rotary embedding rows, ``eva_blocks``). A host
without the hook has blocks that read nothing but the tokens, found here: timm ViT blocks at
``host.vit.blocks`` (``timm_blocks``: the zoo's CLS and DPT models, the paper's DINOv2 / CLIP) or
transformers DINOv2 layers at ``host.model.backbone.encoder.layer`` (``hf_blocks``:
Depth-Anything-V2) or another path in ``HF_LAYER_PATHS``; there, importance and random selection
need neither (they read no attention) and run on the host's own ``block``.
"""

from __future__ import annotations

from typing import Any, Protocol

from torch import Tensor

from taskgeom.prune.hf_blocks import Dinov2AttentionBlock, dinov2_layer_types
from taskgeom.prune.timm_blocks import AttentionStats, TimmAttentionBlock

__all__ = ["HF_LAYER_PATHS", "AttentionBlock", "AttentionStats", "attention_block", "run_block"]

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


def attention_block(host: Any, i: int, ctx: Any = None, positions: Tensor | None = None) -> AttentionBlock:
    """Block i of ``host`` with proportional attention and fused attention statistics.

    Args:
        host: a model with the ``pruning_block`` hook, a timm ViT at ``host.vit`` or transformers
            DINOv2 layers at one of ``HF_LAYER_PATHS``.
        i: the block's index.
        ctx: the context ``host.embed`` returned (the hook may read it).
        positions: (B, K) the running tokens' indices into the full sequence, prefix first; None
            for the full sequence or for tokens at no single position (merged by matching, fused).

    Returns:
        The hook's block, or a TimmAttentionBlock or Dinov2AttentionBlock wrapping that block.

    Raises:
        TypeError: the host has no hook, no timm ViT at ``host.vit`` and no transformers DINOv2 layers.
    """
    hook = getattr(host, "pruning_block", None)
    if hook is not None:
        return hook(i, ctx, positions)
    vit = getattr(host, "vit", None)
    if vit is not None and hasattr(vit, "blocks"):
        return TimmAttentionBlock(vit.blocks[i])
    layers = _hf_layers(host)
    if layers is not None and isinstance(layers[i], dinov2_layer_types()):
        return Dinov2AttentionBlock(layers[i])
    raise TypeError(f"{type(host).__name__}: ToMe and EViT read attention keys from the host's pruning_block "
                    f"hook, a timm ViT at host.vit or transformers DINOv2 layers (at "
                    f"host.{' / host.'.join(HF_LAYER_PATHS)}); this host has none (importance and random selection "
                    "work on any host)")


def run_block(host: Any, i: int, h: Tensor, ctx: Any, positions: Tensor | None) -> Tensor:
    """Block i on the running tokens: the host's own block on the full sequence (``positions`` None)
    or on a host without the ``pruning_block`` hook, the hook's block otherwise.

    Args:
        host: the model.
        i: the block's index.
        h: (B, K, D) the running tokens.
        ctx: the context ``host.embed`` returned.
        positions: (B, K) their indices into the full sequence, prefix first, or None for all of them.

    Returns:
        (B, K, D), the block's output.
    """
    if positions is None or getattr(host, "pruning_block", None) is None:
        return host.block(i, h, ctx)
    return host.pruning_block(i, ctx, positions).forward(h)
