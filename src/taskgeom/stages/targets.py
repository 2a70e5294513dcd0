"""The ``targets`` stage: one probe's Jacobian targets (``taskgeom.metric.targets``) for its
train / val / test images, cached in resumable HDF5 files.

Image counts come from ``learn.targets.images``, overridden per probe by its own ``images``.
A killed run resumes at its last flushed block and publishes the same bytes as an uninterrupted
one, since every image's seed is a function of its split and index only.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from taskgeom.data.hdf5 import ResumableH5
from taskgeom.data.splits import read_world, to_input
from taskgeom.metric.targets import KIND, SPLIT_SEED_OFFSET, SPLITS, image_targets
from taskgeom.models import zoo
from taskgeom.pipeline.runtime import StageContext
from taskgeom.probes import probe_map


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
