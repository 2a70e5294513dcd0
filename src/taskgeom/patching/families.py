"""What patching needs to know about a model: its family, its blocks in order, its prefix tokens,
the module whose input gives the token grid, and for a dense model the blocks its decoder reads.

Supported (``structure``): timm ``VisionTransformer`` (and subclasses) and ``Eva``; transformers
ViT, DINOv2 and DINOv2-with-registers, bare or ``…ForImageClassification`` (pooled outputs: the
merge path), and ``DepthAnythingForDepthEstimation`` (a dense output: the prune path). Anything
else is refused in one line (``PatchError``).

A block is called by its model's own forward; ``Call`` reads that call's arguments by the block
class's signature (timm ``Block.forward(x, attn_mask, is_causal)``, ``EvaBlock.forward(x, rope,
attn_mask, is_causal)``, transformers ``Layer.forward(hidden_states, attention_mask, **kwargs)``)
so a patched block can swap in the running tokens, their size bias and their rotary rows.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Literal

from torch import nn

Family = Literal["timm-vit", "timm-eva", "hf"]
SUPPORTED = ("timm VisionTransformer or Eva; transformers ViT, DINOv2, DINOv2-with-registers (bare or "
             "…ForImageClassification) or DepthAnythingForDepthEstimation")
HF_POOLED = ("vit", "dinov2", "dinov2_with_registers")


class PatchError(ValueError):
    """A model, fit or setting ``taskgeom.patch`` cannot use; the message is one line saying what to do."""


@dataclass(frozen=True)
class Structure:
    """A model as patching sees it.

    Attributes:
        family: "timm-vit", "timm-eva" or "hf".
        blocks: the transformer blocks in the order the model runs them.
        prefix: the tokens before the patch grid (CLS, distillation, registers).
        patch_embed: the module whose input images (B, C, H, W) give the token grid.
        patch: (rows, cols) pixels per patch (for a module without ``dynamic_feat_size``).
        dense: the blocks a dense decoder reads (Depth Anything), ascending; None for pooled outputs.
    """

    family: Family
    blocks: tuple[nn.Module, ...]
    prefix: int
    patch_embed: nn.Module
    patch: tuple[int, int]
    dense: tuple[int, ...] | None = None

    @property
    def path(self) -> str:
        """"prune" (hard pruning with last-layer fusion) for a dense model, else "merge"."""
        return "prune" if self.dense else "merge"

    @property
    def last(self) -> int:
        """The block after which nothing reduced remains: the final block (merge path), or the
        decoder's last read block, before which every token is reinserted (prune path)."""
        return max(self.dense) if self.dense else len(self.blocks) - 1


def _pair(value: Any) -> tuple[int, int]:
    return (int(value[0]), int(value[1])) if isinstance(value, (tuple, list)) else (int(value), int(value))


def _timm(model: nn.Module) -> Structure | None:
    from timm.models.eva import Eva
    from timm.models.vision_transformer import VisionTransformer

    if not isinstance(model, (VisionTransformer, Eva)):
        return None
    family: Family = "timm-eva" if isinstance(model, Eva) else "timm-vit"
    return Structure(family, tuple(model.blocks), int(model.num_prefix_tokens), model.patch_embed,
                     _pair(model.patch_embed.patch_size))


def _hf_layers(base: nn.Module) -> nn.ModuleList | None:
    for owner, name in ((base, "layers"), (getattr(base, "encoder", None), "layer"),
                        (getattr(base, "encoder", None), "layers")):
        if owner is not None and isinstance(getattr(owner, name, None), nn.ModuleList):
            return getattr(owner, name)
    return None


def _hf(model: nn.Module) -> Structure | None:
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind == "depth_anything":
        backbone = model.backbone
        reads = tuple(backbone.stage_names.index(s) - 1 for s in backbone.out_features)
        if min(reads) < 0 or backbone.config.reshape_hidden_states:
            raise PatchError("this Depth Anything's head reads the embedding or reshaped states; patching needs a "
                             "head reading token sequences of encoder layers")
        embeddings = backbone.embeddings
        return Structure("hf", tuple(backbone.encoder.layer), 1 + int(getattr(backbone.config, "num_register_tokens",
                                                                              0) or 0),
                         embeddings.patch_embeddings, _pair(embeddings.patch_embeddings.patch_size),
                         tuple(sorted(set(reads))))
    if kind not in HF_POOLED:
        return None
    base = getattr(model, model.base_model_prefix, model)
    layers = _hf_layers(base)
    if layers is None:
        return None
    registers = int(getattr(config, "num_register_tokens", 0) or 0)
    patch_embeddings = base.embeddings.patch_embeddings
    return Structure("hf", tuple(layers), 1 + registers, patch_embeddings, _pair(patch_embeddings.patch_size))


def structure(model: Any) -> Structure:
    """The model's structure for patching.

    Args:
        model: a timm or transformers model (see the module docstring).

    Returns:
        Its Structure.

    Raises:
        PatchError: any other model, in one line naming what is supported.
    """
    found = _timm(model) if isinstance(model, nn.Module) else None
    if found is None and isinstance(model, nn.Module):
        found = _hf(model)
    if found is None:
        raise PatchError(f"taskgeom.patch: {type(model).__name__} is not a model it patches; supported: {SUPPORTED}")
    return found


def grid_of(struct: Structure, images_shape: tuple[int, ...]) -> tuple[int, int]:
    """(rows, cols) of the patch grid for images of shape (B, C, H, W), as the patch embedding makes it.

    Args:
        struct: the model's structure.
        images_shape: the shape of the patch embedding's input.

    Returns:
        (rows, cols).
    """
    size = (int(images_shape[-2]), int(images_shape[-1]))
    feat = getattr(struct.patch_embed, "dynamic_feat_size", None)
    if feat is not None:
        return tuple(int(v) for v in feat(size))
    return size[0] // struct.patch[0], size[1] // struct.patch[1]


@dataclass(frozen=True)
class Call:
    """How one block class takes its arguments: the name of its tokens, its additive attention
    mask and (EVA) its rotary embedding.

    Attributes:
        signature: the signature of the class's ``forward`` (self first).
        tokens: the tokens' parameter name.
        mask: the attention mask's parameter name.
        rope: the rotary embedding's parameter name, or None.
    """

    signature: inspect.Signature
    tokens: str
    mask: str
    rope: str | None

    @classmethod
    def of(cls, block: nn.Module) -> Call:
        """The calling convention of ``block``'s class.

        Args:
            block: a timm Block / EvaBlock or a transformers layer.

        Returns:
            The Call.

        Raises:
            PatchError: a block that takes no additive attention mask.
        """
        signature = inspect.signature(type(block).forward)
        names = list(signature.parameters)
        mask = next((n for n in ("attn_mask", "attention_mask") if n in names), None)
        if mask is None or len(names) < 2:
            raise PatchError(f"{type(block).__name__}.forward takes no additive attention mask; merged tokens need "
                             "one for their size bias")
        return cls(signature, names[1], mask, "rope" if "rope" in names else None)

    def bind(self, block: nn.Module, args: tuple, kwargs: dict) -> inspect.BoundArguments:
        """The call's arguments by name (self bound to ``block``).

        Args:
            block: the block called.
            args: its positional arguments.
            kwargs: its keyword arguments.

        Returns:
            The bound arguments, defaults not applied.
        """
        return self.signature.bind(block, *args, **kwargs)
