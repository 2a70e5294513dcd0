"""The target cache's cost and the training loop's wait on it, per probe of params.yaml's learn.probes.

- targets per second: `image_targets` (RandNLA at q = 1 and params' q, block norms, dense targets
  where the probe allows) on the first --images test images, timed in this run;
- HDF5 bytes per image: the size of the finished data/targets/<probe>/<split>.h5 files over their
  rows (the files the `targets` stage wrote), and the uncompressed size beside it;
- reader wait: an importance head trained --steps steps on the train file, batches streamed by
  `taskgeom.stages.targets.stream_batches`; the share of the loop's time spent waiting for a batch (target:
  under 10%), with the background reader and, for comparison, reading each batch in the loop.

Results: results/benchmarks/targets_io.{csv,md}. Run after the pipeline's `targets` stages:

    python benchmarks/targets_io.py [--images 4] [--steps 100]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import torch
from stamp import write_stamped

from taskgeom.data.batches import read_inputs
from taskgeom.data.sources import need
from taskgeom.metric.fit import fit
from taskgeom.metric.head import ImportanceHead, head_loss
from taskgeom.metric.targets import SPLITS, TargetFile, image_targets
from taskgeom.models import preprocess, zoo
from taskgeom.pipeline import config
from taskgeom.probes import probe_map

OUT = Path("results/benchmarks")


def raw_bytes(path: Path) -> int:
    with h5py.File(path, "r") as f:
        sizes: list[int] = []
        f.visititems(lambda n, d: sizes.append(d.size * d.dtype.itemsize) if isinstance(d, h5py.Dataset) else None)
    return sum(sizes)


def targets_rate(params: dict, name: str, images: int) -> dict:
    spec, settings = params["learn"]["probes"][name], params["learn"]["targets"]
    host = zoo.load(Path("data") / spec["host"] / "model.safetensors", Path("data") / spec["host"] / "config.json")
    pm = probe_map(host, spec["decoder"], spec.get("layers"))
    entry = json.loads((Path("data") / spec["host"] / "config.json").read_text())["architecture"]
    index = Path("data/sources") / f"{spec['sources']['test']}.json"
    source, prep = preprocess.open_for_host(index, params["sources"], host, entry, f"learn.probes.{name}.sources.test")
    x = read_inputs(need(source, images, "images"), prep).x
    test = TargetFile.open(Path("data/targets") / name / "test.h5")
    qs = tuple(sorted({1, settings["power_iters"]}))
    start, products = time.perf_counter(), 0
    for i, image in enumerate(x):
        rows = image_targets(pm.at(image), test.r, qs, settings["oversample"], settings["block_norm_probes"], i,
                             test.exact)
        products += int(rows["products"])
    seconds = time.perf_counter() - start
    return {"targets_per_s": len(x) / seconds, "s_per_image": seconds / len(x), "products_per_image": products / len(x),
            "exact_targets": test.exact}


def reader_wait(name: str, steps: int, prefetch: bool) -> float:
    train = TargetFile.open(Path("data/targets") / name / "train.h5")
    key = f"q{max(train.qs)}/importance"
    torch.manual_seed(0)
    head = ImportanceHead(train.tokens, train.dim, 64, 2)
    loss = lambda m, b: head_loss(m(b["features"]), b[key], 0.5)
    if prefetch:
        return fit(head, train, ("features", key), loss, steps, 32, 2e-3, 0, "cpu").wait_fraction
    # the same loop reading each batch itself, for comparison
    waited, t0 = 0.0, time.perf_counter()
    opt = torch.optim.AdamW(head.parameters(), lr=2e-3)
    for step in range(steps):
        t = time.perf_counter()
        idx = np.sort(np.random.default_rng([0, step]).choice(train.num_items, size=32, replace=False))
        b = {k: torch.as_tensor(v).float() for k, v in train.read(("features", key), idx).items()}
        waited += time.perf_counter() - t
        l = loss(head, b)
        opt.zero_grad()
        l.backward()
        opt.step()
    return waited / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--images", type=int, default=4)
    ap.add_argument("--steps", type=int, default=100)
    args = ap.parse_args()
    params = config.load(args.params)
    torch.set_num_threads(2)
    rows = []
    for name in params["learn"]["probes"]:
        files = {s: Path("data/targets") / name / f"{s}.h5" for s in SPLITS}
        if not all(p.is_file() for p in files.values()):
            print(f"{name}: no targets yet (run `snakemake data/targets/{name}/test.h5`), skipped")
            continue
        n = sum(TargetFile.open(p).num_items for p in files.values())
        row = {"probe": name, **targets_rate(params, name, args.images),
               "hdf5_bytes_per_image": sum(p.stat().st_size for p in files.values()) / n,
               "raw_bytes_per_image": sum(raw_bytes(p) for p in files.values()) / n,
               "reader_wait_share_prefetch": reader_wait(name, args.steps, True),
               "reader_wait_share_inline": reader_wait(name, args.steps, False)}
        print(row)
        rows.append(row)
    df = pd.DataFrame(rows)
    header = f"{platform.node()} CPU ×{torch.get_num_threads()} threads"
    write_stamped(OUT, "targets_io", df, f"Target cache cost and reader wait ({header}; {args.images} images timed, "
                  f"{args.steps} head steps).\n\n{df.to_markdown(index=False, floatfmt='.4g')}", float_format="%.6g")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
