"""Checkpoints on disk, checked: safetensors weights (never pickles) beside a JSON config that
records the sha256 of the weights file (``WEIGHTS_SHA256``). Loading verifies the digest, so
weights damaged after writing, or from another run than their config, are refused; any
safetensors or JSON error is reported with the file's path and the stage to rerun. Configs
written before the digest existed load unchecked."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from taskgeom.artifacts.atomic import atomic_path, write_json
from taskgeom.artifacts.provenance import KEY as PROVENANCE
from taskgeom.artifacts.provenance import encode

WEIGHTS_SHA256 = "weights_sha256"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read or does not match its config; the message names it."""


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in 1 MiB blocks.

    Args:
        path: the file.

    Returns:
        The hex digest.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write(state: dict[str, Tensor], config: dict[str, Any], weights: Path, config_path: Path,
          provenance: dict) -> None:
    """The weights (one metadata entry, the provenance: reruns give identical bytes), then the
    config with their digest and the provenance, each atomically.

    Args:
        state: tensor name -> contiguous CPU tensor.
        config: what the JSON config holds besides the digest and the provenance.
        weights: the safetensors file.
        config_path: the JSON config.
        provenance: recorded in both.
    """
    with atomic_path(weights) as tmp:
        save_file(state, str(tmp), metadata={PROVENANCE: encode(provenance)})
        digest = file_sha256(tmp)
    write_json(config_path, {**config, WEIGHTS_SHA256: digest, PROVENANCE: provenance})


def save_module(module: nn.Module, architecture: dict, weights: Path, config_path: Path, provenance: dict,
                metadata: dict | None = None) -> None:
    """A module's weights, and its ``architecture`` (what rebuilds it) with ``metadata`` as the
    config (``write``): what ``models.zoo.load`` reads back.

    Args:
        module: its state dict is saved (detached, on the CPU).
        architecture: what rebuilds it.
        weights: the safetensors file.
        config_path: the JSON config.
        provenance: recorded in both.
        metadata: further config entries.
    """
    state = {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}
    write(state, {"architecture": architecture, **(metadata or {})}, weights, config_path, provenance)


def read_config(config_path: Path, rerun: str) -> dict[str, Any]:
    """A checkpoint's config; ``rerun`` names what writes it, for the error message.

    Args:
        config_path: the JSON config.
        rerun: the stage to rerun to make it, quoted in errors.

    Returns:
        The config, with its ``architecture``.

    Raises:
        FileNotFoundError: the file is missing.
        CheckpointError: it is not JSON, or holds no ``architecture``.
    """
    config_path = Path(config_path)
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path}: checkpoint file missing ({rerun})")
    try:
        config = json.loads(config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{config_path}: not a checkpoint config, unreadable JSON ({err}); {rerun}") from None
    if not isinstance(config, dict) or "architecture" not in config:
        raise CheckpointError(f"{config_path}: not a checkpoint config (no architecture); {rerun}")
    return config


def read_weights(weights: Path, config: dict[str, Any], rerun: str) -> dict[str, Tensor]:
    """The tensors of ``weights``, after checking them against the digest ``config`` records.

    Args:
        weights: the safetensors file.
        config: its config (``read_config``); without a digest, the weights load unchecked.
        rerun: the stage to rerun to make it, quoted in errors.

    Returns:
        tensor name -> tensor.

    Raises:
        FileNotFoundError: the file is missing.
        CheckpointError: its digest differs, or it is not a readable safetensors file.
    """
    weights = Path(weights)
    if not weights.is_file():
        raise FileNotFoundError(f"{weights}: checkpoint file missing ({rerun})")
    expected = config.get(WEIGHTS_SHA256)
    if expected is not None and file_sha256(weights) != expected:
        raise CheckpointError(f"{weights}: its bytes do not match the digest its config records (damaged, or "
                              f"written by another run); {rerun}")
    try:
        return load_file(str(weights))
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{weights}: not a readable safetensors file ({err}); {rerun}") from None


def check_fit(module: nn.Module, state: dict[str, Tensor], weights: Path, config_path: Path, rerun: str) -> None:
    """``state`` (the tensors of ``weights``) has exactly the keys and shapes of ``module``, the
    architecture ``config_path`` records; otherwise a CheckpointError naming the first key that differs."""
    own = module.state_dict()
    for key in [*own, *(k for k in state if k not in own)]:
        if key not in state:
            problem = f"{key} is missing"
        elif key not in own:
            problem = f"{key} is not in it"
        elif own[key].shape != state[key].shape:
            problem = f"{key} is {tuple(state[key].shape)} where it has {tuple(own[key].shape)}"
        else:
            continue
        raise CheckpointError(f"{weights}: its tensors do not fit the architecture {config_path} records "
                              f"({problem}); {rerun}")
