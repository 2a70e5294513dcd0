"""Reading the world's HDF5 splits into arrays, and turning images into model inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from taskgeom.data.damage import reading
from taskgeom.data.hdf5 import open_store

MEAN, STD = 0.5, 0.25


def read_world(path: str | Path, resolution: int | None = None, keys: tuple[str, ...] = ("rgb", "depth", "label"),
               limit: int | None = None) -> dict[str, np.ndarray]:
    """Arrays of one split at ``resolution`` (default: the base one), first ``limit`` scenes.

    Args:
        path: the world split's HDF5 file.
        resolution: the render side; None for the file's base resolution.
        keys: datasets to read: label, or the per-resolution rgb, depth, sketch, K, cam_to_world, ….
        limit: the first scenes to read; None for all.

    Returns:
        key -> array with the scenes first, e.g. rgb (S, V, H, W, 3) uint8, label (S,).

    Raises:
        StoreError: the file is missing or not a world split.
        KeyError: no renders at that resolution.
    """
    with open_store(path, "world") as f, reading(path, "world"):
        res = resolution or int(f.attrs["base_resolution"])
        if f"r{res}" not in f:
            raise KeyError(f"{path}: no renders at resolution {res} (has {[g for g in f if g.startswith('r')]})")
        n = int(f.attrs["num_items"]) if limit is None else min(limit, int(f.attrs["num_items"]))
        return {k: f[k if k == "label" else f"r{res}/{k}"][:n] for k in keys}


def to_input(rgb: np.ndarray | Tensor) -> Tensor:
    """Images as normalised model inputs, (x / 255 − MEAN) / STD.

    Args:
        rgb: (..., H, W, 3) uint8.

    Returns:
        (..., 3, H, W) float32.
    """
    x = torch.as_tensor(rgb).movedim(-1, -3).float() / 255.0
    return (x - MEAN) / STD

