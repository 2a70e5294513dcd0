"""Wall-clock speed of hard prune + Last-Layer Fusion with the importance head, against the
unpruned model and against ToMe merging at the same blocks and ratio (paper §7.3, App. D).

Models: a ViT-B/16 trunk (random weights, plain patchify) with a DPT depth head reading blocks
2, 5, 8, 11, at 224 and 448 px, and the zoo's tiny-dpt (data/zoo/tiny-dpt, if the pipeline has
trained it) at its resolutions. Importance scores come from an importance head of the paper's
size (random weights: speed does not depend on them). Every configuration is timed round-robin
in one run (median of --repeats), so the printed ratios compare like with like; FLOPs from
torch.utils.flop_counter. Targets: ≥ 1.0× the unpruned model at the base resolution at η = 0.2,
and at least ToMe's speed at η = 0.5 at 448.

Results: results/benchmarks/prune_speed.{csv,md}.

    python benchmarks/prune_speed.py [--repeats 7] [--batch 1] [--device cpu]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch
from stamp import write_stamped

from taskgeom.evaluate.cost import count_flops, interleaved_wall_clock
from taskgeom.metric.head import ImportanceHead
from taskgeom.models import zoo
from taskgeom.models.dpt import TinyDPT
from taskgeom.models.host import freeze, param_count, run_decoder
from taskgeom.models.vit import Grid
from taskgeom.pipeline.runtime import machine
from taskgeom.prune.llf import pruned_forward
from taskgeom.prune.scores import LearnedMetric

OUT = Path("results/benchmarks")
RATIOS = (0.2, 0.5)
METHODS = ("importance", "tome", "random")


def vit_b16_dpt() -> TinyDPT:
    torch.manual_seed(0)
    return freeze(TinyDPT(768, 12, 12, 16, 224, read_layers=(2, 5, 8, 11), head_features=128, conv_stem=False))


def models(device: str) -> list[tuple[str, torch.nn.Module, Grid, list[int], dict[str, list[int]]]]:
    """(name, host, base grid, resolutions, schedules)."""
    out = [("vit-b16-dpt (random)", vit_b16_dpt(), Grid(1, 14, 14), [224, 448], {"1-stage": [3], "2-stage": [3, 7]})]
    if Path("data/zoo/tiny-dpt/model.safetensors").is_file():
        host = freeze(zoo.load_named("tiny-dpt"))
        out.append(("tiny-dpt (zoo)", host, Grid(1, 8, 8), [64, 128], {"1-stage": [1], "2-stage": [1, 3]}))
    return [(n, h.to(device), g, r, s) for n, h, g, r, s in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    rows = []
    for name, host, grid, resolutions, schedules in models(args.device):
        dim = host.vit.embed_dim
        torch.manual_seed(0)
        head = ImportanceHead(grid.prefix + grid.rows * grid.cols, dim, width=128, heads=2).to(args.device).eval()
        learned = LearnedMetric(head, grid)
        for res in resolutions:
            x = torch.randn(args.batch, 3, res, res, device=args.device)
            base_flops = count_flops(lambda: run_decoder(host, "depth", x[:1]), host)
            for label, schedule in schedules.items():
                for ratio in RATIOS:
                    fns = {"unpruned": lambda: run_decoder(host, "depth", x)}
                    for m in METHODS:
                        fns[m] = lambda m=m: pruned_forward(host, "depth", x, schedule, m, ratio, True, learned,
                                                            torch.Generator().manual_seed(0))
                    times = interleaved_wall_clock(fns, args.repeats, warmup=2)
                    for m in METHODS:
                        flops = count_flops(lambda m=m: pruned_forward(host, "depth", x[:1], schedule, m, ratio, True,
                                                                       learned, torch.Generator().manual_seed(0)), host)
                        rows.append({"model": name, "resolution": res, "schedule": label, "ratio": ratio, "method": m,
                                     "flops_saved": 1 - flops / base_flops, "ms_per_batch": 1e3 * times[m],
                                     "ms_unpruned": 1e3 * times["unpruned"],
                                     "speedup_vs_unpruned": times["unpruned"] / times[m],
                                     "speedup_vs_tome": times["tome"] / times[m]})
                    print(f"{name} @{res} {label} η={ratio}: " + ", ".join(
                        f"{m} {times['unpruned'] / times[m]:.2f}×" for m in METHODS), flush=True)
        print(f"{name}: importance head {param_count(head):,} parameters", flush=True)
    df = pd.DataFrame(rows)
    header = (f"Hard prune + LLF speed, batch {args.batch}, median of {args.repeats} round-robin runs on "
              f"{machine(args.device)}. speedup > 1: faster than the reference.\n\n")
    write_stamped(OUT, "prune_speed", df, header + df.to_markdown(index=False, floatfmt=".3g"), float_format="%.4g")
    print(df.to_markdown(index=False, floatfmt=".3g"))


if __name__ == "__main__":
    main()
