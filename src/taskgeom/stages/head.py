"""The ``head`` stage: train one importance-head configuration (``learn.heads.<name>`` over
``learn.head_defaults``) for each of its seeds on a probe's cached targets, and evaluate the
Spearman ρ between predicted and target importance on the held-out test images (paper §5.4–5.5,
App. F). Two floors: the untrained head of the same seed, and the mean training target of each
token slot (what position alone predicts). Two measurements of what the targets leave a head to
learn (``metric.target_agreement``): each test image's ρ between the spectral and the block-norm
target, and the share of the target's within-image rank variance that the token slot explains.
Every seed's head is saved, for the pruning stages to average over. Each image's ρ behind those
means (per seed and quantity, the position-only floor's, whose interval is a bootstrap over
images, and the targets' agreement) is published beside the metrics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from taskgeom.artifacts import metrics as dvc_files
from taskgeom.artifacts.atomic import write_json
from taskgeom.artifacts.tables import write_table
from taskgeom.artifacts.values import write_values
from taskgeom.evaluate.stats import summarize
from taskgeom.finite import check_metrics
from taskgeom.metric.checkpoint import save_seeds
from taskgeom.metric.fit import predict
from taskgeom.metric.head_fit import new_head, position_floor, rho_per_image, score, target_key, train_head
from taskgeom.metric.target_agreement import position_share, targets_agreement
from taskgeom.metric.targets import TargetFile
from taskgeom.models.host import param_count
from taskgeom.pipeline.runtime import StageContext

EXAMPLES = 4  # held-out images whose predicted and target maps go to the report's figure


def head_config(params: dict, name: str) -> dict:
    return {**params["learn"]["head_defaults"], **params["learn"]["heads"][name]}


def per_image_rows(head: str, quantity: str, seed: int | None, rho: np.ndarray) -> pd.DataFrame:
    """Tidy rows of one quantity's per-image ρ (held-out images, in the target file's order):
    head, quantity, seed (empty for the position-only floor, which has none), image, value."""
    return pd.DataFrame({"head": head, "quantity": quantity, "seed": pd.array([seed] * len(rho), dtype="Int64"),
                         "image": np.arange(len(rho)), "value": rho})


def agreement_of(test: TargetFile, power_iters: int) -> np.ndarray:
    """Each test image's ρ between its spectral target (at q = ``power_iters``) and its block-norm target."""
    spectral = target_key("spectral", test, power_iters)
    both = test.read((spectral, "block_norm"))
    return targets_agreement(both[spectral], both["block_norm"])


def write_dvc_files(ctx: StageContext, summary: dict, rho_mean_map: float, curves: list[dict]) -> None:
    """Spearman ρ on the held-out images, means over seeds, beside its floors (a DVC metric); the
    training loss, mean over seeds (a DVC plot)."""
    dvc_files.write_metrics(ctx.outputs.get("headline"), {**{k: v["mean"] for k, v in summary.items()},
                                                      "rho_mean_map": rho_mean_map}, ctx.provenance())
    dvc_files.write_plot(ctx.outputs.get("loss_plot"), dvc_files.wide(curves, "step", "loss"), ctx.provenance())


def run(ctx: StageContext) -> None:
    name = ctx.wildcard
    cfg = head_config(ctx.params, name)
    boot = ctx.params["learn"]["bootstrap"]
    train, val, test = (TargetFile.open(ctx.inputs[s]) for s in ("train", "val", "test"))
    key = target_key(cfg["target"], train, ctx.params["learn"]["targets"]["power_iters"])
    if cfg["train_images"] > train.num_items:
        raise ValueError(f"learn.heads.{name}.train_images: {cfg['train_images']} requested, {train.path} holds "
                         f"{train.num_items}")
    truth = {s: f.read((key,))[key] for s, f in (("val", val), ("test", test))}
    rho_mean_map = position_floor(train, key, cfg["train_images"], truth["test"])
    agreement = agreement_of(test, ctx.params["learn"]["targets"]["power_iters"])
    exact_truth = (test.read(("exact/importance",))["exact/importance"]
                   if test.exact and cfg["target"] == "spectral" else None)
    seeds, curves, examples, heads = [], [], None, {}
    tidy = [per_image_rows(name, "rho_position_only", None, rho_mean_map),
            per_image_rows(name, "rho_spectral_vs_block_norm", None, agreement)]
    torch.use_deterministic_algorithms(True, warn_only=True)
    for seed in cfg["seeds"]:
        head = new_head(train.tokens, train.dim, cfg["width"], cfg["heads"], cfg["layers"], seed, ctx.device)
        floor = rho_per_image(predict(head, test, score, ctx.device), truth["test"])
        curve = train_head(head, train, key, cfg["w_rank"], cfg["steps"], cfg["batch_size"], cfg["lr"], seed,
                           ctx.device, limit=cfg["train_images"],
                           progress=lambda it, total: ctx.progress(it, f"head {name} seed {seed}", total),
                           stage=f"head {name} seed {seed}")
        pred = predict(head, test, score, ctx.device)
        rho = rho_per_image(pred, truth["test"])
        rho_val = rho_per_image(predict(head, val, score, ctx.device), truth["val"])
        per = {"rho_test": rho, "rho_val": rho_val, "rho_random_init": floor}
        if exact_truth is not None:
            per["rho_test_vs_exact"] = rho_per_image(pred, exact_truth)
        tidy += [per_image_rows(name, quantity, seed, v) for quantity, v in per.items()]
        # timings go to the log only: reruns give identical bytes
        row = {"seed": seed, **{quantity: float(v.mean()) for quantity, v in per.items()}}
        check_metrics(f"head {name} seed {seed}", row)
        seeds.append(row)
        curves += [{"seed": seed, "step": s, "loss": v} for s, v in curve.points]
        ctx.log.info("%s seed %d: ρ %.3f (untrained %.3f), %.1f s, reader wait %.1f%%", name, seed, row["rho_test"],
                     row["rho_random_init"], curve.total_s, 100 * curve.wait_fraction)
        if examples is None:
            examples = {"index": list(range(EXAMPLES)), "predicted": pred[:EXAMPLES].tolist(),
                        "target": truth["test"][:EXAMPLES].tolist(), "rho": rho[:EXAMPLES].tolist()}
        heads[seed] = head
    save_seeds(heads, {"kind": "importance_head", "tokens": train.tokens, "dim": train.dim, "width": cfg["width"],
                       "heads": cfg["heads"], "layers": cfg["layers"]},
               ctx.outputs["weights"], ctx.outputs["config"], ctx.provenance())
    summary = {k: summarize([s[k] for s in seeds], boot["resamples"], boot["level"], boot["seed"]).as_dict()
               for k in seeds[0] if k.startswith("rho")}
    write_json(ctx.outputs["metrics"], {
        "head": name, **cfg, "target_key": key, "parameters": param_count(head), "test_images": test.num_items,
        "rho_mean_map": summarize(rho_mean_map.tolist(), boot["resamples"], boot["level"], boot["seed"]).as_dict(),
        "targets_agreement": summarize(agreement.tolist(), boot["resamples"], boot["level"], boot["seed"]).as_dict(),
        "position_share": position_share(truth["test"]),
        "seeds_detail": seeds, "summary": summary, "examples": examples, "provenance": ctx.provenance()})
    write_table(pd.DataFrame(curves), ctx.outputs["curve"], provenance=ctx.provenance())
    write_values(pd.concat(tidy, ignore_index=True), ctx.outputs["values"], provenance=ctx.provenance())
    write_dvc_files(ctx, summary, float(rho_mean_map.mean()), curves)
