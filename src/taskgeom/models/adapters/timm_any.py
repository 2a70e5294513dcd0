"""Any timm ViT a user names, as a probe host: timm's ``VisionTransformer`` family (DeiT, its
distilled variant with a distillation token, DINOv2 with or without register tokens, CLIP, …)
and its ``Eva`` family (EVA-02: rotary position embedding passed to every block).

The host follows the model's own ``forward_features`` / ``forward_head`` split: ``embed`` is the
patch embedding, the position embedding (and the rotary embedding of the patch grid, kept in the
context) and ``norm_pre``; ``block(i)`` is ``blocks[i]``; the decoders read the last block's
output through ``norm`` and ``forward_head``: ``cls`` the pooled embedding before the classifier
(``pre_logits=True``: the CLS token for token pooling, the mean of the patch tokens for average
pooling, the mean of CLS and distillation token for distilled DeiT), ``logits`` the classifier
output where the model has one. Prefix tokens (CLS, distillation, registers) stay in the state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from taskgeom.models.host import freeze, use_math_attention
from taskgeom.models.vit import Grid, TimmViTHost

TIMM_FAMILIES = "timm VisionTransformer (ViT, DeiT incl. distilled, DINOv2 incl. registers, CLIP) and Eva (EVA-02)"


@dataclass(frozen=True)
class RopeGrid(Grid):
    """The token layout, with the rotary embedding of the patch grid (None without one)."""

    rope: Any = None


def timm_family(model: nn.Module) -> str | None:
    """"vit" or "eva" for the timm classes this host runs, None for any other model."""
    from timm.models.eva import Eva
    from timm.models.vision_transformer import VisionTransformer

    if isinstance(model, VisionTransformer):
        return "vit"
    if isinstance(model, Eva):
        return "eva"
    return None


class TimmAnyHost(TimmViTHost):
    """ProbeHost over a timm ``VisionTransformer`` or ``Eva`` (see the module docstring)."""

    def __init__(self, model: nn.Module):
        """Probe ``model``, a timm ``VisionTransformer`` or ``Eva``.

        Args:
            model: the timm model; decoders ``cls`` (pre-logits) and, where it has a head, ``logits``.

        Raises:
            TypeError: another timm family.
        """
        family = timm_family(model)
        if family is None:
            raise TypeError(f"{type(model).__name__} is not a timm model this host runs ({TIMM_FAMILIES})")
        super().__init__(model)
        self.family = family
        has_head = not isinstance(getattr(model, "head", nn.Identity()), nn.Identity)
        self.decoders = ("cls", "logits") if has_head else ("cls",)

    def embed(self, images: Tensor) -> tuple[Tensor, RopeGrid]:
        """images (B, 3, H, W) -> tokens entering block 0 (B, prefix + rows·cols, D), their layout."""
        vit = self.vit
        x = vit.patch_embed(images)
        if x.ndim == 4:  # dynamic_img_size: (B, rows, cols, D)
            rows, cols = x.shape[1], x.shape[2]
        else:
            rows, cols = vit.patch_embed.grid_size
        rope = None
        if self.family == "eva":
            x, rope = vit._pos_embed(x)
        else:
            x = vit.patch_drop(vit._pos_embed(x))
        return vit.norm_pre(x), RopeGrid(vit.num_prefix_tokens, rows, cols, rope)

    def block(self, i: int, h: Tensor, ctx: RopeGrid) -> Tensor:
        """Block ``i``: (B, T, D) -> (B, T, D), with its rotary embedding for EVA."""
        if self.family != "eva":
            return self.vit.blocks[i](h)
        return self.vit.blocks[i](h, rope=self._rope(i, ctx))

    def _rope(self, i: int, ctx: RopeGrid, positions: Tensor | None = None) -> Tensor | None:
        """EVA block i's rotary embedding: the grid's, (P, d) or per head (H, P, d); for running
        tokens at ``positions`` (B, K, prefix first) the rows of their patch positions, (B, 1, K', d)
        or (B, H, K', d), as Eva indexes it for the patches it keeps (prefix tokens take none)."""
        rope = ctx.rope
        if rope is not None and getattr(self.vit, "rope_mixed", False):
            rope = rope[i]
        if rope is None or positions is None:
            return rope
        prefix = ctx.prefix
        if not (positions[:, :prefix] == torch.arange(prefix, device=positions.device)).all():
            raise ValueError(f"EVA's running tokens must start with its {prefix} prefix tokens")
        patches = positions[:, prefix:] - prefix
        return rope[patches][:, None] if rope.ndim == 2 else rope[:, patches].movedim(0, 1)

    def pruning_block(self, i: int, ctx: RopeGrid, positions: Tensor | None = None) -> Any:
        """Block ``i`` with its attention for the running tokens at ``positions`` (``models.host.PrunableHost``):
        a ``TimmAttentionBlock``, or for EVA an ``EvaAttentionBlock`` with the rotary rows of their
        patch positions (``_rope``)."""
        if self.family != "eva":
            from taskgeom.prune.timm_blocks import TimmAttentionBlock

            return TimmAttentionBlock(self.vit.blocks[i])
        from taskgeom.prune.eva_blocks import EvaAttentionBlock

        return EvaAttentionBlock(self.vit.blocks[i], self._rope(i, ctx, positions))

    def decode(self, decoder: str, states: Mapping[int, Tensor], ctx: Grid) -> Tensor:
        """The final norm and timm's ``forward_head``: ``cls`` the pooled embedding (B, D), ``logits`` (B, K)."""
        h = self.vit.norm(states[self.num_blocks - 1])
        return self.vit.forward_head(h, pre_logits=decoder == "cls")


def build_timm(name: str, weights: str | Path | None = None, **kwargs: Any) -> nn.Module:
    """timm model ``name`` built with ``pretrained=False`` (nothing is downloaded), with the state
    dict at ``weights`` loaded strictly (timm's ``load_checkpoint``: .safetensors, .pth, .bin;
    a ``state_dict`` / ``model`` entry is unwrapped) and any image size accepted
    (``dynamic_img_size`` where the model takes it). ``kwargs`` go to ``timm.create_model``.

    Raises:
        FileNotFoundError: ``weights`` does not exist.
        ValueError: timm knows no model ``name``, or the weights do not fit it (naming the file).
    """
    import timm

    if not timm.is_model(name):
        raise ValueError(f"timm has no model {name!r} (timm {timm.__version__}; list them with timm.list_models())")
    try:
        model = timm.create_model(name, pretrained=False, dynamic_img_size=True, **kwargs)
    except TypeError:  # a model without dynamic image sizes
        model = timm.create_model(name, pretrained=False, **kwargs)
    if weights is not None:
        path = Path(weights).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"--weights {path}: no such file")
        try:
            timm.models.load_checkpoint(model, str(path), strict=True)
        except (RuntimeError, KeyError) as exc:
            detail = " ".join(line.strip() for line in str(exc).strip().splitlines()[:2]) or type(exc).__name__
            raise ValueError(f"{path}: these weights do not fit timm {name!r} with {kwargs or 'its defaults'} "
                             f"({detail[:300]}); pass the architecture's arguments (--model-args)") from exc
    return model


def timm_host(model: nn.Module) -> TimmAnyHost:
    """A timm model as a frozen float32 probe host on the math attention path."""
    return freeze(TimmAnyHost(use_math_attention(model.float())))
