"""Cost of one `diagnose` per image, in forward-equivalents, on every probe of params.yaml.

For each probe (the trained zoo checkpoint when `data/zoo/<model>` exists, else the same
architecture with seeded random weights) and each of the first --images test images (or random
inputs when the world has not been rendered):

- forward, the unit: one forward of f at F, timed in batches interleaved with the diagnose runs
  (``cost_unit.py``); its median, min and max (forward_ms*);
- diagnose, the total: --repeats runs of `diagnose(f, F)` at the defaults (r=20, num_probes=100,
  q=2), the run of median time kept (diagnose_s*: its seconds, and the runs' min and max); its
  products, and diagnose_s / forward_ms = forward-equivalents, split into the time in JVP and VJP
  blocks (forward-equivalents per product) and the rest; and min_budget_forward_equivalents, the
  cost of the smallest budget that runs the stochastic stage (the sketch, one SLQ round and the
  trace-only starts, 168 products at the defaults) at the image's per-product rate, a floor for
  any stopping rule. A row whose forwards or runs spread too much (``cost_unit.stability``) gives
  no ratio: empty in the CSV, its reason in the Markdown;
- dense: time of `diagnose_exact` (jacrev + SVD) where min(M, N·D) ≤ --dense-max, the speedup
  dense / diagnose, and the errors of the matrix-free values against it.

--paper-scale adds DINOv2 ViT-B/14 with random weights at 224×224 (257 tokens × 768), CLS probe
at block 10, with the process's peak resident memory. --plain-vit adds a user's model as it
comes: a random 6-block, 192-wide timm ViT (timm's defaults, fused attention on) with a
16-channel linear dense head, probed by a plain closure and called as the README does, once with
its parameters requiring grad (as built) and once frozen, with the ratio of the two costs (when
both rows are stable) and whether any returned tensor requires grad. --inspect times `taskgeom
inspect`'s library path per image (files read and decoded, timm's transform, `inspect_model` at
a middle and a late block) against `ProbeMap.at` + `diagnose` alone on the same preprocessed
images, layers and seeds, on a random reduced DINOv2-with-registers, alternating which runs
first, --repeats times; its outputs (JSON and figure), written once per run, are timed apart.
Results in --out (results/benchmarks): diagnose_cost.{csv,md}, diagnose_paper_scale.{csv,md},
diagnose_plain_vit.{csv,md}, diagnose_inspect.{csv,md}. All ratios come from timings taken in
this one run.

    python benchmarks/diagnose_cost.py [--images 3] [--repeats 3] [--paper-scale] [--plain-vit] [--inspect]
                                       [--no-probes | --only-plain-vit] [--device cpu] [--out DIR]
--no-probes: the --paper-scale and --plain-vit cases alone (no params.yaml probe, no finished run needed).
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import platform
import resource
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pandas as pd
import torch
from cost_unit import STABLE, described, group_stability, shown, stability, unit_batch
from stamp import write_stamped

from taskgeom import diagnostics
from taskgeom.diagnostics import diagnose, diagnose_exact
from taskgeom.linalg.operator import JacobianOperator
from taskgeom.models import zoo
from taskgeom.pipeline import config
from taskgeom.probes import Probe, ProbeMap
from taskgeom.stages.diagnose import accuracy, probe_images

RATIOS = ("forward_equivalents", "jvp_forward_equivalents", "vjp_forward_equivalents", "other_forward_equivalents",
          "min_budget_forward_equivalents", "forward_equivalents_max", "cost_over_frozen")


def host_for(params: dict, model: str, device: str):
    root = Path("data/zoo") / model
    if (root / "model.safetensors").is_file():
        return zoo.load(root / "model.safetensors", root / "config.json", device), "trained"
    arch = zoo.architecture(params["zoo"][model], params["world"]["resolution"])
    return zoo.seeded(0, arch).to(device), "random"


def inputs_for(host, params: dict, count: int, probe: str):
    """The first ``count`` items of diagnose probe ``probe``'s source through the host's
    preprocessing, as its stage reads them, once `taskgeom sources` has written the source;
    else seeded random inputs of the world's shape."""
    spec = params["diagnose"]["probes"][probe]
    source = Path("data/sources") / f"{spec['source']}.json"
    if source.is_file():
        root = Path("data/zoo") / spec["model"]
        entry = (zoo.entry(root / "config.json") if (root / "config.json").is_file()
                 else zoo.architecture(params["zoo"][spec["model"]], params["world"]["resolution"]))
        ctx = SimpleNamespace(inputs={"source": source}, params=params, wildcard=probe)
        return probe_images(ctx, entry, host, count)[0]
    res, views = params["world"]["resolution"], params["world"]["multiview"]["views"]
    shape = (count, views, 3, res, res) if "camera" in host.decoders else (count, 3, res, res)
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def sync_for(device: str):
    """What waits for queued kernels before a clock is read (CUDA runs asynchronously)."""
    return torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)


