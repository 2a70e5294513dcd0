"""What a fit will cost, measured before it starts: the line ``taskgeom fit`` prints first.

The targets' time is one image's row, timed (``targets.target_row`` on the first image still to
compute, the row kept for the build), times the images still to compute; each network's time is
its steps times one step, an optimizer step timed on random inputs of the training batch's shape
after one untimed step, plus its reading: one row stored as the targets file stores it
(``data.hdf5.new_file``: a gzip-compressed, checksummed chunk per row) and read back with no chunk
cache, as a run reads rows it has not read before, once per training row where the rows fit in
memory (``metric.targets.stream_batches`` reads them once), else once per row of every step's
batch. Steps and reading are added, as on a machine whose cores the steps already fill. The
estimate leaves out the held-out evaluation, and each timing counts its first-call costs once per
image or step.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch
from torch import Tensor, nn

from taskgeom.data.hdf5 import new_file
from taskgeom.fitting.targets import Geometry, Images, SplitBuild, next_row, products_per_image
from taskgeom.fitting.train import HEAD, SPN
from taskgeom.metric.head import head_loss
from taskgeom.metric.head_fit import new_head
from taskgeom.metric.spn import spn_loss
from taskgeom.metric.spn_fit import new_spn
from taskgeom.metric.targets import IN_MEMORY_BYTES
from taskgeom.probes import ProbeMap


@dataclass
class Estimate:
    """A fit's predicted seconds by phase.

    Attributes:
        images: images whose targets are still to compute.
        products: JVPs + VJPs per image.
        row_s: one image's row, measured (0 when no image is left to compute).
        head_steps: the head's steps.
        head_step_s: one head step, measured.
        head_read_s: the head's reading of its rows, measured.
        spn_steps: the SPN's steps (0 when it is not trained).
        spn_step_s: one SPN step, measured (0 when it is not trained).
        spn_read_s: the SPN's reading of its rows, measured (0 when it is not trained).
    """

    images: int
    products: int
    row_s: float
    head_steps: int
    head_step_s: float
    head_read_s: float
    spn_steps: int
    spn_step_s: float
    spn_read_s: float

    @property
    def phases(self) -> dict[str, float]:
        """Seconds of targets, head and SPN."""
        return {"targets": self.images * self.row_s, "head": self.head_steps * self.head_step_s + self.head_read_s,
                "spn": self.spn_steps * self.spn_step_s + self.spn_read_s}

    def line(self) -> str:
        """"estimated T (targets ~a for K images at P products each, head ~b, SPN ~c)", each time in
        ``duration``'s words; the SPN's part only where it is trained."""
        p = self.phases
        spn = f", SPN ~{duration(p['spn'])}" if self.spn_steps else ""
        return (f"estimated {duration(sum(p.values()))} (targets ~{duration(p['targets'])} for {self.images} images "
                f"at {self.products} products each, head ~{duration(p['head'])}{spn})")


def duration(seconds: float) -> str:
    """"N min" to a tenth from a minute up, else "N s" to the second."""
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    """(fn(), its wall-clock seconds)."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _step_seconds(model: nn.Module, loss: Callable[[nn.Module], Tensor]) -> float:
    """Seconds of the second of two AdamW steps of ``loss`` (the first warms the caches up)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def step() -> None:
        value = loss(model)
        opt.zero_grad(set_to_none=True)
        value.backward()
        opt.step()

    step()
    return timed(step)[1]


def head_step_seconds(tokens: int, dim: int, arch: dict, batch: int) -> float:
    """One step of a head of ``arch`` (width, heads, layers, w_rank) on a random batch (batch, N, D)."""
    g = torch.Generator().manual_seed(0)
    F, target = torch.randn(batch, tokens, dim, generator=g), torch.rand(batch, tokens, generator=g) + 0.1
    head = new_head(tokens, dim, arch["width"], arch["heads"], arch["layers"], 0, "cpu")
    return _step_seconds(head, lambda m: head_loss(m(F), target, arch["w_rank"]))


def spn_step_seconds(tokens: int, dim: int, rank: int, arch: dict, batch: int) -> float:
    """One step of an SPN of ``arch`` (width, depth, heads) on a random batch: features (batch, N, D)
    and orthonormal target modes (batch, N·D, r)."""
    g = torch.Generator().manual_seed(0)
    F = torch.randn(batch, tokens, dim, generator=g)
    V = torch.linalg.qr(torch.randn(batch, tokens * dim, rank, generator=g)).Q
    sigma = torch.rand(batch, rank, generator=g) + 1
    frob2 = 2 * sigma.pow(2).sum(1)
    spn = new_spn(tokens, dim, rank, arch["width"], arch["depth"], arch["heads"], 0, "cpu")
    return _step_seconds(spn, lambda m: spn_loss(m(F), V, sigma, frob2))


def batch_of(batch_size: int, train_images: int) -> int:
    """Rows of a training batch: ``metric.targets.batch_rows`` draws min(batch size, training images)."""
    return min(batch_size, train_images)


def read_seconds(row: dict[str, np.ndarray], layout: dict, keys: tuple[str, ...], rows: int) -> float:
    """Seconds to read ``rows`` rows of datasets ``keys`` from a targets file: ``row`` written once
    to a file made as the targets file is (``new_file``, ``layout``'s shapes and dtypes), then read
    back ``rows`` times with HDF5's chunk cache off, so every read decompresses and checks its chunk."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "row.h5"
        part = {k: layout[k] for k in keys}
        with new_file(path, {}, part, 1) as f:
            for k, (shape, dtype) in part.items():
                f[k][0:1] = np.asarray(row[k], dtype=dtype).reshape(1, *shape)
        with h5py.File(path, "r", rdcc_nbytes=0) as f:
            return timed(lambda: [f[k][0:1] for _ in range(rows) for k in keys])[1]


def reading_seconds(row: dict[str, np.ndarray], layout: dict, keys: tuple[str, ...], batch: int, steps: int,
                    train_images: int) -> float:
    """Seconds a network's ``steps`` spend reading rows of ``keys`` (``read_seconds``): every
    training row once where they fit in ``IN_MEMORY_BYTES``, else each step's ``batch`` rows."""
    per_row = sum(int(np.prod(layout[k][0])) * np.dtype(layout[k][1]).itemsize for k in keys)
    if per_row * train_images <= IN_MEMORY_BYTES:
        return read_seconds(row, layout, keys, train_images)
    return steps * read_seconds(row, layout, keys, batch)


def _sample_row(builds: list[SplitBuild], first: dict[str, dict]) -> dict[str, np.ndarray]:
    """A row to time reading with: the one timed for the targets, else the finished training file's first."""
    if first:
        return next(iter(first.values()))
    train = next(b for b in builds if b.split == "train")
    with h5py.File(train.path, "r") as f:
        return {k: f[k][0] for k in train.layout}


def estimate_fit(builds: list[SplitBuild], pm: ProbeMap, images: Images, geom: Geometry, settings: dict,
                 training: dict) -> tuple[dict[str, dict], Estimate]:
    """The fit's Estimate (module docstring), and the row it timed, to be written, not recomputed.
    Torch's global random state is left as it was.

    Args:
        builds: the splits' target files (``targets.open_split``).
        pm: the probe map.
        images: every image of the fit.
        geom: the probe's geometry.
        settings: the target settings (``targets.target_row``'s).
        training: steps, spn_steps, batch_size, train_images and spn (whether the SPN is trained).

    Returns:
        ({split: the row of its first pending image} for the split whose row was timed, the Estimate).
    """
    pending = [b for b in builds if b.pending]
    first, row_s = {}, 0.0
    if pending:
        first[pending[0].split], row_s = timed(lambda: next_row(pending[0], pm, images, geom, settings))
    batch, spn, q = batch_of(training["batch_size"], training["train_images"]), training["spn"], settings["power_iters"]
    row, layout = _sample_row(builds, first), builds[0].layout
    steps, spn_steps, n = training["steps"], training["spn_steps"] if spn else 0, training["train_images"]
    with torch.random.fork_rng(devices=[]):
        head_s = head_step_seconds(geom.tokens, geom.dim, HEAD, batch)
        head_read = reading_seconds(row, layout, ("features", f"q{q}/importance"), batch, steps, n)
        spn_s = spn_read = 0.0
        if spn:
            spn_s = spn_step_seconds(geom.tokens, geom.dim, geom.rank, SPN, batch)
            spn_read = reading_seconds(row, layout, ("features", f"q{q}/modes", f"q{q}/sigma", "frob2"), batch,
                                       spn_steps, n)
    return first, Estimate(sum(b.pending for b in builds), products_per_image(geom, settings), row_s,
                           steps, head_s, head_read, spn_steps, spn_s, spn_read)
