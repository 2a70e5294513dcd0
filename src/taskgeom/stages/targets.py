"""The ``targets`` stage: one probe's Jacobian targets (``taskgeom.metric.targets``) for its
train / val / test images, cached in resumable HDF5 files.

Each split's images are the first items of the source the probe names for it
(``learn.probes.<probe>.sources``), through the host's preprocessing, streamed block by block;
the counts come from ``learn.targets.images``, overridden per probe by its own ``images``.
The files record the source and the preprocessing.
A killed run resumes at its first unpublished split, at that split's last flushed block, and
publishes the same bytes as an uninterrupted one, since every image's seed is a function of its
split and index only.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import Tensor

from taskgeom.data.batches import read_inputs
from taskgeom.data.hdf5 import ResumableH5, forget_published
from taskgeom.data.sources import Source, need
from taskgeom.metric.targets import KIND, SPLIT_SEED_OFFSET, SPLITS, image_targets
from taskgeom.models import preprocess, zoo
from taskgeom.pipeline.runtime import StageContext
from taskgeom.probes import probe_map


class SourceImages:
    """A source's items through a host's preprocessing, read by slices: ``images[a:b]`` (b − a, ...)."""

    def __init__(self, source: Source, prep: preprocess.Preprocess) -> None:
        self.source, self.prep = source, prep

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, part: slice) -> Tensor:
        return read_inputs(self.source.window(part.start, part.stop), self.prep, batch_size=64).x

    def describe(self) -> dict:
        return {"source": self.source.describe(), "preprocess": self.prep.describe()}


def split_images(ctx: StageContext, host, entry: dict, counts: dict[str, int]) -> dict[str, SourceImages]:
    """Each split's first ``counts[split]`` items of its source (``sources.<split>``), preprocessed on reading."""
    out = {}
    for split in SPLITS:
        what = f"learn.probes.{ctx.wildcard}.sources.{split}"
        source, prep = preprocess.open_for_host(ctx.inputs[f"source_{split}"], ctx.params["sources"], host, entry, what)
        out[split] = SourceImages(need(source, counts[split], f"learn.targets.images.{split}"), prep)
    return out


def build_split(ctx: StageContext, name: str, split: str, pm, images: SourceImages | Tensor, settings: dict, r: int,
                exact: bool) -> None:
    """Targets of every image, resumably, block by block (``images`` sliced per block: a
    ``SourceImages`` reads only that block); the file records what ``images.describe()`` says."""
    qs = tuple(sorted({1, settings["power_iters"]}))
    seed0 = settings["seed"] + SPLIT_SEED_OFFSET[split]
    block = settings["block"]
    targets = lambda x, i: image_targets(pm.at(x.to(ctx.device)), r, qs, settings["oversample"],
                                         settings["block_norm_probes"], seed0 + i, exact)
    first = targets(images[0:1][0], 0)
    layout = {k: (np.shape(v), np.asarray(v).dtype.str) for k, v in first.items()}
    attrs = {"probe": name, "split": split, "r": r, "power_iters": list(qs), "exact": exact, "seed": seed0,
             "settings": settings, "provenance": ctx.provenance(), **getattr(images, "describe", dict)()}
    store = ResumableH5(ctx.outputs[split], layout, len(images), attrs, KIND, log=ctx.log)
    try:
        if store.done and not store.restored:
            ctx.log.info("%s/%s: resuming at image %d of %d", name, split, store.done, len(images))
        for start in ctx.progress(range(store.done, len(images), block), desc=f"targets {name}/{split}"):
            x = images[start:min(start + block, len(images))]
            rows = [first if start + j == 0 else targets(xi, start + j) for j, xi in enumerate(x)]
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
    entry = zoo.entry(ctx.inputs["config"])
    images = split_images(ctx, host, entry, {**settings["images"], **spec.get("images", {})})
    probe0 = pm.at(images["test"][0:1][0].to(ctx.device))
    N, D = probe0.F.shape
    M = int(probe0.f(probe0.F).numel())
    r = min(spec.get("r", ctx.params["learn"]["r"]), M, N * D)
    exact = min(M, N * D) <= settings["exact"]["max_dim"]
    ctx.log.info("targets %s: N=%d D=%d M=%d r=%d, exact targets: %s", name, N, D, M, r, "yes" if exact else "no")
    for split in SPLITS:
        t0 = time.perf_counter()
        build_split(ctx, name, split, pm, images[split], settings, r, exact)
        ctx.log.info("%s/%s: %d images in %.1f s", name, split, len(images[split]), time.perf_counter() - t0)
    forget_published(ctx.outputs[split] for split in SPLITS)
