"""The target cache of a fit: the spectral Jacobian targets of the user's images at one layer,
split into training and held-out images, in two resumable HDF5 files.

Each image's row (``target_row``) holds the features F (N, D), the top-r triplets at q power
iterations (``q<q>/sigma``, ``q<q>/modes``) with the token energy e_t = Σ_{i≤r} σ_i² ‖V_{t,i}‖²
(``q<q>/importance``, what the head learns), the block norms ‖J_t‖_F² and their sum
(``block_norm``, ``frob2``, the SPN's ε target), and the products spent. ``SKETCHES`` name how the
triplets are taken:

- "projected" (``linalg.projected.projected_svd``): the power-iterated right subspace of the
  pipeline's sketch, its triplets from the left projection, (2q + 1)·ℓ products (ℓ = r +
  oversample), the JVPs run as transposed VJPs (``linalg.transposed``); with no block-norm
  probes, ``block_norm`` is the Hutchinson estimate the sketch's first block of ℓ Gaussian VJPs
  gives (E (1/ℓ) Σ_j ‖(JᵀΩ)_{t,:,j}‖² = ‖J_t‖_F²) and ``frob2`` its sum; with
  ``block_norm_probes`` k > 0, the pipeline's k-probe Rademacher estimate instead (k VJPs);
- "rayleigh-ritz": the pipeline's ``targets`` stage row (``metric.targets.image_targets``),
  (2q + 2)·ℓ products plus the k ≥ 1 block-norm probes.

Each reads J whole, exactly, in min(M, N·D) products, when that is no dearer ("projected": at most
(2q + 1)·ℓ; "rayleigh-ritz": at most ℓ); with "projected" and no probes the block norms and
‖J‖_F² are then exact too. Image j of a split is seeded
seed + the split's offset + j (the pipeline's train and test offsets).

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
from taskgeom.linalg.projected import projected_cost, projected_svd
from taskgeom.linalg.transposed import TransposedOperator
from taskgeom.metric.targets import KIND, SPLIT_SEED_OFFSET, TargetFile, block_norms, image_targets, spectral_rows
from taskgeom.probes import Probe, ProbeMap
from taskgeom.prune.scores import grid_of

SPLITS = {"train": "train", "held_out": "test"}  # split -> the pipeline split whose seed offset it takes
FILES = {"train": "train.h5", "held_out": "held_out.h5"}
CACHE_VERSION = 1  # part of every cache key; raised when a row's content changes
SKETCHES = ("projected", "rayleigh-ritz")  # module docstring


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


def products_per_image(geom: Geometry, settings: dict) -> int:
    """JVPs + VJPs one image's row costs at ``settings`` (sketch, power_iters, oversample,
    block_norm_probes), ℓ = min(r + oversample, M, N·D): "projected", min(M, N·D) when that is at
    most (2q + 1)·ℓ (J read whole), else (2q + 1)·ℓ; "rayleigh-ritz", min(M, N·D) when ℓ reaches it,
    else (2q + 2)·ℓ; plus the block-norm probes."""
    M, n, q = geom.outputs, geom.tokens * geom.dim, settings["power_iters"]
    ell = min(geom.rank + settings["oversample"], M, n)
    if settings["sketch"] == "rayleigh-ritz":
        sketch = min(M, n) if ell == min(M, n) else (2 * q + 2) * ell
    else:
        sketch = projected_cost(M, n, geom.rank, settings["oversample"], q)
    return sketch + settings["block_norm_probes"]


def projected_row(probe: Probe, r: int, q: int, oversample: int, block_norm_probes: int,
                  seed: int) -> dict[str, np.ndarray]:
    """One image's row by the "projected" sketch (module docstring): the datasets and dtypes of
    ``image_targets``' row without ``exact/…``.

    Args:
        probe: the image's probe.
        r: the rank of the targets.
        q: power iterations.
        oversample: the sketch's oversampling.
        block_norm_probes: 0 (block norms from the sketch's first block) or the Rademacher VJPs.
        seed: seeds the sketch; the block-norm probes use seed + 1.

    Returns:
        dataset name -> array.
    """
    N, D = probe.F.shape
    op = TransposedOperator(probe.f, probe.F)
    sketch = projected_svd(op, r, q, oversample, seed)
    rows: dict[str, np.ndarray] = {"features": probe.F.float().numpy()}
    rows |= {f"q{q}/{k}": v for k, v in spectral_rows(sketch.sigma, sketch.V, N, D).items()}
    bn = block_norms(op, block_norm_probes, seed + 1) if block_norm_probes else sketch.diag.reshape(N, D).sum(1)
    rows |= {"block_norm": bn.float().numpy(), "frob2": np.float64(bn.sum()), "products": np.int64(op.products)}
    return rows


def target_row(probe: Probe, geom: Geometry, settings: dict, seed: int) -> dict[str, np.ndarray]:
    """One image's row at ``settings`` (sketch, power_iters, oversample, block_norm_probes) with
    ``seed``: ``projected_row`` or the pipeline's ``image_targets``."""
    q, oversample, probes = settings["power_iters"], settings["oversample"], settings["block_norm_probes"]
    if settings["sketch"] == "rayleigh-ritz":
        return image_targets(probe, geom.rank, (q,), oversample, probes, seed, False)
    return projected_row(probe, geom.rank, q, oversample, probes, seed)


def probe_of(pm: ProbeMap, image: Tensor, name: str, geom: Geometry) -> Probe:
    """The image's probe, checked against the fit's geometry (one token grid for every image)."""
    probe = pm.at(image)
    if tuple(probe.F.shape) != (geom.tokens, geom.dim):
        raise ValueError(f"--images {name}: its input is {image.shape[-2]}×{image.shape[-1]} "
                         f"({probe.F.shape[0]} tokens), the first image's {geom.input[0]}×{geom.input[1]} "
                         f"({geom.tokens}); fit learns one token grid: give images of one aspect ratio")
    return probe


@dataclass
class SplitBuild:
    """One split's targets file, found finished or open for building (``open_split``).

    Attributes:
        split: "train" or "held_out".
        path: the published file.
        indices: the split's images, in order.
        names: their names.
        seed0: the seed of its first image (image j takes seed0 + j).
        layout: dataset -> (per-image shape, dtype).
        store: the file being built, or None when the finished one is reused.
    """

    split: str
    path: Path
    indices: list[int]
    names: list[str]
    seed0: int
    layout: dict
    store: ResumableH5 | None

    @property
    def pending(self) -> int:
        """Images still to compute (0 when reused)."""
        return 0 if self.store is None else len(self.indices) - self.store.done

    def close(self) -> None:
        """Close the partial file, if open (nothing is published)."""
        if self.store is not None:
            self.store.close()


def open_split(directory: Path, split: str, images: Images, indices: Sequence[int], geom: Geometry, settings: dict,
               identity: dict, provenance: dict, log: logging.Logger) -> SplitBuild:
    """The split's targets file under ``directory``: reused when its cache key matches, else opened
    to be built resumably (a partial file of the same key resumes at its last written image).

    Args:
        directory: where ``FILES[split]`` goes.
        split: "train" or "held_out".
        images: every image of the fit.
        indices: the split's images, in order.
        geom: the probe's geometry (``geometry``).
        settings: sketch, r, power_iters, oversample, block_norm_probes, seed.
        identity: the model's identity (its digests), part of the cache key.
        provenance: recorded as an attribute.
        log: where reuse and resumption are said.

    Returns:
        The SplitBuild.
    """
    path = Path(directory) / FILES[split]
    names, shas = [images.names[i] for i in indices], [images.sha256[i] for i in indices]
    key = cache_key(identity, settings, names, shas)
    q, seed0 = settings["power_iters"], settings["seed"] + SPLIT_SEED_OFFSET[SPLITS[split]]
    build = SplitBuild(split, path, list(indices), names, seed0, geom.layout(q), None)
    if cached(path, key):
        log.info("targets %s: reused %s (same model, images and settings)", split, path)
        return build
    attrs = {"cache_key": key, "split": split, "r": geom.rank, "power_iters": [q], "exact": False, "seed": seed0,
             "settings": settings, "provenance": provenance}
    build.store = ResumableH5(path, build.layout, len(indices), attrs, KIND, log=log)
    if build.store.done and not build.store.restored:
        log.info("targets %s: resuming at image %d of %d", split, build.store.done + 1, len(indices))
    return build


def next_row(build: SplitBuild, pm: ProbeMap, images: Images, geom: Geometry, settings: dict) -> dict[str, np.ndarray]:
    """The row of the split's first image still to compute (``pending`` > 0)."""
    j = build.store.done
    return target_row(probe_of(pm, images.load(build.indices[j]), build.names[j], geom), geom, settings,
                      build.seed0 + j)


def fill_split(build: SplitBuild, pm: ProbeMap, images: Images, geom: Geometry, settings: dict, log: logging.Logger,
               progress: Callable = lambda it, **kw: it, first: dict[str, np.ndarray] | None = None) -> TargetFile:
    """Compute the split's pending rows image by image, publish the file and open it (a reused
    file is opened as it is).

    Args:
        build: from ``open_split``.
        pm: the probe map at the fit's layer and decoder.
        images: every image of the fit.
        geom: the probe's geometry.
        settings: as ``open_split``'s.
        log: where the computed count is said.
        progress: wraps the image loop (e.g. tqdm).
        first: the first pending image's row, already computed (``next_row``), or None.

    Returns:
        The finished TargetFile.
    """
    if build.store is None:
        return TargetFile.open(build.path)
    store, n = build.store, len(build.indices)
    try:
        for j in progress(range(store.done, n), desc=f"targets {build.split.replace('_', '-')}", unit="image"):
            row = first if first is not None else next_row(build, pm, images, geom, settings)
            first = None
            store.write(j, {k: np.asarray(row[k], dtype=dtype).reshape(1, *shape)
                            for k, (shape, dtype) in build.layout.items()})
        store.finish()
    finally:
        store.close()
    forget_published([build.path])
    log.info("targets %s: computed %d image(s) into %s", build.split, n, build.path)
    return TargetFile.open(build.path)