def forward_times(probe: Probe, count: int, sync=lambda: None) -> list[float]:
    """Wall times of ``count`` forwards of f at F (the unit of the cost), after one untimed."""
    times = []
    with torch.no_grad():
        probe.f(probe.F)
        sync()
        for _ in range(count):
            start = time.perf_counter()
            probe.f(probe.F)
            sync()
            times.append(time.perf_counter() - start)
    return times


def timed(fn, sync=lambda: None):
    start = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - start


_DEFAULTS = inspect.signature(diagnose).parameters
ONE_SLQ_ROUND = 2 * _DEFAULTS["lanczos_steps"].default * _DEFAULTS["probes_per_round"].default  # products
TRACE_ONLY = _DEFAULTS["trace_probes"].default


def timed_diagnose(probe: Probe, seed: int, sync=lambda: None, repeats: int = 3):
    """``diagnose(probe.f, probe.F, seed=seed)`` timed ``repeats`` times, with the seconds spent
    inside its JVP and VJP blocks (its operator is swapped for one that clocks them), and the
    unit's forwards timed in batches before every run and after the last, at least
    ``cost_unit.MIN_UNIT_SAMPLES`` in all: a machine whose speed drifts then drifts under both alike.
    Returns the run of median time (d, seconds, spent), every run's seconds, and every forward's."""
    per_batch = unit_batch(repeats)
    runs, forwards = [], forward_times(probe, per_batch, sync)
    for _ in range(repeats):
        spent = {"jvp": 0.0, "vjp": 0.0}

        def clocked(kind: str, product, X, spent=spent):
            start = time.perf_counter()
            out = product(X)
            sync()
            spent[kind] += time.perf_counter() - start
            return out

        class ClockedOperator(JacobianOperator):
            def matvec(self, V):
                return clocked("jvp", super().matvec, V)

            def rmatvec(self, U):
                return clocked("vjp", super().rmatvec, U)

        with mock.patch.object(diagnostics, "JacobianOperator", ClockedOperator):
            d, seconds = timed(lambda: diagnose(probe.f, probe.F, seed=seed), sync)
        runs.append((seconds, d, spent))
        forwards += forward_times(probe, per_batch, sync)
    seconds, d, spent = sorted(runs, key=lambda run: run[0])[len(runs) // 2]
    return d, seconds, spent, [run[0] for run in runs], forwards


def cost_columns(d, seconds: float, spent: dict, runs: list[float], forwards: list[float]) -> dict:
    """The unit (forward_ms: median, min, max of ``forwards``), the total (diagnose_s: the kept run's
    ``seconds``, min and max of ``runs``), the row's ``stability``, and in forward-equivalents the
    total, per product, outside the products, and at the smallest budget that runs the stochastic
    stage (see the module docstring): NaN where the row is unstable."""
    fwd, state = float(np.median(forwards)), stability(forwards, runs)
    per_product = (spent["jvp"] + spent["vjp"]) / fwd / max(d.products, 1)
    min_products = d.budget.get("sketch", 0) + ONE_SLQ_ROUND + TRACE_ONLY if d.budget.get("slq", 0) else d.products
    ratios = {"forward_equivalents": seconds / fwd,
              "jvp_forward_equivalents": spent["jvp"] / fwd / max(d.jvps, 1),
              "vjp_forward_equivalents": spent["vjp"] / fwd / max(d.vjps, 1),
              "other_forward_equivalents": (seconds - spent["jvp"] - spent["vjp"]) / fwd,
              "min_budget_forward_equivalents": min_products * per_product}
    return {"forward_ms": 1e3 * fwd, "forward_ms_min": 1e3 * min(forwards), "forward_ms_max": 1e3 * max(forwards),
            "diagnose_s": seconds, "diagnose_s_min": min(runs), "diagnose_s_max": max(runs), "stability": state,
            "min_budget_products": min_products,
            **{k: v if state == STABLE else math.nan for k, v in ratios.items()}}


def measure(name: str, pm: ProbeMap, images, dense_max: int, device: str, weights: str,
            repeats: int) -> list[dict]:
    rows = []
    for i, image in enumerate(images):
        probe = pm.at(image.to(device))
        sync = sync_for(device)
        d, seconds, spent, runs, forwards = timed_diagnose(probe, i, sync, repeats)
        N, D = probe.F.shape
        M = int(probe.f(probe.F).numel())
        row = {"probe": name, "weights": weights, "image": i, "N": N, "D": D, "M": M,
               **cost_columns(d, seconds, spent, runs, forwards), "products": d.products,
               "sketch_products": d.budget.get("sketch", 0), "slq_products": d.budget.get("slq", 0),
               "kappa_cap": d.kappa_cap, "erank": d.erank, "r90": d.r90, "cv": d.cv}
        if min(M, N * D) <= dense_max:
            e, dense_s = timed(lambda: diagnose_exact(probe.f, probe.F), sync)
            row |= {"dense_s": dense_s, "speedup_vs_dense": dense_s / seconds, **accuracy(d, e)}
        rows.append(row)
        dense = f", dense {row['speedup_vs_dense']:.1f}× slower, Δκ {row['kappa_abs']:.4f}" if "dense_s" in row else ""
        print(f"{name} image {i}: {row['forward_equivalents']:.0f} forward-equivalents ({row['stability']}), "
              f"{d.products} products{dense}", flush=True)
    return rows


def paper_scale(device: str, repeats: int) -> dict:
    from taskgeom.models.adapters import build_paper_model

    image = torch.randn(3, 224, 224, generator=torch.Generator().manual_seed(0)).to(device)
    probe = ProbeMap(build_paper_model("dinov2-b14").to(device), "cls", [10]).at(image)
    d, seconds, spent, runs, forwards = timed_diagnose(probe, 0, sync_for(device), repeats)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB (Linux)
    row = {"probe": "dinov2-b14 (random weights) cls @ block 10, 224 px", "N": probe.F.shape[0],
           "D": probe.F.shape[1], "M": int(probe.f(probe.F).numel()),
           **cost_columns(d, seconds, spent, runs, forwards), "products": d.products,
           "kappa_cap": d.kappa_cap, "erank": d.erank, "cv": d.cv, "peak_rss_gib": peak}
    if device.startswith("cuda"):
        row["peak_cuda_gib"] = torch.cuda.max_memory_allocated() / 2**30
    print(json.dumps(row, default=float), flush=True)
    return row


def plain_vit_probe(frozen: bool, device: str) -> Probe:
    """Block-2 features (N, D) -> the dense head's per-token output (P·16,), closing over the model."""
    import timm

    torch.manual_seed(0)
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, patch_size=8, depth=6,
                            num_classes=0).eval().to(device)
    head = torch.nn.Linear(vit.embed_dim, 16).to(device)
    if frozen:
        vit.requires_grad_(False)
        head.requires_grad_(False)
    image = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0)).to(device)
    with torch.no_grad():
        F = vit.blocks[:2](vit._pos_embed(vit.patch_embed(image)))[0]

    def f(F):
        y = F.unsqueeze(0)
        for block in vit.blocks[2:]:
            y = block(y)
        return head(vit.norm(y)[0, vit.num_prefix_tokens:]).flatten()

    return Probe(F=F, f=f, layers=(1,), tokens_per_layer=F.shape[0])


