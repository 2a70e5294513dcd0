"""The ``targets`` stage: the HDF5 cache of Jacobian targets that the SPN and the importance
head learn from (paper §5.3–5.4), and the reader that streams it into training.

For each image of a probe's train / val / test split, one row of each dataset:

- ``features`` (N, D): F, the network's only input;
- ``q{q}/sigma`` (r,), ``q{q}/modes`` (N, D, r), ``q{q}/importance`` (N,): randomized block power
  iteration (``linalg.randomized_svd_path``, oversampling ``oversample``) at q = 1 and at the q of
  params, both from one run, and the spectral importance target e_t = Σ_{i≤r} σ_i² ‖V_{t,i}‖²
  (DESIGN.md);
- ``block_norm`` (N,): the block-norm target ‖J_t‖_F², by Hutchinson in output space —
  E‖(Jᵀu)_t‖² = ‖J_t‖_F² for Rademacher u, all tokens from the same ``block_norm_probes`` VJPs —
  and ``frob2`` = Σ_t block_norm_t, an estimate of ‖J‖_F²;
- ``exact/…`` the same from the dense Jacobian (its full SVD; block norms exact), on every split
  when min(M, N·D) ≤ ``exact.max_dim`` — the documented subset: probes small enough that the
  dense reference costs about what the RandNLA targets do. Larger probes have no exact rows, and
  their held-out evaluation uses the RandNLA targets at the largest q.

Image counts come from ``learn.targets.images``, overridden per probe by its own ``images``.

Files are ``ResumableH5`` (one chunk per image, gzip; attributes record parameters, seeds and code
version): a killed run resumes at its last flushed block and publishes the same bytes as an
uninterrupted one, since every image's seed is a function of its split and index only.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .data.hdf5 import ResumableH5, StoreError, open_store, read_attr_json
from .data.splits import read_world, to_input
from .linalg import JacobianOperator, exact_sketch, rademacher, randomized_svd_path, token_energy
from .models import zoo
from .probes import Probe, probe_map
from .runtime import StageContext

KIND = "targets"
SPLITS = ("train", "val", "test")
SPLIT_SEED_OFFSET = {"train": 0, "val": 1_000_000, "test": 2_000_000}


def spectral_rows(sigma: Tensor, V: Tensor, N: int, D: int) -> dict[str, np.ndarray]:
    """Top-r σ (r,), modes V (N·D, r) -> the cached sigma, modes (N, D, r) and e_t (N,)."""
    return {"sigma": sigma.float().numpy(), "modes": V.reshape(N, D, -1).float().numpy(),
            "importance": token_energy(sigma, V, N, D).float().numpy()}


def block_norms(op: JacobianOperator, probes: int, seed: int) -> Tensor:
    """‖J_t‖_F² for every token t (N,), by Hutchinson with ``probes`` Rademacher VJPs."""
    U = rademacher(op.out_dim, probes, seed, dtype=op.dtype, device=op.device).T   # (k, M)
    return op.rmatvec(U).pow(2).sum(dim=-1).mean(dim=0)


def image_targets(probe: Probe, r: int, qs: tuple[int, ...], oversample: int, block_norm_probes: int, seed: int,
                  exact: bool) -> dict[str, np.ndarray]:
    """Every cached dataset for one image (see the module docstring)."""
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


def is_multiview(host) -> bool:
    return "camera" in getattr(host, "base", host).decoders


def split_images(inputs: dict[str, Path], multiview: bool, counts: dict[str, int]) -> dict[str, Tensor]:
    """The first ``counts[split]`` images of each split, as model inputs; multi-view hosts (the
    world has no multi-view val split) draw train from mv_train's head, val from its tail, test
    from mv_test."""
    if not multiview:
        images = {s: read_world(inputs[s], keys=("rgb",), limit=counts[s])["rgb"] for s in SPLITS}
    else:
        train = read_world(inputs["mv_train"], keys=("rgb",))["rgb"]
        if counts["train"] + counts["val"] > len(train):
            raise ValueError(f"learn.targets.images: train + val = {counts['train'] + counts['val']} multi-view groups "
                             f"requested, {inputs['mv_train']} holds {len(train)}")
        images = {"train": train[:counts["train"]], "val": train[len(train) - counts["val"]:],
                  "test": read_world(inputs["mv_test"], keys=("rgb",), limit=counts["test"])["rgb"]}
    for split, rgb in images.items():
        if len(rgb) < counts[split]:
            raise ValueError(f"learn.targets.images.{split}: {counts[split]} requested, the split holds {len(rgb)}")
    return {s: to_input(rgb) for s, rgb in images.items()}


def build_split(ctx: StageContext, name: str, split: str, pm, images: Tensor, settings: dict, r: int,
                exact: bool) -> None:
    qs = tuple(sorted({1, settings["power_iters"]}))
    seed0 = settings["seed"] + SPLIT_SEED_OFFSET[split]
    first = image_targets(pm.at(images[0].to(ctx.device)), r, qs, settings["oversample"], settings["block_norm_probes"],
                          seed0, exact)
    layout = {k: (np.shape(v), np.asarray(v).dtype.str) for k, v in first.items()}
    attrs = {"probe": name, "split": split, "r": r, "power_iters": list(qs), "exact": exact, "seed": seed0,
             "settings": settings, "provenance": ctx.provenance()}
    store = ResumableH5(ctx.outputs[split], layout, len(images), attrs, KIND, log=ctx.log)
    try:
        if store.done:
            ctx.log.info("%s/%s: resuming at image %d of %d", name, split, store.done, len(images))
        block = settings["block"]
        for start in ctx.progress(range(store.done, len(images), block), desc=f"targets {name}/{split}"):
            rows = [first if i == 0 else image_targets(pm.at(images[i].to(ctx.device)), r, qs, settings["oversample"],
                                                       settings["block_norm_probes"], seed0 + i, exact)
                    for i in range(start, min(start + block, len(images)))]
            store.write(start, {k: np.stack([row[k] for row in rows]) for k in layout})
        store.finish()
    finally:
        store.close()


def run(ctx: StageContext) -> None:
    settings = ctx.params["learn"]["targets"]
    name = ctx.wildcard
    spec = ctx.params["learn"]["probes"][name]
    torch.manual_seed(0)
    host = zoo.load(ctx.inputs["weights"], ctx.inputs["config"], ctx.device)
    pm = probe_map(host, spec["decoder"], spec.get("layers"))
    multiview = is_multiview(host)
    images = split_images(ctx.inputs, multiview, {**settings["images"], **spec.get("images", {})})
    probe0 = pm.at(images["test"][0].to(ctx.device))
    N, D = probe0.F.shape
    M = int(probe0.f(probe0.F).numel())
    r = min(spec.get("r", ctx.params["learn"]["r"]), M, N * D)
    exact = min(M, N * D) <= settings["exact"]["max_dim"]
    ctx.log.info("targets %s: N=%d D=%d M=%d r=%d, exact targets: %s", name, N, D, M, r, "yes" if exact else "no")
    for split in SPLITS:
        t0 = time.perf_counter()
        build_split(ctx, name, split, pm, images[split], settings, r, exact)
        ctx.log.info("%s/%s: %d images in %.1f s", name, split, len(images[split]), time.perf_counter() - t0)


# --- reading -------------------------------------------------------------------------------

@dataclass
class TargetFile:
    """A finished target file: its path, its attributes, and what it holds."""

    path: Path
    num_items: int
    r: int
    qs: tuple[int, ...]
    exact: bool
    tokens: int
    dim: int

    @classmethod
    def open(cls, path: str | Path) -> TargetFile:
        """Check that ``path`` is a complete targets file (StoreError naming it otherwise)."""
        path = Path(path)
        with open_store(path, KIND) as f:
            try:
                n, d = f["features"].shape[1:]
                return cls(path, int(f.attrs["num_items"]), int(f.attrs["r"]),
                           tuple(read_attr_json(f, "power_iters")), bool(f.attrs["exact"]), n, d)
            except KeyError as exc:
                raise StoreError(f"{path}: targets file lacks {exc}") from None

    def sources(self) -> list[str]:
        """Supervision sources it holds: 'exact' and 'q<q>'."""
        return (["exact"] if self.exact else []) + [f"q{q}" for q in self.qs]

    def read(self, keys: tuple[str, ...], index: np.ndarray | slice = slice(None)) -> dict[str, np.ndarray]:
        """Rows ``index`` (sorted) of datasets ``keys``."""
        with open_store(self.path, KIND) as f:
            return {k: f[k][index] for k in keys}


def stream_batches(target: TargetFile, keys: tuple[str, ...], batch_size: int, steps: int, seed: int,
                   limit: int | None = None, prefetch: int = 4) -> Iterator[dict[str, np.ndarray]]:
    """``steps`` random minibatches of rows among the first ``limit``, read from disk by a
    background thread ``prefetch`` batches ahead; only those rows are ever in memory. The batch of
    step s depends on (seed, s) only."""
    n = min(limit or target.num_items, target.num_items)
    out: queue.Queue = queue.Queue(maxsize=prefetch)
    stop = threading.Event()

    def reader() -> None:
        try:
            with open_store(target.path, KIND) as f:
                for step in range(steps):
                    rng = np.random.default_rng([seed, step])
                    idx = np.sort(rng.choice(n, size=min(batch_size, n), replace=False))
                    batch = {k: f[k][idx] for k in keys}
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

