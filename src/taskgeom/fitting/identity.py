"""Which model a fit belongs to, and whether a model object is that model.

A timm or transformers model is described (``describe``) by:

- its family (``timm`` or ``hf``) and class (timm: the architecture its ``pretrained_cfg`` names;
  transformers: the model class);
- its structure (``structure``): blocks, width D, attention heads, prefix tokens (CLS,
  distillation, registers), patch size, the position grid it was built for, and its outputs
  (classes, or ``depth``);
- ``signature_sha256``: sha256 over the lines ``name<TAB>shape`` of its state dict, sorted by name
  (another architecture, whatever the structure above misses);
- ``state_sha256``: sha256 over the state dict's entries sorted by name, each as the line
  ``name<TAB>shape<TAB>dtype class`` then its values, floating ones as float32 bytes, others as
  stored. The same values give the same digest in any floating dtype that holds them exactly
  (a bfloat16 checkpoint digests alike in bfloat16, float32 or float64) and on any device.

``check_model`` compares a model with the one a fit recorded, in that order, and raises
``FitMismatch`` with one line naming the first difference the fit cannot apply across: family or
class, token layout (prefix tokens, width), architecture (blocks, heads, patch, grid, outputs),
parameter names or shapes. A model that differs from the fitted one in its weights alone (the
fitted model fine-tuned, say) is one the fit applies to, its head and SPN reading features of the
same layout: ``check_model`` warns ``WeightsDiffer`` naming both state digests and returns that
line, and the caller goes on.
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Any

import torch
from torch import nn

from taskgeom.models.adapters.timm_any import timm_family

LAYOUT_KEYS = ("prefix", "dim")
LABELS = {"blocks": "{} blocks", "dim": "tokens of width {}", "heads": "{} attention heads",
          "prefix": "{} prefix tokens", "patch": "patches of {}", "grid": "a {} position grid", "outputs": "outputs {}"}


class FitMismatch(ValueError):
    """A model that is not the one a fit was made for; the message is one line naming what differs."""


class WeightsDiffer(UserWarning):
    """The model is the fit's architecture and token layout with other weights (fine-tuned, say):
    the fit applies, but its importance head and SPN were learned on the fitted weights' features.
    The message is one line naming both state digests."""


def family(model: nn.Module) -> str | None:
    """"timm" for a timm VisionTransformer or Eva, "hf" for a transformers model, else None."""
    if timm_family(model) is not None:
        return "timm"
    if hasattr(getattr(model, "config", None), "model_type") and hasattr(model, "base_model_prefix"):
        return "hf"
    return None


def model_class(model: nn.Module) -> str:
    """timm: the architecture ``pretrained_cfg`` names (e.g. vit_small_patch14_dinov2); else the class name."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    return str(cfg.get("architecture") or type(model).__name__)


def _pair(value: Any) -> list[int]:
    return [int(v) for v in value] if isinstance(value, (tuple, list)) else [int(value), int(value)]


def _timm_structure(model: nn.Module) -> dict:
    embed = model.patch_embed
    return {"blocks": len(model.blocks), "dim": int(model.embed_dim), "heads": int(model.blocks[0].attn.num_heads),
            "prefix": int(model.num_prefix_tokens), "patch": _pair(embed.patch_size), "grid": _pair(embed.grid_size),
            "outputs": int(getattr(model, "num_classes", 0) or 0)}


