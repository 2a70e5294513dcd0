"""Learned-metric networks on disk: safetensors weights + a JSON config (never pickles,
docs/design.md, "Conventions"). An importance-head checkpoint holds one network per training seed,
its tensors prefixed ``seed<k>.``, so the pruning stages can average over seeds."""

from __future__ import annotations

import json
from pathlib import Path

from torch import nn

from taskgeom.artifacts import checkpoints


def save_seeds(models: dict[int, nn.Module], architecture: dict, weights: Path, config_path: Path,
               provenance: dict) -> None:
    """One network per seed in one safetensors file, the architecture and seeds in the JSON;
    both record ``provenance``.

    Args:
        models: seed -> network; tensors are stored as ``seed<k>.<name>``.
        architecture: the constructor's arguments and ``kind`` (importance_head or spn).
        weights: the safetensors file to write.
        config_path: the JSON config to write.
        provenance: recorded in both files.
    """
    state = {f"seed{seed}.{k}": v.detach().contiguous().cpu()
             for seed, model in models.items() for k, v in model.state_dict().items()}
    checkpoints.write(state, {"architecture": architecture, "seeds": list(models)}, weights, config_path, provenance)


def load(weights: str | Path, config_path: str | Path, seed: int | None = None) -> tuple[nn.Module, dict]:
    """Rebuild an importance head or SPN from its checkpoint (eval mode); for a per-seed
    checkpoint, the network of ``seed`` (default: the first).

    Args:
        weights: the safetensors file.
        config_path: the JSON config beside it.
        seed: which network of a per-seed checkpoint; None for the first (or a single network).

    Returns:
        The network in eval mode and its ``architecture`` config.

    Raises:
        KeyError: ``seed`` is not held, or a seed was asked of a single-network checkpoint.
    """
    from taskgeom.metric.head import ImportanceHead
    from taskgeom.metric.spn import SpectralPullbackNetwork

    rerun = "rerun the stage that trains it: `taskgeom head` or `spn`"
    meta = checkpoints.read_config(Path(config_path), rerun)
    cfg = meta["architecture"]
    args = {k: v for k, v in cfg.items() if k != "kind"}
    model = {"importance_head": ImportanceHead, "spn": SpectralPullbackNetwork}[cfg["kind"]](**args)
    state = checkpoints.read_weights(Path(weights), meta, rerun)
    if "seeds" in meta:
        seeds = meta["seeds"]
        seed = seeds[0] if seed is None else seed
        if seed not in seeds:
            raise KeyError(f"{weights}: no network for seed {seed}; it holds seeds {seeds}")
        prefix = f"seed{seed}."
        state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    elif seed is not None:
        raise KeyError(f"{weights}: a single-network checkpoint; seed {seed} cannot be chosen")
    model.load_state_dict(state)
    return model.eval(), cfg


def seeds_of(config_path: str | Path) -> list[int]:
    """The seeds a checkpoint holds ([] for a single-network one).

    Args:
        config_path: the checkpoint's JSON config.

    Returns:
        The seeds, in the order they were saved.
    """
    return list(json.loads(Path(config_path).read_text()).get("seeds", []))
