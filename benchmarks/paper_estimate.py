"""The paper profile's cost on one GPU: an estimate from measured FLOPs and product counts, not a
GPU run (docs/paper.md).

For each stage of params/paper.yaml, its work in FLOPs:

- forward FLOPs per image of each host at each side it runs at: ``torch.utils.flop_counter`` on
  random weights of the real architecture (``build_paper_model``);
- one Jacobian product (JVP or VJP, one column) in FLOPs: counted on the DINOv2-B/14 CLS probe at
  block 10, 224 px, as a multiple of that probe's forward, and applied to every probe's forward;
- products per image: what ``diagnose`` and ``image_targets`` count with the profile's settings on
  a stand-in probe of the same shape class (the count depends on the settings and on
  min(M, N·D) ≤ ``learn.targets.exact.max_dim`` only, not on the model);
- pruning: one full forward per image, setting, schedule, ratio and method run (an upper bound:
  pruned forwards cost less), plus each setting's unpruned reference;
- training of heads, SPNs and the DRM: 6 · parameters · tokens · batch · steps;
- the zoo's zero-shot evaluation: one forward per test item (and per gallery item for k-NN).

VGGT's stages (its probes, the VAE, the latent probe) are listed and left out of the sum: no
installable package builds it. Time = FLOPs / (peak · utilisation), at the A40's FP32 peak (the
paper's GPU) and an assumed utilisation; memory: the peak resident memory of this process while
it takes one JVP and one VJP of Depth-Anything-V2 at 518 px (the largest single-image product).

    python benchmarks/paper_estimate.py [--utilisation 0.35] [--peak-tflops 37.4]

Results: results/benchmarks/paper_estimate.{csv,md}.
"""

from __future__ import annotations

import argparse
import resource
from pathlib import Path

import pandas as pd
import torch
from stamp import write_stamped

from taskgeom.diagnostics import diagnose
from taskgeom.evaluate.cost import count_flops
from taskgeom.linalg.operator import JacobianOperator
from taskgeom.metric.head import ImportanceHead
from taskgeom.metric.spn import SpectralPullbackNetwork
from taskgeom.metric.targets import image_targets
from taskgeom.models.adapters import build_paper_model
from taskgeom.models.host import param_count, run_decoder
from taskgeom.pipeline import config
from taskgeom.probes import Probe, ProbeMap

OUT = Path("results/benchmarks")
VGGT = "vggt"
NYU_SPLITS = {"train": 795, "test": 654}  # NYU-Depth-V2 labeled: the standard splits.mat's sizes


def host_for(params: dict, model: str) -> tuple[torch.nn.Module, int]:
    entry = params["zoo"][model]
    return build_paper_model(entry["adapter"]).eval(), int(entry["img_size"])


def forward_gflops(host: torch.nn.Module, decoder: str, side: int) -> float:
    x = torch.zeros(1, 3, side, side)
    with torch.no_grad():
        return count_flops(lambda: run_decoder(host, decoder, x), host) / 1e9


def product_factor() -> float:
    """FLOPs of one JVP and one VJP column, mean, over one forward of the same probe."""
    pm = ProbeMap(build_paper_model("dinov2-b14").eval(), "cls", [10])
    probe = pm.at(torch.randn(3, 224, 224, generator=torch.Generator().manual_seed(0)))
    op = JacobianOperator(probe.f, probe.F)
    forward = count_flops(lambda: probe.f(probe.F))
    jvp = count_flops(lambda: op.matvec(torch.randn(1, *probe.F.shape)))
    vjp = count_flops(lambda: op.rmatvec(torch.randn(1, op.out_dim)))
    return (jvp + vjp) / 2 / forward


def stand_in(N: int, D: int, M: int) -> Probe:
    """A cheap probe of the given shape: the estimators count the same products on it."""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(M, N * D, generator=g) / (N * D) ** 0.5
    return Probe(F=torch.randn(N, D, generator=g), f=lambda X: torch.tanh(A @ X.flatten()), layers=(0,),
                 tokens_per_layer=N)


