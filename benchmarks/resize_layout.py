"""What resizing channels-last maps in their own layout saves (``taskgeom.models.resize``).

The DPT heads' maps are channels-last views of token sequences. Resized as (…, H, W) matrices
they came back channels-first, and the convolutions after them ran in that layout or converted.
Each workload below is timed both ways in one process, round-robin (so drift in the machine's
speed affects both alike): "channels-first" forces the old (…, H, W) products, "kept" is the
package as it is. Workloads, on the default profile's zoo architectures with seeded weights
(speed does not depend on the weights): one training step of tiny-trunk and of tiny-mv (the zoo
stage's loss, backward, clip and AdamW step, at the profile's batch sizes), a no-grad forward of
tiny-trunk's depth at the prune stages' batch size and each prune resolution, and one ``diagnose``
of the dpt-depth-l4 probe (vmapped JVPs and VJPs). Reported per workload: the median seconds of
each, the spread (min–max over the repeats), the ratio of medians, and the largest difference of
the outputs relative to their largest magnitude (the two layouts round differently).

Results: results/benchmarks/resize_layout.{csv,md}.

    python benchmarks/resize_layout.py [--repeats 5] [--threads 1] [--profile default]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

import pandas as pd
import torch
from stamp import write_stamped

from taskgeom.diagnostics import diagnose
from taskgeom.models import resize, zoo
from taskgeom.models.host import run_decoder
from taskgeom.models.train import TASKS
from taskgeom.pipeline import config
from taskgeom.pipeline.runtime import machine
from taskgeom.probes import ProbeMap

OUT = Path("results/benchmarks")
LAYOUTS = ("channels-first", "kept")


def in_layout(layout: str):
    """A context in which resize_bilinear keeps channels-last maps (``kept``) or not."""
    return mock.patch.object(resize, "_channels_last", lambda x: False) if layout == "channels-first" else nullcontext()


def seeded(params: dict, name: str) -> torch.nn.Module:
    return zoo.seeded(0, zoo.architecture(params["zoo"][name], params["world"]["resolution"]))


def train_step(params: dict, name: str) -> Callable[[], torch.Tensor]:
    """One zoo-stage step of model ``name`` on a fixed random batch (fresh weights per layout)."""
    cfg, res = params["zoo"][name], params["world"]["resolution"]
    g = torch.Generator().manual_seed(0)
    n, views = cfg["batch_size"], params["world"]["multiview"]["views"]
    mv = cfg["kind"] == "multiview"
    shape = (n, views) if mv else (n,)
    b = {"rgb": torch.randint(0, 256, (*shape, res, res, 3), dtype=torch.uint8, generator=g),
         "depth": 1 + 9 * torch.rand(*shape, res, res, generator=g),
         "label": torch.randint(0, zoo.NUM_CLASSES, (n,), generator=g), "max_depth": 100.0}
    if mv:
        b |= {"pose": torch.randn(n, views, 9, generator=g), "points": torch.randn(n, views, 3, res, res, generator=g)}
    model = seeded(params, name).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> torch.Tensor:
        loss = TASKS[cfg["kind"]].loss(model, b)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()
    return step


def forward(params: dict, res: int, batch: int) -> Callable[[], torch.Tensor]:
    x = torch.randn(batch, 3, res, res, generator=torch.Generator().manual_seed(0))
    model = seeded(params, "tiny-trunk").eval()
    return lambda: torch.no_grad()(run_decoder)(model, "depth", x)


def diagnose_once(params: dict, probe: str) -> Callable[[], torch.Tensor]:
    spec = params["diagnose"]["probes"][probe]
    res = params["world"]["resolution"]
    p = ProbeMap(seeded(params, spec["model"]), spec["decoder"], spec["layers"]).at(
        torch.randn(3, res, res, generator=torch.Generator().manual_seed(0)))
    return lambda: torch.as_tensor(diagnose(p.f, p.F, seed=0).sigma)


def workloads(params: dict) -> dict[str, Callable[[], Callable[[], torch.Tensor]]]:
    """name -> a builder of the workload (built once per layout, so training steps start alike)."""
    batch = params["prune"]["batch_size"]
    out = {f"train step {m}": (lambda m=m: train_step(params, m)) for m in ("tiny-trunk", "tiny-mv")}
    out |= {f"depth forward tiny-trunk {r}px ×{batch}": (lambda r=r: forward(params, r, batch))
            for r in params["prune"]["resolutions"]}
    out["diagnose dpt-depth-l4"] = lambda: diagnose_once(params, "dpt-depth-l4")
    return out


def measure(name: str, build: Callable[[], Callable[[], torch.Tensor]], repeats: int) -> dict:
    fns, first = {}, {}
    for layout in LAYOUTS:
        with in_layout(layout):
            fns[layout] = build()
            first[layout] = fns[layout]()  # warm-up, and the output compared below
    times: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    for _ in range(repeats):
        for layout in LAYOUTS:
            with in_layout(layout):
                start = time.perf_counter()
                fns[layout]()
                times[layout].append(time.perf_counter() - start)
    a, b = (first[layout].double() for layout in LAYOUTS)
    row = {"workload": name}
    for layout in LAYOUTS:
        row |= {f"{layout}_s": statistics.median(times[layout]),
                f"{layout}_min_s": min(times[layout]), f"{layout}_max_s": max(times[layout])}
    row["speedup"] = row["channels-first_s"] / row["kept_s"]
    row["output_rel_diff"] = float((a - b).abs().max() / a.abs().max())
    print(f"{name}: channels-first {row['channels-first_s']:.4f} s, kept {row['kept_s']:.4f} s, "
          f"×{row['speedup']:.2f}, outputs differ by {row['output_rel_diff']:.1e}", flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a pipeline job's default is 1)")
    ap.add_argument("--profile", default="default", help="params profile whose zoo and prune settings are used")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    params = config.load(Path("params") / f"{args.profile}.yaml")
    rows = [measure(name, build, args.repeats) for name, build in workloads(params).items()]
    df = pd.DataFrame(rows)
    head = (f"# Resizing channels-last maps in their own layout\n\n{machine('cpu')}, {args.threads} thread(s), "
            f"{args.repeats} repeats round-robin, profile {args.profile}.\n\n"
            "Seconds are medians; min and max over the repeats give the spread. output_rel_diff: the largest "
            "difference of the two layouts' outputs (loss, depth, σ) over the largest magnitude.\n\n")
    write_stamped(OUT, "resize_layout", df, head + df.to_markdown(index=False, floatfmt=".4g"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
