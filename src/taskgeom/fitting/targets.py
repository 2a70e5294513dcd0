"""The target cache of a fit: the spectral Jacobian targets of the user's images at one layer,
split into training and held-out images, in two resumable HDF5 files.

Each image's row is ``metric.targets.image_targets`` at the fit's settings, as the pipeline's
``targets`` stage computes it: the features F (N, D), the randomized top-r triplets at q power
iterations (``q<q>/sigma``, ``q<q>/modes``) with the token energy e_t = Σ_{i≤r} σ_i² ‖V_{t,i}‖²
(``q<q>/importance``, what the head learns), the Hutchinson block norms ‖J_t‖_F² and their sum
(``block_norm``, ``frob2``, the SPN's ε target), and the products spent. Image j of a split is
seeded seed + the split's offset + j (the pipeline's train and test offsets).

The held-out images are a seeded choice among the images: ``held_out_split``. A file is
``data.hdf5.ResumableH5`` (one chunk per image, flushed after each image): a killed or interrupted
build resumes at its last written image and publishes the bytes an uninterrupted build publishes.
Each file records ``cache_key``, a sha256 over the model's identity, its images' names and sha256
and the settings; a file whose key matches is reused without computing anything, any other is
rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from taskgeom.data.hdf5 import ResumableH5, StoreError, forget_published, open_store
from taskgeom.metric.targets import KIND, SPLIT_SEED_OFFSET, TargetFile, image_targets
from taskgeom.probes import ProbeMap
from taskgeom.prune.scores import grid_of

SPLITS = {"train": "train", "held_out": "test"}  # split -> the pipeline split whose seed offset it takes
FILES = {"train": "train.h5", "held_out": "held_out.h5"}
CACHE_VERSION = 1  # part of every cache key; raised when a row's content changes


@dataclass
class Images:
    """The images of a fit.

    Attributes:
        names: one unique name per image (its path under the folder).
        sha256: each image file's sha256.
        load: image index -> the preprocessed input (3, H, W).
    """

    names: list[str]
    sha256: list[str]
    load: Callable[[int], Tensor]


@dataclass(frozen=True)
class Geometry:
    """What one image's probe looks like: N tokens of width D (a ``Grid``: prefix + rows × cols),
    M outputs, the target rank r = min(asked r, M, N·D) and the input's (H, W)."""

    tokens: int
    dim: int
    outputs: int
    rank: int
    prefix: int
    rows: int
    cols: int
    input: tuple[int, int]

    def layout(self, q: int) -> dict[str, tuple[tuple[int, ...], str]]:
        """Dataset -> (per-image shape, dtype) of a row (module docstring)."""
        N, D, r = self.tokens, self.dim, self.rank
        return {"features": ((N, D), "<f4"), f"q{q}/sigma": ((r,), "<f4"), f"q{q}/modes": ((N, D, r), "<f4"),
                f"q{q}/importance": ((N,), "<f4"), "block_norm": ((N,), "<f4"), "frob2": ((), "<f8"),
                "products": ((), "<i8")}


def geometry(pm: ProbeMap, image: Tensor, r: int) -> Geometry:
    """The probe's geometry at one preprocessed image (3, H, W), its token grid from the host's embedding."""
    probe = pm.at(image)
    N, D = probe.F.shape
    with torch.no_grad():
        M = int(probe.f(probe.F).numel())
        _, ctx = pm.host.embed(image[None])
    grid = grid_of(ctx)
    return Geometry(int(N), int(D), M, min(r, M, int(N * D)), grid.prefix, grid.rows, grid.cols,
                    (int(image.shape[-2]), int(image.shape[-1])))


def held_out_split(n: int, held_out: int, seed: int) -> tuple[list[int], list[int]]:
    """Training and held-out image indices: ``held_out`` of ``n`` chosen by a permutation seeded
    with ``seed``, each list ascending.

    Raises:
        ValueError: no training or no held-out image would be left.
    """
    if not 1 <= held_out < n:
        raise ValueError(f"--held-out: {held_out} of {n} image(s) held out leaves "
                         f"{'no held-out' if held_out < 1 else 'no training'} image; give more images")
    chosen = set(np.random.default_rng(seed).permutation(n)[:held_out].tolist())
    return [i for i in range(n) if i not in chosen], sorted(chosen)