def _hf_structure(model: nn.Module) -> dict:
    cfg = model.config
    backbone = getattr(cfg, "backbone_config", None) or cfg
    patch = _pair(backbone.patch_size)
    size = _pair(backbone.image_size)
    has_classifier = isinstance(getattr(model, "classifier", None), nn.Module)
    outputs = "depth" if cfg.model_type == "depth_anything" else int(cfg.num_labels) if has_classifier else 0
    return {"blocks": int(backbone.num_hidden_layers), "dim": int(backbone.hidden_size),
            "heads": int(backbone.num_attention_heads),
            "prefix": 1 + int(getattr(backbone, "num_register_tokens", 0) or 0), "patch": patch,
            "grid": [s // p for s, p in zip(size, patch)], "outputs": outputs}


def structure(model: nn.Module) -> dict:
    """Blocks, width, heads, prefix tokens, patch size, built position grid and outputs (module docstring).

    Raises:
        TypeError: neither a timm ViT/Eva nor a transformers model.
    """
    kind = family(model)
    if kind == "timm":
        return _timm_structure(model)
    if kind == "hf":
        return _hf_structure(model)
    raise TypeError(f"{type(model).__name__} is neither a timm ViT/Eva nor a transformers model")


def signature_sha256(model: nn.Module) -> str:
    """sha256 of the state dict's sorted ``name<TAB>shape`` lines: the parameters' names and shapes."""
    lines = "".join(f"{k}\t{list(v.shape)}\n" for k, v in sorted(model.state_dict().items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def state_sha256(model: nn.Module) -> str:
    """sha256 of the state dict's values (module docstring), one entry at a time."""
    digest = hashlib.sha256()
    for name, value in sorted(model.state_dict().items()):
        value = value.detach()
        kind = "float" if value.is_floating_point() else str(value.dtype)
        digest.update(f"{name}\t{list(value.shape)}\t{kind}\n".encode())
        value = value.to("cpu", torch.float32) if value.is_floating_point() else value.cpu()
        digest.update(value.contiguous().numpy().tobytes())
    return digest.hexdigest()


def describe(model: nn.Module) -> dict:
    """family, class, structure, signature_sha256 and state_sha256 of a timm or transformers model."""
    return {"family": family(model), "class": model_class(model), "structure": structure(model),
            "signature_sha256": signature_sha256(model), "state_sha256": state_sha256(model)}


def _shown(value: Any) -> str:
    return "×".join(map(str, value)) if isinstance(value, list) else str(value)


def _named(record: dict) -> str:
    return f"{record.get('family')} {record.get('class')}"


def _check_kind(where: str, theirs: dict, model: nn.Module) -> None:
    """FitMismatch unless ``model`` is of the fitted family and class."""
    kind = family(model)
    if kind is None:
        raise FitMismatch(f"{where}: {type(model).__name__} is neither a timm ViT/Eva nor a transformers model; the "
                          f"fit is for {_named(theirs)}")
    mine = {"family": kind, "class": model_class(model)}
    if (mine["family"], mine["class"]) != (theirs["family"], theirs["class"]):
        raise FitMismatch(f"{where}: this model is {_named(mine)}; the fit is for {_named(theirs)}")


def _check_structure(where: str, theirs: dict, model: nn.Module) -> None:
    """FitMismatch naming the first field of ``structure`` that differs, then parameter names or shapes."""
    shape = structure(model)
    for key, label in LABELS.items():
        if shape[key] != theirs["structure"][key]:
            what = "token layout" if key in LAYOUT_KEYS else "architecture"
            raise FitMismatch(f"{where}: other {what}: this model has {label.format(_shown(shape[key]))}, the "
                              f"fitted {_named(theirs)} {label.format(_shown(theirs['structure'][key]))}")
    if signature_sha256(model) != theirs["signature_sha256"]:
        raise FitMismatch(f"{where}: other architecture: this model's parameter names or shapes differ from the "
                          f"fitted {_named(theirs)}'s")


def weights_note(fitted: Any, model: nn.Module) -> str | None:
    """One line saying that ``model``'s weights are not the fitted ones, or None where they are.

    Args:
        fitted: the fit (``checkpoint.Fitted``), whose ``model`` holds the fitted ``state_sha256``.
        model: a model that passed the architecture checks of ``check_model``.

    Returns:
        The line, naming the state digest at fit time and now (``state_sha256``), or None when the
        digests are equal.
    """
    theirs, digest = fitted.model["state_sha256"], state_sha256(model)
    if digest == theirs:
        return None
    nets = ("importance head and SPN were" if getattr(fitted.metric, "spn", None) is not None
            else "importance head was")
    return (f"{fitted.directory}/fit.json: this model's weights differ from the fitted {_named(fitted.model)}'s "
            f"(state sha256 {theirs} at fit time, {digest} now); the fit's {nets} learned on the fitted "
            "weights' features (`taskgeom fit` learns them on these)")


def check_model(fitted: Any, model: nn.Module, *, warn: bool = True) -> str | None:
    """Refuse a model the fit cannot apply to; say so where only its weights differ (module docstring).

    Args:
        fitted: the fit, whose ``model`` holds what ``describe`` gave at fit time.
        model: a timm or transformers model object (not changed).
        warn: warn ``WeightsDiffer`` with the returned line (False: the caller reports it).

    Returns:
        ``weights_note``: one line when the weights are not the fitted ones, else None.

    Raises:
        FitMismatch: one line naming the first difference: family or class, structure (the token
            layout: prefix tokens, width; or the architecture: blocks, heads, patch, grid, outputs),
            parameter names or shapes.
    """
    where = f"{fitted.directory}/fit.json"
    _check_kind(where, fitted.model, model)
    _check_structure(where, fitted.model, model)
    note = weights_note(fitted, model)
    if note is not None and warn:
        warnings.warn(note, WeightsDiffer, stacklevel=2)
    return note