def plain_vit(device: str, repeats: int) -> list[dict]:
    rows = []
    for case, frozen in (("as built (requires grad)", False), ("frozen", True)):
        probe = plain_vit_probe(frozen, device)
        d, seconds, spent, runs, forwards = timed_diagnose(probe, 0, sync_for(device), repeats)
        grads = any(v.requires_grad for v in vars(d).values() if isinstance(v, torch.Tensor))
        rows.append({"case": case, "N": probe.F.shape[0], "D": probe.F.shape[1], "M": int(probe.f(probe.F).numel()),
                     **cost_columns(d, seconds, spent, runs, forwards), "products": d.products,
                     "kappa_cap": d.kappa_cap, "erank": d.erank, "returns_tensors_requiring_grad": grads})
    stable = all(row["stability"] == STABLE for row in rows)
    rows[0]["cost_over_frozen"] = rows[0]["diagnose_s"] / rows[1]["diagnose_s"] if stable else math.nan
    print(shown(pd.DataFrame(rows), RATIOS).to_markdown(index=False, floatfmt=".3g"), flush=True)
    return rows


INSPECT_LAYERS = (2, 4)  # inspect's default for a 6-block model (inspection.hosts.default_layers)


def clocked_run(fn) -> tuple[float, float]:
    """(wall, process CPU) seconds of fn(); CPU time moves less than wall time on a shared machine."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def inspect_case(count: int, repeats: int) -> list[dict]:
    """Seconds per image of inspect (files to aggregates) and of diagnose alone on the same probe
    maps, alternating which runs first; then inspect's outputs (JSON and figure, once per run)."""
    import tempfile

    from PIL import Image

    from taskgeom.inspection import output
    from taskgeom.inspection.hosts import as_host
    from taskgeom.inspection.inputs import image_files, read_rgb, timm_transform
    from taskgeom.inspection.run import inspect_model
    from taskgeom.models.adapters.timm_any import build_timm

    torch.manual_seed(0)
    torch.set_num_threads(1)  # one thread: CPU time then measures the work, not spinning threads
    model = build_timm("vit_small_patch14_reg4_dinov2", img_size=56, depth=6, num_classes=0)
    host, (transform, _) = as_host(model), timm_transform(model, 56)
    rng, rows = np.random.default_rng(0), []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(count):
            Image.fromarray(rng.integers(0, 256, (60 + 9 * i, 80, 3), dtype=np.uint8)).save(f"{tmp}/{i}.jpg")
        files = image_files(tmp)
        images = [transform(read_rgb(f)) for f in files]
        maps = [ProbeMap(host, "cls", [layer]) for layer in INSPECT_LAYERS]
        probe = maps[0].at(images[0])
        diagnose(probe.f, probe.F)  # warm-up: the first products of a process pay one-time costs
        for rep in range(repeats):
            done = {}

            def run_inspect():
                done["ins"] = inspect_model(host, [transform(read_rgb(f)) for f in files], [f.name for f in files])

            def run_diagnose():
                for i, image in enumerate(images):
                    for pm in maps:
                        probe = pm.at(image)
                        diagnose(probe.f, probe.F, seed=i)

            order = [("inspect", run_inspect), ("diagnose", run_diagnose)]
            clocks = {name: clocked_run(fn) for name, fn in (order if rep % 2 == 0 else order[::-1])}
            wall_o, cpu_o = clocked_run(lambda: output.write(done["ins"], "benchmark", f"{tmp}/out{rep}", {}))
            (wall_i, cpu_i), (wall_d, cpu_d) = clocks["inspect"], clocks["diagnose"]
            rows.append({"repeat": rep, "first": "inspect" if rep % 2 == 0 else "diagnose", "images": count,
                         "inspect_s_per_image": wall_i / count, "diagnose_s_per_image": wall_d / count,
                         "ratio": wall_i / wall_d, "cpu_ratio": cpu_i / cpu_d, "outputs_s": wall_o,
                         "cpu_ratio_with_outputs": (cpu_i + cpu_o) / cpu_d})
    print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3g"), flush=True)
    return rows