def products_per_image(params: dict, exact: bool) -> tuple[int, int]:
    """(diagnose, targets) products per image with the profile's settings."""
    est, t, r = params["diagnose"]["estimator"], params["learn"]["targets"], params["learn"]["r"]
    small = min(params["learn"]["targets"]["exact"]["max_dim"], 768)
    probe = stand_in(8, 128, small if exact else 256)
    d = diagnose(probe.f, probe.F, r=est["r"], num_probes=est["num_probes"], power_iters=est["power_iters"])
    rows = image_targets(probe, r, tuple(sorted({1, t["power_iters"]})), t["oversample"], t["block_norm_probes"], 0,
                         exact)
    return d.products, int(rows["products"])


def training_pflops(params_count: int, tokens: int, batch: int, steps: int) -> float:
    return 6 * params_count * tokens * batch * steps / 1e15


class Estimate:
    """Rows of (stage, item, images, PFLOP, note), with each host's forward GFLOPs counted once."""

    def __init__(self, params: dict, factor: float) -> None:
        self.params, self.factor, self.rows = params, factor, []
        self.hosts: dict[str, tuple[torch.nn.Module, int]] = {}
        self.gflops: dict[tuple, float] = {}

    def host(self, model: str) -> tuple[torch.nn.Module, int]:
        if model not in self.hosts:
            self.hosts[model] = host_for(self.params, model)
        return self.hosts[model]

    def fwd(self, model: str, decoder: str, side: int | None = None) -> float:
        host, size = self.host(model)
        key = (model, decoder, side or size)
        if key not in self.gflops:
            self.gflops[key] = forward_gflops(host, decoder, side or size)
        return self.gflops[key]

    def add(self, stage: str, item: str, pflops: float, images: int, note: str = "") -> None:
        self.rows.append({"stage": stage, "item": item, "images": images, "pflops": pflops, "note": note})


def source_items(params: dict, name: str) -> int:
    """Items of a source of the paper profile: its subset's count, or NYU's split size."""
    spec = params["sources"][name]
    return int(spec["subset"]["count"]) if spec.get("subset") else NYU_SPLITS[spec["split"]]


def zoo_rows(e: Estimate) -> None:
    for name, entry in e.params["zoo"].items():
        if entry["adapter"] == VGGT:
            e.add("zoo", name, float("nan"), 0, "VGGT: not estimated")
            continue
        decoder = e.host(name)[0].decoders[0]
        n = source_items(e.params, entry["sources"]["test"])
        n += source_items(e.params, entry["sources"]["train"]) if decoder == "cls" else 0
        e.add("zoo", name, n * e.fwd(name, decoder) / 1e6, n, "zero-shot forwards")


def diagnose_rows(e: Estimate) -> None:
    products, _ = products_per_image(e.params, exact=False)
    n = e.params["diagnose"]["images"]
    for name, p in e.params["diagnose"]["probes"].items():
        if p["model"] == VGGT:
            e.add("diagnose", name, float("nan"), n, "VGGT: not estimated")
        else:
            e.add("diagnose", name, n * products * e.factor * e.fwd(p["model"], p["decoder"]) / 1e6, n,
                  f"{products} products/image")


def learn_rows(e: Estimate) -> None:
    learn = e.params["learn"]
    t = learn["targets"]
    for name, p in learn["probes"].items():
        kind, model = p["host"].split("/", 1)
        n = sum({**t["images"], **p.get("images", {})}.values())
        if kind == "vae":
            e.add("targets", name, float("nan"), n, "VGGT latent: not estimated")
            continue
        host, size = e.host(model)
        probe = ProbeMap(host, p["decoder"], p["layers"]).at(torch.zeros(3, size, size))
        N, D = probe.F.shape
        M = int(probe.f(probe.F).numel())
        exact = min(M, N * D) <= t["exact"]["max_dim"]
        _, per_image = products_per_image(e.params, exact)
        e.add("targets", name, n * per_image * e.factor * e.fwd(model, p["decoder"]) / 1e6, n,
              f"{per_image} products/image (N={N}, D={D}, M={M}, dense: {exact})")
        for head, h in learn["heads"].items():
            cfg = {**learn["head_defaults"], **h}
            if h["probe"] == name:
                count = param_count(ImportanceHead(N, D, cfg["width"], cfg["heads"], cfg["layers"]))
                e.add("head", head, len(cfg["seeds"]) * training_pflops(count, N, cfg["batch_size"], cfg["steps"]),
                      cfg["train_images"], f"{len(cfg['seeds'])} seeds, {count} parameters")
        if name in learn["spn"]:
            s = learn["spn"][name]
            count = param_count(SpectralPullbackNetwork(N, D, learn["r"], s["width"], s["depth"], s["heads"]))
            e.add("spn", name, 3 * len(s["seeds"]) * training_pflops(count, N, s["batch_size"], s["steps"]),
                  t["images"]["train"], "three supervisions")


