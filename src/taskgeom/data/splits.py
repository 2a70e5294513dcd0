"""Reading the world's HDF5 splits into arrays, and turning images into model inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from taskgeom.data.hdf5 import open_store, reading

MEAN, STD = 0.5, 0.25


def read_world(path: str | Path, resolution: int | None = None, keys: tuple[str, ...] = ("rgb", "depth", "label"),
               limit: int | None = None) -> dict[str, np.ndarray]:
    """Arrays of one split at ``resolution`` (default: the base one), first ``limit`` scenes."""
    with open_store(path, "world") as f, reading(path, "world"):
        res = resolution or int(f.attrs["base_resolution"])
        if f"r{res}" not in f:
            raise KeyError(f"{path}: no renders at resolution {res} (has {[g for g in f if g.startswith('r')]})")
        n = int(f.attrs["num_items"]) if limit is None else min(limit, int(f.attrs["num_items"]))
        return {k: f[k if k == "label" else f"r{res}/{k}"][:n] for k in keys}


def to_input(rgb: np.ndarray | Tensor) -> Tensor:
    """(..., H, W, 3) uint8 -> (..., 3, H, W) float32, normalised."""
    x = torch.as_tensor(rgb).movedim(-1, -3).float() / 255.0
    return (x - MEAN) / STD

