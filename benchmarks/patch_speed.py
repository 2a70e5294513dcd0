"""Speed of a model patched by ``taskgeom.patch``: a random-weight timm ViT-B/16 at 224 px
(``vit_base_patch16_224``, nothing downloaded) on CPU, half of its patch tokens merged away after
block 4 by importance (a fit directory of random networks of ``taskgeom fit``'s architecture:
speed does not depend on their weights), against the unpatched model and against ToMe's merging
(the registry's ``tome``) at the same FLOPs (ToMe removes the number of tokens whose FLOPs come
closest to the patched model's, found by bisection with the flop counter) and at the same ratio.

One run: every timing unit (one forward of ``--batch`` images under inference mode) is repeated
``--rounds`` times, round-robin over the models after ``--warmup`` untimed rounds, so drift in the
machine touches each alike. Each ratio is taken per round (paired) and reported as the median with
the min and max over rounds; a ratio is called faster or slower only when its whole min–max range
lies above or below 1, and within the spread otherwise. FLOPs from ``torch.utils.flop_counter``
(``evaluate.cost.count_flops``); the importance head's share is the head's FLOPs on one image's
tokens over the unpatched model's. Targets (``TARGETS``): ≥ 1.3× the unpatched model's
throughput, within 5% of ToMe's at the same FLOPs or better, the head ≤ 3% of the FLOPs.

Results: results/benchmarks/patch_speed.{csv,md}.

    python benchmarks/patch_speed.py [--batch 4] [--rounds 15] [--warmup 2] [--threads 0]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd
import timm
import torch
from stamp import write_stamped
from torch.utils.flop_counter import FlopCounterMode

import taskgeom
from taskgeom.evaluate.cost import count_flops
from taskgeom.fitting import load_fitted
from taskgeom.fitting.checkpoint import write_fit
from taskgeom.fitting.identity import describe
from taskgeom.fitting.train import HEAD, SPN
from taskgeom.metric.head import ImportanceHead
from taskgeom.metric.spn import SpectralPullbackNetwork
from taskgeom.models.vit import Grid
from taskgeom.pipeline.runtime import machine
from taskgeom.prune.select import num_removed

OUT = Path("results/benchmarks")
NAME, LAYER, RATIO, RANK, SIDE = "vit_base_patch16_224", 4, 0.5, 20, 224
TARGETS = {"vs_unpatched": 1.3, "vs_tome_same_flops": 0.95, "head_share": 0.03}


def fit_directory(model: torch.nn.Module, directory: Path) -> Path:
    """A fit of ``model`` at block ``LAYER`` with random networks of ``taskgeom fit``'s architecture."""
    torch.manual_seed(0)
    tokens, dim = 1 + (SIDE // 16) ** 2, model.embed_dim
    head = {"kind": "importance_head", "tokens": tokens, "dim": dim, "width": HEAD["width"], "heads": HEAD["heads"],
            "layers": HEAD["layers"]}
    spn = {"kind": "spn", "tokens": tokens, "dim": dim, "rank": RANK, "width": SPN["width"], "depth": SPN["depth"],
           "heads": SPN["heads"]}
    nets = {"head": (ImportanceHead(**{k: v for k, v in head.items() if k != "kind"}), head),
            "spn": (SpectralPullbackNetwork(**{k: v for k, v in spn.items() if k != "kind"}), spn)}
    record = {"layer": LAYER, "decoder": "logits", "path": "merge", "model": describe(model), "quality": {},
              "layout": {"prefix": 1, "rows": SIDE // 16, "cols": SIDE // 16, "tokens": tokens, "dim": dim}}
    write_fit(directory, record, nets, {"benchmark": "patch_speed", "weights": "random"})
    return directory


def flops_of(model: torch.nn.Module, x: torch.Tensor) -> int:
    """FLOPs of one image's forward, after one forward that fills what the patch computes once per fit."""
    with torch.inference_mode():
        model(x[:1])
    return count_flops(lambda: model(x[:1]), model)


def tome_at_flops(model: torch.nn.Module, fit: Path, x: torch.Tensor, target: int) -> tuple[int, int]:
    """(tokens ToMe removes, its FLOPs): the count whose FLOPs come closest to ``target`` (they fall as it grows)."""
    patches = (SIDE // 16) ** 2
    low, high, best = 0, patches // 2, None
    while low <= high:
        k = (low + high) // 2
        taskgeom.patch(model, fit, k / patches, "tome")
        flops = flops_of(model, x)
        if best is None or abs(flops - target) < abs(best[1] - target):
            best = (k, flops)
        low, high = (k + 1, high) if flops > target else (low, k - 1)
    taskgeom.unpatch(model)
    return best


def head_flops(fit: Path, model: torch.nn.Module, x: torch.Tensor) -> int:
    """FLOPs of the importance head scoring one image's tokens at the fit's block."""
    fitted = load_fitted(fit)
    seen = {}
    hook = model.blocks[LAYER].register_forward_hook(lambda m, a, out: seen.__setitem__("h", out))
    with torch.no_grad():
        model(x[:1])
    hook.remove()
    h = seen["h"]
    idx = torch.arange(h.shape[1]).expand(1, -1)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        fitted.metric.importance(h, idx, Grid(1, SIDE // 16, SIDE // 16))
    return int(counter.get_total_flops())


def timed(models: dict[str, torch.nn.Module], x: torch.Tensor, rounds: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per forward of each model, round-robin, warm-up rounds left out."""
    seconds: dict[str, list[float]] = {name: [] for name in models}
    with torch.inference_mode():
        for i in range(warmup + rounds):
            for name, model in models.items():
                start = time.perf_counter()
                model(x)
                if i >= warmup:
                    seconds[name].append(time.perf_counter() - start)
    return seconds


def paired(numerator: list[float], denominator: list[float]) -> dict[str, float | str]:
    """Per-round ratios numerator/denominator of seconds (> 1: the second is faster): median, min, max, call."""
    ratios = [a / b for a, b in zip(numerator, denominator)]
    low, high = min(ratios), max(ratios)
    call = "faster" if low > 1 else "slower" if high < 1 else "within the spread"
    return {"median": statistics.median(ratios), "min": low, "max": high, "call": call}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    torch.manual_seed(0)
    base = timm.create_model(NAME, pretrained=False).eval()
    x = torch.randn(args.batch, 3, SIDE, SIDE)
    with tempfile.TemporaryDirectory() as tmp:
        fit = fit_directory(base, Path(tmp) / "fit")
        importance = taskgeom.patch(copy.deepcopy(base), fit, RATIO, "importance")
        flops = {"unpatched": flops_of(base, x), "importance": flops_of(importance, x)}
        k_same, flops["tome (same FLOPs)"] = tome_at_flops(base, fit, x, flops["importance"])
        patches = (SIDE // 16) ** 2
        tome_same = taskgeom.patch(copy.deepcopy(base), fit, k_same / patches, "tome")
        tome_ratio = taskgeom.patch(copy.deepcopy(base), fit, RATIO, "tome")
        flops["tome (same ratio)"] = flops_of(tome_ratio, x)
        head = head_flops(fit, base, x)
    models = {"unpatched": base, "importance": importance, "tome (same FLOPs)": tome_same,
              "tome (same ratio)": tome_ratio}
    seconds = timed(models, x, args.rounds, args.warmup)
    report(args, seconds, flops, head, k_same, time.perf_counter() - started)


def met(ok: bool) -> str:
    return "met" if ok else "not met"


def report(args, seconds: dict[str, list[float]], flops: dict[str, int], head: int, k_same: int,
           elapsed: float) -> None:
    """Print the ratios and write results/benchmarks/patch_speed.{csv,md}."""
    patches = (SIDE // 16) ** 2
    removed = num_removed(patches, RATIO)
    tokens = {"unpatched": 1 + patches, "importance": 1 + patches - removed, "tome (same FLOPs)": 1 + patches - k_same,
              "tome (same ratio)": 1 + patches - removed}
    rows = []
    for name, s in seconds.items():
        vs_base, vs_imp = paired(seconds["unpatched"], s), paired(s, seconds["importance"])
        rows.append({"model": name, "tokens_after_block_4": tokens[name], "gflops_per_image": flops[name] / 1e9,
                     "flops_vs_unpatched": flops[name] / flops["unpatched"],
                     "images_per_s": args.batch / statistics.median(s), "images_per_s_min": args.batch / max(s),
                     "images_per_s_max": args.batch / min(s), "speedup_vs_unpatched": vs_base["median"],
                     "speedup_min": vs_base["min"], "speedup_max": vs_base["max"], "call_vs_unpatched": vs_base["call"],
                     "importance_speed_over_this": vs_imp["median"], "importance_over_min": vs_imp["min"],
                     "importance_over_max": vs_imp["max"], "call_importance_vs_this": vs_imp["call"]})
    df = pd.DataFrame(rows)
    vs_base = paired(seconds["unpatched"], seconds["importance"])
    vs_tome = paired(seconds["tome (same FLOPs)"], seconds["importance"])
    share = head / flops["unpatched"]
    lines = [
        f"importance (η {RATIO} after block {LAYER}) over unpatched: {vs_base['median']:.3f}× "
        f"[{vs_base['min']:.3f}, {vs_base['max']:.3f}] over {args.rounds} rounds: {vs_base['call']}",
        f"importance over ToMe at the same FLOPs ({k_same} tokens removed): {vs_tome['median']:.3f}× "
        f"[{vs_tome['min']:.3f}, {vs_tome['max']:.3f}]: {vs_tome['call']}",
        f"importance head: {100 * share:.3f}% of the unpatched model's FLOPs; the patched model: "
        f"{flops['importance'] / flops['unpatched']:.3f} of them, ToMe at the same ratio "
        f"{flops['tome (same ratio)'] / flops['unpatched']:.3f}",
        "targets: " + "; ".join([
            f"≥ {TARGETS['vs_unpatched']}× unpatched (median): {met(vs_base['median'] >= TARGETS['vs_unpatched'])}",
            f"within 5% of ToMe at the same FLOPs (median ≥ {TARGETS['vs_tome_same_flops']}): "
            f"{met(vs_tome['median'] >= TARGETS['vs_tome_same_flops'])}",
            f"head ≤ {100 * TARGETS['head_share']:.0f}% of FLOPs: {met(share <= TARGETS['head_share'])}"]),
    ]
    header = (f"taskgeom.patch on {NAME} (random weights) at {SIDE} px, batch {args.batch}, {torch.get_num_threads()} "
              f"thread(s), {args.rounds} timed rounds round-robin after {args.warmup} warm-up rounds, on "
              f"{machine('cpu')}; one run of {elapsed:.0f} s. Ratios are per round (paired), median [min, max]; "
              "a ratio is called only when its whole range is on one side of 1.\n\n")
    write_stamped(OUT, "patch_speed", df, header + "\n".join(f"- {line}" for line in lines) + "\n\n"
                  + df.to_markdown(index=False, floatfmt=".4g"), float_format="%.6g")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
