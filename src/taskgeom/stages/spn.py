"""The ``spn`` stage: train the Spectral Pullback Network of one probe from each supervision its
target cache holds — exact spectral targets (the dense SVD) where the probe is small enough, and
RandNLA targets at q = 1 and at params' q — and measure the subspace alignment V1 of its predicted
modes with the reference top-r subspace on held-out images (paper §5.5, App. J, Table 13). The
reference is the exact subspace when the test split has it, else the RandNLA targets at the
largest q. A randomly initialised SPN of the same seed is the floor. The SPN trained from params'
q (the cheapest supervision the pipeline otherwise uses) of the first seed is saved."""

from __future__ import annotations

import copy

import pandas as pd
import torch

from taskgeom.artifacts import metrics as dvc_files
from taskgeom.artifacts.atomic import write_json
from taskgeom.artifacts.checkpoints import save_module
from taskgeom.artifacts.tables import write_table
from taskgeom.evaluate.stats import summarize
from taskgeom.finite import check_metrics
from taskgeom.metric.spn_fit import new_spn, reference_of, train_spn, v1_per_image
from taskgeom.metric.targets import TargetFile
from taskgeom.models.host import param_count
from taskgeom.pipeline.runtime import StageContext

SUPERVISION = ("exact", "q1", "q")  # the plot's series; q: params' q (registry.SPN_SUPERVISION)


def roles(source: str, q: int) -> list[str]:
    """The plot's series a supervision source plays: 'q<params' q>' is 'q' (and 'q1' when q = 1)."""
    return [r for r, s in (("exact", "exact"), ("q1", "q1"), ("q", f"q{q}")) if s == source]


def write_dvc_files(ctx: StageContext, summary: dict, curves: list[dict]) -> None:
    """V1 per supervision, means over seeds (a DVC metric: v1.random_init, v1.exact, v1.q1, v1.q
    with q params' q); the training loss per supervision, mean over seeds (a DVC plot)."""
    q = ctx.params["learn"]["targets"]["power_iters"]
    v1 = {"random_init": summary["random-init"]["mean"]}
    v1 |= {r: s["mean"] for source, s in summary.items() for r in roles(source, q)}
    dvc_files.write_metrics(ctx.outputs.get("headline"), {"v1": v1}, ctx.provenance())
    long = [{"step": c["step"], "role": r, "loss": c["loss"]} for c in curves for r in roles(c["supervision"], q)]
    dvc_files.write_plot(ctx.outputs.get("loss_plot"), dvc_files.wide(long, "step", "loss", "role", SUPERVISION),
                         ctx.provenance())


def run(ctx: StageContext) -> None:
    name = ctx.wildcard
    cfg = ctx.params["learn"]["spn"][name]
    boot = ctx.params["learn"]["bootstrap"]
    train, test = TargetFile.open(ctx.inputs["train"]), TargetFile.open(ctx.inputs["test"])
    reference_source, reference = reference_of(test)
    rows, curves, saved = [], [], False
    torch.use_deterministic_algorithms(True, warn_only=True)
    for seed in cfg["seeds"]:
        untrained = new_spn(train.tokens, train.dim, train.r, cfg["width"], cfg["depth"], cfg["heads"], seed,
                            ctx.device)
        floor = float(v1_per_image(untrained, test, reference, ctx.device).mean())
        rows.append({"seed": seed, "supervision": "random-init", "v1": floor})
        for source in train.sources():
            model = copy.deepcopy(untrained)
            curve = train_spn(model, train, source, cfg["steps"], cfg["batch_size"], cfg["lr"], seed, ctx.device,
                              progress=lambda it, total: ctx.progress(it, f"spn {name} {source} seed {seed}", total),
                              stage=f"spn {name} {source} seed {seed}")
            v1 = v1_per_image(model, test, reference, ctx.device)
            rows.append({"seed": seed, "supervision": source, "v1": float(v1.mean())})  # timings: logs only
            check_metrics(f"spn {name} {source} seed {seed}", rows[-1])
            curves += [{"seed": seed, "supervision": source, "step": s, "loss": v} for s, v in curve.points]
            ctx.log.info("%s seed %d %s: V1 %.3f (untrained %.3f), %.1f s, reader wait %.1f%%", name, seed, source,
                         v1.mean(), floor, curve.total_s, 100 * curve.wait_fraction)
            if not saved and source == f"q{ctx.params['learn']['targets']['power_iters']}":
                save_module(model, {"kind": "spn", "tokens": train.tokens, "dim": train.dim, "rank": train.r,
                                    "width": cfg["width"], "depth": cfg["depth"], "heads": cfg["heads"]},
                            ctx.outputs["weights"], ctx.outputs["config"], ctx.provenance())
                saved = True
    frame = pd.DataFrame(rows)
    summary = {s: summarize(g["v1"].tolist(), boot["resamples"], boot["level"], boot["seed"]).as_dict()
               for s, g in frame.groupby("supervision", sort=False)}
    write_json(ctx.outputs["metrics"], {
        "probe": name, **cfg, "reference": reference_source, "sources": train.sources(), "rank": train.r,
        "tokens": train.tokens, "dim": train.dim, "test_images": test.num_items, "train_images": train.num_items,
        "parameters": param_count(untrained), "rows": rows, "summary": summary, "provenance": ctx.provenance()})
    write_table(pd.DataFrame(curves), ctx.outputs["curve"], provenance=ctx.provenance())
    write_dvc_files(ctx, summary, curves)
