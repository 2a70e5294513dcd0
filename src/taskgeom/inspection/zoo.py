"""Which of the pipeline's zoo adapters (``models.adapters.PAPER_MODELS``) a user's model is, if any.

A timm model is the adapter's model when it has the adapter's architecture, whatever its name:
the same class, the same modules in the same places (class, configuration as ``extra_repr``
prints it, attention heads), the same parameter and buffer shapes, the same pooling and prefix
tokens. The position embedding's size is left out (it follows the input size, which a zoo entry
sets with ``img_size``), and so are dropout and stochastic depth (the identity at evaluation).
The reference is the adapter's own build, made on the meta device (no memory, no weights).

A Hugging Face ``depth_anything`` model is the ``depth-anything-v2`` adapter's, which builds any
Depth Anything checkpoint's architecture from its config.json (``AdapterSpec.loaded``).
"""

from __future__ import annotations

import functools
from collections.abc import Hashable

import torch
from torch import nn

from taskgeom.models.adapters.timm_vit import TIMM_MODELS

TRAINING_ONLY = ("Dropout", "DropPath", "Identity")  # the identity at evaluation, whatever their rate


def architecture(model: nn.Module) -> tuple[Hashable, ...]:
    """What fixes a timm ViT's function but for its weights and input size (see the module docstring)."""
    shapes = tuple((k, tuple(v.shape)) for k, v in model.state_dict().items() if k != "pos_embed")
    modules = tuple((name, type(m).__name__, m.extra_repr(), getattr(m, "num_heads", None))
                    for name, m in model.named_modules() if type(m).__name__ not in TRAINING_ONLY)
    settings = tuple(getattr(model, k, None) for k in ("global_pool", "num_prefix_tokens", "no_embed_class"))
    return type(model).__name__, shapes, modules, settings


@functools.cache
def _adapter_architecture(name: str) -> tuple[Hashable, ...]:
    """The architecture of zoo adapter ``name``'s model, built by the adapter on the meta device."""
    with torch.device("meta"):
        host = TIMM_MODELS[name].build(None, {})
    return architecture(host.vit)


def timm_adapter(model: nn.Module) -> str | None:
    """The name of the zoo adapter whose architecture ``model`` (a timm model) has, or None."""
    mine = architecture(model)
    return next((name for name in TIMM_MODELS if _adapter_architecture(name) == mine), None)


def hf_adapter(model: nn.Module) -> str | None:
    """``depth-anything-v2`` for a transformers Depth Anything model, else None."""
    return "depth-anything-v2" if getattr(model.config, "model_type", None) == "depth_anything" else None
