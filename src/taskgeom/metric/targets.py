"""The HDF5 cache of Jacobian targets that the SPN and the importance head learn from (paper
§5.3–5.4): what one image's row holds (``image_targets``, written by the ``targets`` stage,
``taskgeom.stages.targets``), and the reader that streams it into training.

For each image of a probe's train / val / test split, one row of each dataset:

- ``features`` (N, D): F, the network's only input;
- ``q{q}/sigma`` (r,), ``q{q}/modes`` (N, D, r), ``q{q}/importance`` (N,): randomized block power
  iteration (``linalg.randomized_svd_path``, oversampling ``oversample``) at q = 1 and at the q of
  params, both from one run, and the spectral importance target e_t = Σ_{i≤r} σ_i² ‖V_{t,i}‖²
  (docs/design.md, "Definitions");
- ``block_norm`` (N,): the block-norm target ‖J_t‖_F², by Hutchinson in output space —
  E‖(Jᵀu)_t‖² = ‖J_t‖_F² for Rademacher u, all tokens from the same ``block_norm_probes`` VJPs —
  and ``frob2`` = Σ_t block_norm_t, an estimate of ‖J‖_F²;
- ``exact/…`` the same from the dense Jacobian (its full SVD; block norms exact), on every split
  when min(M, N·D) ≤ ``exact.max_dim`` — the documented subset: probes small enough that the
  dense reference costs about what the RandNLA targets do. Larger probes have no exact rows, and
  their held-out evaluation uses the RandNLA targets at the largest q;
- ``products``: the JVPs + VJPs the row cost.

Image counts come from ``learn.targets.images``, overridden per probe by its own ``images``.

Files are ``ResumableH5`` (one chunk per image, gzip; attributes record parameters, seeds and code
version): a killed run resumes at its last flushed block and publishes the same bytes as an
uninterrupted one, since every image's seed is a function of its split and index only.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from torch import Tensor

from taskgeom.data.hdf5 import StoreError, open_store, read_attr_json
from taskgeom.finite import require_finite
from taskgeom.linalg.operator import JacobianOperator
from taskgeom.linalg.sketch import exact_sketch, randomized_svd_path, token_energy
from taskgeom.linalg.trace import rademacher

if TYPE_CHECKING:  # the readers of a cache (head, spn) need no model code, and timm takes seconds to load
    from taskgeom.probes import Probe

KIND = "targets"
IN_MEMORY_BYTES = 1 << 30  # a training run holds its rows in memory up to this size (``stream_batches``)
SPLITS = ("train", "val", "test")
SPLIT_SEED_OFFSET = {"train": 0, "val": 1_000_000, "test": 2_000_000}


def spectral_rows(sigma: Tensor, V: Tensor, N: int, D: int) -> dict[str, np.ndarray]:
    """The cached spectral datasets of one image from its top-r triplets.

    Args:
        sigma: (r,) top singular values.
        V: (N·D, r) their right singular vectors.
        N: tokens.
        D: feature dimension.

    Returns:
        float32 arrays: sigma (r,), modes (N, D, r) and importance e_t (N,).
    """
    return {"sigma": sigma.float().numpy(), "modes": V.reshape(N, D, -1).float().numpy(),
            "importance": token_energy(sigma, V, N, D).float().numpy()}


def block_norms(op: JacobianOperator, probes: int, seed: int) -> Tensor:
    """‖J_t‖_F² for every token t, by Hutchinson with ``probes`` Rademacher VJPs.

    Args:
        op: the Jacobian operator of the probe at F (N, D).
        probes: Rademacher starts (VJPs).
        seed: seeds the starts.

    Returns:
        (N,) block-norm estimates.
    """
    U = rademacher(op.out_dim, probes, seed, dtype=op.dtype, device=op.device).T   # (k, M)
    return op.rmatvec(U).pow(2).sum(dim=-1).mean(dim=0)


def image_targets(probe: Probe, r: int, qs: tuple[int, ...], oversample: int, block_norm_probes: int, seed: int,
                  exact: bool) -> dict[str, np.ndarray]:
    """Every cached dataset for one image (see the module docstring).

    Args:
        probe: the image's probe (F (N, D) and f).
        r: the rank of the spectral targets.
        qs: power-iteration counts whose targets are kept (one run).
        oversample: the sketch's oversampling.
        block_norm_probes: VJPs of the block-norm estimate.
        seed: seeds the sketch; the block norms use seed + 1.
        exact: add the ``exact/…`` rows from the dense Jacobian.

    Returns:
        dataset name -> array (features (N, D) float32, ``q{q}/…``, block_norm, frob2, products and,
        with ``exact``, ``exact/…``).
    """
    N, D = probe.F.shape
    op = JacobianOperator(probe.f, probe.F)
    rows: dict[str, np.ndarray] = {"features": probe.F.float().numpy()}
    for q, sketch in randomized_svd_path(op, r, qs, oversample, seed=seed).items():
        rows |= {f"q{q}/{k}": v for k, v in spectral_rows(sketch.sigma, sketch.V, N, D).items()}
    bn = block_norms(op, block_norm_probes, seed + 1)
    rows |= {"block_norm": bn.float().numpy(), "frob2": np.float64(bn.sum())}
    if exact:
        full = exact_sketch(op, r)
        rows |= {f"exact/{k}": v for k, v in spectral_rows(full.sigma, full.V, N, D).items()}
        rows |= {"exact/block_norm": token_energy(full.ritz, full.Q, N, D).float().numpy(),
                 "exact/frob2": np.float64(full.ritz.pow(2).sum())}
    rows["products"] = np.int64(op.products)
    return rows



@dataclass
class TargetFile:
    """A finished target file: its path, its attributes, and what it holds.

    Attributes:
        path: the HDF5 file.
        num_items: rows (images).
        r: the rank of the spectral targets.
        qs: the power-iteration counts held.
        exact: whether ``exact/…`` rows are held.
        tokens: N.
        dim: D.
    """

    path: Path
    num_items: int
    r: int
    qs: tuple[int, ...]
    exact: bool
    tokens: int
    dim: int

    @classmethod
    def open(cls, path: str | Path) -> TargetFile:
        """Check that ``path`` is a complete targets file (StoreError naming it otherwise).

        Args:
            path: the HDF5 file.

        Returns:
            Its TargetFile.

        Raises:
            StoreError: the file is not a complete targets file, or lacks an attribute.
        """
        path = Path(path)
        with open_store(path, KIND) as f:
            try:
                n, d = f["features"].shape[1:]
                return cls(path, int(f.attrs["num_items"]), int(f.attrs["r"]),
                           tuple(read_attr_json(f, "power_iters")), bool(f.attrs["exact"]), n, d)
            except KeyError as exc:
                raise StoreError(f"{path}: targets file lacks {exc}") from None

    def sources(self) -> list[str]:
        """Supervision sources it holds: 'exact' and 'q<q>'.

        Returns:
            Their names, 'exact' first when held.
        """
        return (["exact"] if self.exact else []) + [f"q{q}" for q in self.qs]

    def read(self, keys: tuple[str, ...], index: np.ndarray | slice = slice(None)) -> dict[str, np.ndarray]:
        """Rows ``index`` (sorted) of datasets ``keys``; a non-finite value is refused, naming its row.

        Args:
            keys: dataset names, e.g. ("features", "q2/importance").
            index: sorted row indices or a slice.

        Returns:
            dataset name -> its rows, first axis the rows.

        Raises:
            NonFiniteError: a value is NaN or infinite.
        """
        with open_store(self.path, KIND) as f:
            out = {k: f[k][index] for k in keys}
        rows = np.arange(self.num_items)[index]
        for k, v in out.items():
            require_finite(v, f"{self.path}: {k}", lambda i: f"row {rows[i]}")
        return out


def batch_rows(target: TargetFile, batch_size: int, seed: int, step: int, limit: int | None = None) -> np.ndarray:
    """The sorted rows of ``stream_batches``' batch of ``step``: a function of (seed, step) only.

    Args:
        target: the targets file.
        batch_size: rows per batch (at most the rows available).
        seed: the run's seed.
        step: the step.
        limit: draw only from the first ``limit`` rows.

    Returns:
        (min(batch_size, n),) distinct row indices, ascending.
    """
    n = min(limit or target.num_items, target.num_items)
    rng = np.random.default_rng([seed, step])
    return np.sort(rng.choice(n, size=min(batch_size, n), replace=False))


def rows_bytes(target: TargetFile, keys: tuple[str, ...], limit: int | None = None) -> int:
    """Bytes of the first ``limit`` rows (all when None) of datasets ``keys``, uncompressed."""
    n = min(limit or target.num_items, target.num_items)
    with open_store(target.path, KIND) as f:
        return n * sum(int(np.prod(f[k].shape[1:])) * f[k].dtype.itemsize for k in keys)


def memory_batches(target: TargetFile, keys: tuple[str, ...], batch_size: int, steps: int, seed: int,
                   limit: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """``stream_batches``' batches from the first ``limit`` rows of ``keys``, read whole once."""
    whole = target.read(keys, slice(0, min(limit or target.num_items, target.num_items)))
    for step in range(steps):
        idx = batch_rows(target, batch_size, seed, step, limit)
        yield {k: v[idx] for k, v in whole.items()}


