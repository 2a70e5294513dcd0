"""A local Hugging Face model directory as a probe host, never downloading anything.

Supported: ViT, DINOv2 and DINOv2 with registers (``ViTModel``, ``Dinov2Model``,
``Dinov2WithRegistersModel`` and their ``…ForImageClassification``), and Depth Anything
(``DepthAnythingForDepthEstimation``, the host of ``adapters.depth_anything``).

``HFViTHost`` follows the models' own forward: ``embed`` is the embeddings module (position
encoding interpolated to the input's grid), ``block(i)`` the i-th encoder layer, and the decoders
read the last layer's output through the final layernorm: ``cls`` the CLS token (the backbone's
own pooled output for DINOv2), ``logits`` the classifier on what the model feeds it (ViT: the CLS
token; DINOv2: CLS concatenated with the mean of the patch tokens, register tokens left out).
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor, nn

from taskgeom.models.adapters.depth_anything import DepthAnythingHost, _use_eager_attention
from taskgeom.models.host import ProbeHost, freeze
from taskgeom.models.vit import Grid

HF_VIT_TYPES = ("vit", "dinov2", "dinov2_with_registers")
HF_FAMILIES = ("transformers ViT / DINOv2 / DINOv2-with-registers (bare or …ForImageClassification) and "
               "DepthAnythingForDepthEstimation")


def _layers(base: nn.Module) -> nn.ModuleList:
    """The encoder's layers, wherever this transformers version keeps them."""
    for owner, name in ((base, "layers"), (getattr(base, "encoder", None), "layer"),
                        (getattr(base, "encoder", None), "layers")):
        if owner is not None and isinstance(getattr(owner, name, None), nn.ModuleList):
            return getattr(owner, name)
    raise TypeError(f"{type(base).__name__}: no encoder layers found")


class HFViTHost(nn.Module):
    """ProbeHost over a transformers ViT or DINOv2 (see the module docstring)."""

    def __init__(self, model: nn.Module):
        """Probe ``model``, a transformers ViT / DINOv2 (with or without registers) model or classifier.

        Args:
            model: the transformers model; its config's ``model_type`` must be one of ``HF_VIT_TYPES``.

        Raises:
            TypeError: another model type, or no encoder layers found.
        """
        super().__init__()
        cfg = model.config
        if cfg.model_type not in HF_VIT_TYPES:
            raise TypeError(f"model type {cfg.model_type!r} is not one of {HF_VIT_TYPES}")
        self.model = model
        self.base = getattr(model, model.base_model_prefix, model)
        self.layers = _layers(self.base)
        self.num_blocks = len(self.layers)
        self.kind = cfg.model_type
        self.registers = int(getattr(cfg, "num_register_tokens", 0) or 0)
        self.patch_size = int(cfg.patch_size)
        self.classifier = getattr(model, "classifier", None)
        self.decoders = ("cls", "logits") if isinstance(self.classifier, nn.Module) else ("cls",)
        self._interpolate = "interpolate_pos_encoding" in inspect.signature(self.base.embeddings.forward).parameters

    def decoder_layers(self, decoder: str) -> tuple[int, ...]:
        """Every decoder reads the last block's output."""
        return (self.num_blocks - 1,)

    def embed(self, images: Tensor) -> tuple[Tensor, Grid]:
        """images (B, 3, H, W) -> CLS (+ registers) + patch tokens (B, T, D), their layout."""
        rows, cols = (s // self.patch_size for s in images.shape[-2:])
        kw = {"interpolate_pos_encoding": True} if self._interpolate else {}
        tokens = self.base.embeddings(images, **kw)
        return tokens, Grid(tokens.shape[1] - rows * cols, rows, cols)

    def block(self, i: int, h: Tensor, ctx: Grid) -> Tensor:
        """Encoder layer ``i``: (B, T, D) -> (B, T, D)."""
        out = self.layers[i](h)
        return out[0] if isinstance(out, tuple) else out

    def decode(self, decoder: str, states: Mapping[int, Tensor], ctx: Grid) -> Tensor:
        """The final layer norm, then ``cls``: the CLS embedding (B, D), or ``logits``: the classifier (B, K).

        ViT classifies the CLS token; DINOv2 classifies CLS concatenated with the mean patch token.
        """
        h = self.base.layernorm(states[self.num_blocks - 1])
        if decoder == "cls":
            return h[:, 0]
        if self.kind == "vit":
            return self.classifier(h[:, 0])
        patches = h[:, 1 + self.registers:]
        return self.classifier(torch.cat([h[:, 0], patches.mean(dim=1)], dim=1))


def _auto_class(config: dict):
    """The Auto class that rebuilds a checkpoint, from its config.json's ``architectures``."""
    from transformers import AutoModel, AutoModelForDepthEstimation, AutoModelForImageClassification

    names = " ".join(config.get("architectures") or [])
    if "ForImageClassification" in names:
        return AutoModelForImageClassification
    if "ForDepthEstimation" in names:
        return AutoModelForDepthEstimation
    return AutoModel


def load_hf(directory: str | Path) -> nn.Module:
    """The model saved in ``directory`` (config.json + weights), loaded with ``local_files_only``
    and the hub offline, eager attention. Raises FileNotFoundError naming what is missing."""
    path = Path(directory).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"--hf {path}: no config.json (a directory written by save_pretrained)")
    os.environ["HF_HUB_OFFLINE"] = "1"
    config = json.loads((path / "config.json").read_text())
    return _auto_class(config).from_pretrained(str(path), local_files_only=True, attn_implementation="eager")


def hf_host(model: nn.Module) -> ProbeHost:
    """A transformers model as a frozen float32 probe host on the eager attention path.

    Raises:
        TypeError: a model type this module does not run (see ``HF_FAMILIES``).
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type == "depth_anything":
        model = model.float()
        _use_eager_attention(model)
        return freeze(DepthAnythingHost(model))
    if model_type in HF_VIT_TYPES:
        model = model.float()
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation("eager")
        return freeze(HFViTHost(model))
    raise TypeError(f"transformers model type {model_type!r} ({type(model).__name__}) is not supported")