def cache_key(identity: dict, settings: dict, names: Sequence[str], sha256: Sequence[str]) -> str:
    """sha256 of the sorted-key JSON of what a split's rows depend on."""
    what = {"version": CACHE_VERSION, "model": identity, "settings": settings,
            "images": [[n, s] for n, s in zip(names, sha256)]}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def cached(path: Path, key: str) -> bool:
    """Whether ``path`` is a complete targets file made with ``key``."""
    try:
        with open_store(path, KIND) as f:
            return f.attrs.get("cache_key") == key
    except StoreError:
        return False


def _row(pm: ProbeMap, image: Tensor, name: str, geom: Geometry, settings: dict, seed: int) -> dict[str, np.ndarray]:
    """One image's targets, checked against the fit's geometry (one token grid for every image)."""
    probe = pm.at(image)
    if tuple(probe.F.shape) != (geom.tokens, geom.dim):
        raise ValueError(f"--images {name}: its input is {image.shape[-2]}×{image.shape[-1]} "
                         f"({probe.F.shape[0]} tokens), the first image's {geom.input[0]}×{geom.input[1]} "
                         f"({geom.tokens}); fit learns one token grid: give images of one aspect ratio")
    q = settings["power_iters"]
    return image_targets(probe, geom.rank, (q,), settings["oversample"], settings["block_norm_probes"], seed, False)


def build_split(directory: Path, split: str, pm: ProbeMap, images: Images, indices: Sequence[int], geom: Geometry,
                settings: dict, identity: dict, provenance: dict, log: logging.Logger,
                progress: Callable = lambda it, **kw: it) -> tuple[TargetFile, bool]:
    """The split's targets file under ``directory``: reused when its cache key matches, else built
    resumably, image by image.

    Args:
        directory: where ``FILES[split]`` goes.
        split: "train" or "held_out".
        pm: the probe map at the fit's layer and decoder.
        images: every image of the fit.
        indices: the split's images, in order.
        geom: the probe's geometry (``geometry``).
        settings: r, power_iters, oversample, block_norm_probes, seed.
        identity: the model's identity (its digests), part of the cache key.
        provenance: recorded as an attribute.
        log: where reuse, resumption and rebuilding are said.
        progress: wraps the image loop (e.g. tqdm).

    Returns:
        The finished TargetFile and whether it was reused.
    """
    path = Path(directory) / FILES[split]
    names, shas = [images.names[i] for i in indices], [images.sha256[i] for i in indices]
    key = cache_key(identity, settings, names, shas)
    if cached(path, key):
        log.info("targets %s: reused %s (same model, images and settings)", split, path)
        return TargetFile.open(path), True
    q, seed0 = settings["power_iters"], settings["seed"] + SPLIT_SEED_OFFSET[SPLITS[split]]
    layout = geom.layout(q)
    attrs = {"cache_key": key, "split": split, "r": geom.rank, "power_iters": [q], "exact": False, "seed": seed0,
             "settings": settings, "provenance": provenance}
    store = ResumableH5(path, layout, len(indices), attrs, KIND, log=log)
    try:
        if store.done and not store.restored:
            log.info("targets %s: resuming at image %d of %d", split, store.done + 1, len(indices))
        for j in progress(range(store.done, len(indices)), desc=f"targets {split}", unit="image"):
            row = _row(pm, images.load(indices[j]), names[j], geom, settings, seed0 + j)
            store.write(j, {k: np.asarray(row[k], dtype=dtype).reshape(1, *shape) for k, (shape, dtype) in
                            layout.items()})
        store.finish()
    finally:
        store.close()
    forget_published([path])
    log.info("targets %s: computed %d image(s) into %s", split, len(indices), path)
    return TargetFile.open(path), False
