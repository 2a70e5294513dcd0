"""The tiny zoo: build a model from its params entry, and save / load it as safetensors + JSON."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from taskgeom.artifacts import checkpoints
from taskgeom.data.world.scene import CLASS_NAMES
from taskgeom.models.dpt import TinyDPT
from taskgeom.models.multiview import TinyMultiView
from taskgeom.models.trunk import TinyTrunk
from taskgeom.models.vit import TimmViTHost, tiny_vit

NUM_CLASSES = len(CLASS_NAMES)
ARCH_KEYS = ("kind", "embed_dim", "depth", "num_heads", "patch_size", "read_layers", "head_features", "img_size")


def build(config: dict) -> nn.Module:
    """A zoo model from its architecture config (the params entry plus ``img_size``); each is a ProbeHost.

    Args:
        config: ``kind`` (cls, dpt, trunk, multiview, pretrained or latent) and its fields.

    Returns:
        The model, freshly initialised (a pretrained one as its adapter builds it, without weights).

    Raises:
        ValueError: an unknown kind.
    """
    if config["kind"] == "pretrained":  # the paper's architecture; weights come from the checkpoint
        from taskgeom.models.adapters import PAPER_MODELS

        spec = PAPER_MODELS[config["adapter"]]
        return spec.build(None, config.get("overrides", {}))
    if config["kind"] == "latent":  # a zoo host with a VAE before one decoder (taskgeom.metric.vae)
        from taskgeom.models.latent import build_latent_host

        return build_latent_host(build(config["base"]), config["decoder"], config["vae"])
    common = dict(embed_dim=config["embed_dim"], depth=config["depth"], num_heads=config["num_heads"],
                  patch_size=config["patch_size"], img_size=config["img_size"])
    kind = config["kind"]
    if kind == "cls":
        return TimmViTHost(tiny_vit(num_classes=NUM_CLASSES, **common))
    if kind == "dpt":
        return TinyDPT(read_layers=config["read_layers"], head_features=config["head_features"], **common)
    if kind == "trunk":
        return TinyTrunk(read_layers=config["read_layers"], head_features=config["head_features"],
                         num_classes=NUM_CLASSES, **common)
    if kind == "multiview":
        return TinyMultiView(read_layers=config["read_layers"], head_features=config["head_features"], **common)
    raise ValueError(f"unknown zoo model kind {kind!r}")


def architecture(params_entry: dict, img_size: int) -> dict:
    """The architecture config of a params entry: its ``ARCH_KEYS``, with ``img_size``.

    Args:
        params_entry: the zoo model's params entry.
        img_size: the side it trains at.

    Returns:
        The config ``build`` takes.
    """
    return {k: v for k, v in {**params_entry, "img_size": img_size}.items() if k in ARCH_KEYS}


save = checkpoints.save_module  # weights and architecture, as ``load`` reads them


def load(weights: str | Path, config_path: str | Path, device: str = "cpu") -> nn.Module:
    """Rebuild a zoo model from its JSON config and checked safetensors weights (eval mode).

    Args:
        weights: the safetensors file.
        config_path: its JSON config.
        device: where the model goes.

    Returns:
        The model in eval mode.

    Raises:
        FileNotFoundError: a file is missing.
        CheckpointError: the files do not match or cannot be read.
    """
    rerun = "rerun the stage that wrote it: `taskgeom zoo`, `vae` or `retrieval`"
    config = checkpoints.read_config(Path(config_path), rerun)
    model = build(config["architecture"])
    state = checkpoints.read_weights(Path(weights), config, rerun)
    checkpoints.check_fit(model, state, Path(weights), Path(config_path), rerun)
    model.load_state_dict(state)
    return model.to(device).eval()


def entry(config_path: str | Path) -> dict:
    """The architecture entry that a checkpoint's config.json records (what its preprocessing follows).

    Args:
        config_path: the checkpoint's JSON config.

    Returns:
        Its ``architecture``.
    """
    return json.loads(Path(config_path).read_text())["architecture"]


def load_named(name: str, root: str | Path = "data/zoo", device: str = "cpu") -> nn.Module:
    """``load`` of the checkpoint in ``root/name``.

    Args:
        name: the zoo model's name.
        root: the zoo directory.
        device: where the model goes.

    Returns:
        The model in eval mode.
    """
    root = Path(root) / name
    return load(root / "model.safetensors", root / "config.json", device)


def seeded(seed: int, config: dict) -> nn.Module:
    """``build`` after seeding torch's global generator (the initial weights follow from ``seed``).

    Args:
        seed: the seed.
        config: the architecture config.

    Returns:
        The model.
    """
    torch.manual_seed(seed)
    return build(config)