def prune_rows(e: Estimate) -> None:
    prune = e.params["prune"]
    runs = lambda methods: sum(1 if m in ("tome_score", "tome", "evit") else len(prune["seeds"]) for m in methods)
    base, *further = prune["resolutions"]
    for name, c in prune["cls"].items():
        n = c.get("images", prune["images"])
        settings = [base] * len(prune["domains"]) + further
        per = sum(e.fwd(c["model"], c["decoder"], s) for s in settings)
        per *= 1 + len(prune["ratios"]) * runs(c["methods"])
        bank = prune["knn"]["bank_images"] * e.fwd(c["model"], c["decoder"], base)
        e.add("prune-cls", name, (n * per + bank) / 1e6, n, "full forwards (upper bound)")
    for name, c in prune["dense"].items():
        n = c.get("images", prune["images"])
        settings = [base] * len(prune["domains"]) + further + [base]  # + the base setting without LLF
        per = sum(e.fwd(c["model"], c["decoder"], s) for s in settings)
        per *= 1 + len(c["schedules"]) * len(prune["ratios"]) * runs(c["methods"])
        e.add("prune-dense", name, n * per / 1e6, n, "full forwards (upper bound)")


def other_rows(e: Estimate) -> None:
    t = e.params["learn"]["targets"]
    for name, c in e.params["retrieval"].items():
        n = sum({**t["images"], **e.params["learn"]["probes"][c["probe"]].get("images", {})}.values())
        enc = (n + len(c["domains"]) * (c["queries"] + c["gallery"])) * e.fwd(c["model"], c["decoder"]) / 1e6
        e.add("retrieval", name, enc, n, "encoding; the DRM's training is small beside it")
    for name, v in e.params["vae"].items():
        e.add("vae", name, float("nan"), v["eval_images"], "VGGT: not estimated")


def stage_rows(params: dict, factor: float) -> list[dict]:
    e = Estimate(params, factor)
    for rows in (zoo_rows, diagnose_rows, learn_rows, prune_rows, other_rows):
        rows(e)
    return e.rows


def peak_memory_gib() -> float:
    """Peak resident memory after one JVP and one VJP of Depth-Anything-V2 at 518 px (its depth probe)."""
    host = build_paper_model("depth-anything-v2").eval()
    probe = ProbeMap(host, "depth", [10]).at(torch.zeros(3, 518, 518))
    op = JacobianOperator(probe.f, probe.F)
    op.matvec(torch.randn(1, *probe.F.shape))
    op.rmatvec(torch.randn(1, op.out_dim))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", default="params/paper.yaml")
    ap.add_argument("--peak-tflops", type=float, default=37.4, help="FP32 peak (A40: 37.4)")
    ap.add_argument("--utilisation", type=float, default=0.35, help="assumed share of the peak sustained")
    args = ap.parse_args()
    torch.manual_seed(0)
    params = config.load(args.params)
    factor = product_factor()
    table = pd.DataFrame(stage_rows(params, factor))
    rate = args.peak_tflops * args.utilisation * 1e12
    table["gpu_hours"] = table["pflops"] * 1e15 / rate / 3600
    total = table["gpu_hours"].sum()
    memory = peak_memory_gib()
    head = (f"An estimate, not a measurement (torch {torch.__version__}): FLOPs counted on "
            f"random weights of the real architectures; one Jacobian product = {factor:.2f} forwards; "
            f"{args.peak_tflops} TFLOP/s FP32 peak at {args.utilisation:.0%} utilisation. "
            f"Total {table['pflops'].sum():.1f} PFLOP, {total:.1f} GPU-hours (VGGT's stages not included). "
            f"Peak memory of one Depth-Anything-V2 product at 518 px (CPU resident): {memory:.1f} GiB.")
    write_stamped(OUT, "paper_estimate", table, head + "\n\n" + table.to_markdown(index=False, floatfmt=".3g"))
    print(head)
    print(table.groupby("stage")[["pflops", "gpu_hours"]].sum().to_string())


if __name__ == "__main__":
    main()