def stream_batches(target: TargetFile, keys: tuple[str, ...], batch_size: int, steps: int, seed: int,
                   limit: int | None = None, prefetch: int = 4,
                   in_memory: int = IN_MEMORY_BYTES) -> Iterator[dict[str, np.ndarray]]:
    """``steps`` random minibatches of rows among the first ``limit``. The batch of step s depends
    on (seed, s) only. Where those rows of ``keys`` take at most ``in_memory`` bytes (``rows_bytes``)
    they are read once, each chunk decompressed once, and every batch is taken from memory; else
    each batch is read from disk by a background thread ``prefetch`` batches ahead, and only those
    rows are ever in memory. Either way a batch holds the same values.

    Args:
        target: the targets file.
        keys: the datasets each batch holds.
        batch_size: rows per batch.
        steps: batches.
        seed: the run's seed.
        limit: draw only from the first ``limit`` rows.
        prefetch: batches read ahead, when streamed.
        in_memory: the most bytes read whole.

    Yields:
        dataset name -> (batch, ...) array; an error of the reader is raised here.
    """
    if rows_bytes(target, keys, limit) <= in_memory:
        yield from memory_batches(target, keys, batch_size, steps, seed, limit)
        return
    out: queue.Queue = queue.Queue(maxsize=prefetch)
    stop = threading.Event()

    def reader() -> None:
        try:
            with open_store(target.path, KIND) as f:
                for step in range(steps):
                    idx = batch_rows(target, batch_size, seed, step, limit)
                    batch = {k: f[k][idx] for k in keys}
                    for k, v in batch.items():
                        require_finite(v, f"{target.path}: {k}", lambda i: f"row {idx[i]}")  # noqa: B023
                    while not stop.is_set():
                        try:
                            out.put(batch, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
        except BaseException as exc:  # surfaced in the consumer
            out.put(exc)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        for _ in range(steps):
            item = out.get()
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()