def write_inspect(df: pd.DataFrame, args: argparse.Namespace, header: str) -> None:
    spread = lambda col: f"median {df[col].median():.3f} (range {df[col].min():.3f}–{df[col].max():.3f})"
    write(df, args.out, f"diagnose_inspect{args.suffix}", f"`inspect` against `diagnose` alone on the same probe maps "
          f"({header}, one torch thread); {args.images} images, layers {INSPECT_LAYERS}; over {len(df)} repeats, "
          f"cost per image: wall ratio {spread('ratio')}, CPU ratio {spread('cpu_ratio')}; outputs once per "
          f"run, median {df['outputs_s'].median():.2f} s.")


def write(df: pd.DataFrame, out: Path, stem: str, title: str) -> None:
    write_stamped(out, stem, df, f"{title}\n\n{shown(df, RATIOS).to_markdown(index=False, floatfmt='.4g')}",
                  float_format="%.6g")


def summarise(per_image: pd.DataFrame) -> pd.DataFrame:
    """A row per probe: the images' mean (and max) forward-equivalents, none where any image is unstable
    (its ``stability`` then says how many of the probe's image rows were)."""
    mean, most = (lambda s: s.mean(skipna=False)), (lambda s: s.max(skipna=False))
    return per_image.groupby("probe", sort=False).agg(
        weights=("weights", "first"), N=("N", "first"), D=("D", "first"), M=("M", "first"),
        forward_ms=("forward_ms", "median"), stability=("stability", group_stability),
        forward_equivalents=("forward_equivalents", mean), forward_equivalents_max=("forward_equivalents", most),
        products=("products", "mean"), jvp_forward_equivalents=("jvp_forward_equivalents", mean),
        vjp_forward_equivalents=("vjp_forward_equivalents", mean),
        other_forward_equivalents=("other_forward_equivalents", mean),
        min_budget_products=("min_budget_products", "first"),
        min_budget_forward_equivalents=("min_budget_forward_equivalents", mean),
        **({"speedup_vs_dense": ("speedup_vs_dense", "mean"), "max_kappa_abs_error": ("kappa_abs", "max"),
            "max_erank_rel_error": ("erank_rel", "max"), "max_cv_rel_error": ("cv_rel", "max"),
            "max_r90_abs_error": ("r90_abs", "max")} if "speedup_vs_dense" in per_image else {})).reset_index()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--images", type=int, default=3)
    ap.add_argument("--dense-max", type=int, default=4096, help="dense reference when min(M, N·D) ≤ this")
    ap.add_argument("--probes", nargs="*", help="probe names (default: all of params diagnose.probes)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of diagnose per image; the median is kept")
    ap.add_argument("--paper-scale", action="store_true")
    ap.add_argument("--plain-vit", action="store_true", help="also a plain timm ViT closure, unfrozen and frozen")
    ap.add_argument("--only-plain-vit", action="store_true", help="the plain timm ViT cases alone")
    ap.add_argument("--no-probes", action="store_true", help="the --paper-scale and --plain-vit cases alone")
    ap.add_argument("--inspect", action="store_true", help="inspect's cost per image against diagnose alone, "
                                                            "and nothing else")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--suffix", default="", help="appended to the output names, e.g. _gpu")
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks"), help="the folder written")
    args = ap.parse_args()
    params = config.load(args.params)
    header = (f"torch {torch.__version__}, {platform.node()} {args.device}, "
              f"{torch.get_num_threads()} threads; {described(args.repeats, 'forwards', 'diagnose runs')}")
    if args.inspect:
        write_inspect(pd.DataFrame(inspect_case(args.images, args.repeats)), args, header.split(";")[0])
        return 0
    if args.plain_vit or args.only_plain_vit:
        write(pd.DataFrame(plain_vit(args.device, args.repeats)), args.out, f"diagnose_plain_vit{args.suffix}",
              f"`diagnose` as the README calls it on a plain timm ViT closure, unfrozen and frozen ({header}).")
        if args.only_plain_vit:
            return 0
    if args.paper_scale:
        write(pd.DataFrame([paper_scale(args.device, args.repeats)]), args.out, f"diagnose_paper_scale{args.suffix}",
              f"Paper-scale probe ({header}).")
    if args.no_probes:
        return 0
    rows = []
    for name, spec in params["diagnose"]["probes"].items():
        if args.probes and name not in args.probes:
            continue
        host, weights = host_for(params, spec["model"], args.device)
        pm = ProbeMap(host, spec["decoder"], spec["layers"], "so3" if spec.get("output_metric") == "so3" else None)
        rows += measure(name, pm, inputs_for(host, params, args.images, name), args.dense_max, args.device, weights,
                        args.repeats)
    per_image = pd.DataFrame(rows)
    summary = summarise(per_image)
    write(summary, args.out, f"diagnose_cost{args.suffix}", f"One `diagnose` per image at the defaults ({header}); "
          f"mean over {args.images} images per probe.")
    write(per_image, args.out, f"diagnose_cost_images{args.suffix}", f"Per image ({header}).")
    print(shown(summary, RATIOS).to_markdown(index=False, floatfmt=".3g"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
