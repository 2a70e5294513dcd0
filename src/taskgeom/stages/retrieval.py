"""The ``retrieval`` stage: train the Decoder Retrieval Metric of one probe and evaluate it
against L2 and cosine distance of the features (paper App. K, Tables 14–15).

Training pairs are the probe's cached training images (``data/targets/<probe>/train.h5``, the
first images of the world's train split): the regression target of a pair is the SILog distance
between the two images' depth outputs, and the distillation target of an image is its cached
Jacobian-derived token importance. The last ``holdout`` of them give held-out pairs (the training
curve's held-out loss, and every method's linear calibration for the MAE). Three variants: the
DRM (both terms), no regression (the scale is unsupervised: A stays at its initialisation), and
no distillation (the token weights lose their anchor). Evaluation: queries and a disjoint gallery
from the test split, on the base domain (in-distribution) and on the sketch renders (cross-domain:
trained on the base domain only), ranked against the true decoder-output distance. The per-query
values behind each row (ρ, calibrated MAE, recall@k) are published beside the run's metrics.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import torch
from torch import Tensor

from taskgeom.artifacts import metrics as dvc_files
from taskgeom.artifacts.atomic import write_json
from taskgeom.artifacts.tables import write_table
from taskgeom.artifacts.values import write_values
from taskgeom.data.batches import digest_of, read_inputs
from taskgeom.data.hdf5 import read_attr_json
from taskgeom.data.sources import need
from taskgeom.evaluate.stats import summarize
from taskgeom.finite import check_step, grad_norm
from taskgeom.metric import checkpoint
from taskgeom.metric.head import head_loss
from taskgeom.metric.targets import TargetFile
from taskgeom.models import preprocess, zoo
from taskgeom.models.host import forward_states, freeze, param_count, run_decoder
from taskgeom.pipeline.runtime import StageContext
from taskgeom.retrieval.drm import (
    DecoderRetrievalMetric,
    cosine_distance,
    cross_distance,
    l2_distance,
    pair_distance,
    silog_matrix,
)
from taskgeom.retrieval.evaluate import calibrated_mae, fit_calibration, recall_at_k, spearman_per_query, two_stage

VARIANTS = {"drm": (True, True), "no_regression": (False, True), "no_distillation": (True, False)}
BASELINES = ("l2", "cosine")
LOG_EVERY = 20


@torch.no_grad()
def encode(host, decoder: str, layer: int, images: Tensor, batch: int = 64) -> tuple[Tensor, Tensor]:
    """images (n, 3, H, W) -> features at ``layer`` (n, N, D) and log depth outputs (n, H·W)."""
    feats, logs = [], []
    for i in range(0, len(images), batch):
        x = images[i:i + batch]
        states, _ = forward_states(host, x, layer)
        feats.append(states[layer])
        logs.append(run_decoder(host, decoder, x).clamp_min(1e-6).log())
    return torch.cat(feats), torch.cat(logs)


def regression_loss(d: Tensor, target: Tensor) -> Tensor:
    """Mean squared error of the log distances: every pair counts by its relative error, so near
    neighbours (small distances, what retrieval ranks) weigh as much as far pairs."""
    return (d.clamp_min(1e-8).log() - target.clamp_min(1e-8).log()).pow(2).mean()


def train_variant(model: DecoderRetrievalMetric, F: Tensor, true: Tensor, importance: Tensor, train_ids: np.ndarray,
                  held_ids: np.ndarray, cfg: dict, regression: bool, distill: bool, stage: str) -> list[dict]:
    """Minibatches of random training pairs; returns the curve (train loss, held-out regression loss).
    A non-finite loss or gradient stops it, naming ``stage``, the step and the pairs."""
    rng = np.random.default_rng(cfg["seed"])
    if regression:  # start at the targets' scale: the median log ratio over training pairs
        i, j = rng.choice(train_ids, 512), rng.choice(train_ids, 512)
        keep = i != j
        with torch.no_grad():
            ratio = (true[i[keep], j[keep]].log() - model(F[i[keep]], F[j[keep]]).log()).median()
            model.log_scale += ratio
    else:
        model.A.requires_grad_(False)
        model.log_scale.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=cfg["lr"])
    hi, hj = np.triu_indices(len(held_ids), 1)
    held_i, held_j = held_ids[hi], held_ids[hj]
    curve, window = [], []
    for step in range(cfg["steps"]):
        i = rng.choice(train_ids, cfg["batch_size"])
        j = rng.choice(train_ids, cfg["batch_size"])
        keep = i != j
        i, j = i[keep], j[keep]
        (P, w), (Q, v) = model.embed(F[i]), model.embed(F[j])
        loss = torch.zeros(())
        if regression:
            loss = loss + regression_loss(pair_distance(P, w, Q, v), true[i, j])
        if distill:
            ids = np.unique(np.concatenate([i, j]))
            loss = loss + cfg["distill_weight"] * head_loss(model.head(F[ids]), importance[ids], 0.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        check_step(stage, step, loss, grad_norm(model.parameters()),
                   lambda: f"of pairs {list(zip(i.tolist(), j.tolist()))}")
        opt.step()
        window.append(loss.item())
        if (step + 1) % LOG_EVERY == 0 or step + 1 == cfg["steps"]:
            with torch.no_grad():
                held = regression_loss(model(F[held_i], F[held_j]), true[held_i, held_j]).item()
            curve.append({"step": step + 1, "train_loss": float(np.mean(window)), "heldout_regression": held})
            window = []
    model.eval()
    return curve


@torch.no_grad()
def distances(method: str, models: dict, Fq: Tensor, Fg: Tensor) -> np.ndarray:
    if method == "l2":
        return l2_distance(Fq, Fg).numpy()
    if method == "cosine":
        return cosine_distance(Fq, Fg).numpy()
    m = models[method]
    return cross_distance(*m.embed(Fq), *m.embed(Fg)).numpy()


def training_data(ctx: StageContext, cfg: dict, host) -> tuple[TargetFile, Tensor, Tensor, Tensor]:
    """The cached training images: their features (checked against the cache), cached token
    importance, and the SILog distances between their depth outputs (the pairs' regression targets)."""
    q = ctx.params["learn"]["targets"]["power_iters"]
    layer = cfg["layer"]
    cache = TargetFile.open(ctx.inputs["targets"])
    what = f"retrieval.{ctx.wildcard}.sources.train"
    source, prep = preprocess.open_for_host(ctx.inputs["source_train"], ctx.params["sources"], host,
                                            zoo.entry(ctx.inputs["config"]), what)
    source = need(source, cache.num_items, what)
    with h5py.File(cache.path, "r") as f:
        cached_keys = read_attr_json(f, "source")["keys_sha256"] if "source" in f.attrs else None
    if cached_keys != source.describe()["keys_sha256"]:
        raise ValueError(f"retrieval.{ctx.wildcard}.sources.train: {source.name!r} is not the source of {cache.path}'s "
                         "images (the probe's learn.probes sources.train); name that source")
    F, log_depth = encode(host, cfg["decoder"], layer, read_inputs(source, prep).x)
    cached = cache.read(("features", f"q{q}/importance"))
    if not np.allclose(F[:4].numpy(), cached["features"][:4], atol=1e-4):
        raise ValueError(f"{cache.path}: its features are not this model's layer-{layer} features of the first "
                         "training images; rebuild the targets")
    importance = torch.as_tensor(cached[f"q{q}/importance"]).float()
    return cache, F, importance, silog_matrix(log_depth, log_depth)


def train_variants(ctx: StageContext, cfg: dict, dim: int, F: Tensor, true_train: Tensor, importance: Tensor,
                   train_ids: np.ndarray, held_ids: np.ndarray) -> tuple[dict, list[dict]]:
    """Every variant from the probe's trained head: the models by name and their training curves."""
    head0, _ = checkpoint.load(ctx.inputs["head_weights"], ctx.inputs["head_config"])
    models, curves = {}, []
    for variant, (regression, distill) in VARIANTS.items():
        model = DecoderRetrievalMetric(copy.deepcopy(head0).train(), dim, cfg["rank"], cfg["seed"])
        curve = train_variant(model, F, true_train, importance, train_ids, held_ids, cfg, regression, distill,
                              f"retrieval {ctx.wildcard} {variant}")
        curves += [{"variant": variant, **c} for c in curve]
        models[variant] = model
        ctx.log.info("%s %s: held-out regression loss %.3f -> %.3f", ctx.wildcard, variant,
                     curve[0]["heldout_regression"], curve[-1]["heldout_regression"])
    return models, curves


def per_query(pred: dict[str, np.ndarray], true: np.ndarray, calibration: dict, cfg: dict) -> dict:
    """Per-query values of every method: (method, metric) -> (queries,) for the metrics rho, mae
    and recall@k; the values ``method_rows`` aggregates, each in its own dtype."""
    return {(m, metric): v for m in pred for metric, v in (
        ("rho", spearman_per_query(pred[m], true)), ("mae", calibrated_mae(pred[m], true, calibration[m])),
        *((f"recall@{k}", recall_at_k(pred[m], true, k)) for k in cfg["recall_k"]))}


def tidy_values(name: str, domain: str, values: dict) -> pd.DataFrame:
    """``per_query``'s values as tidy rows: model, domain, method, metric, query (its position
    among the queries) and value."""
    return pd.concat([pd.DataFrame({"model": name, "domain": domain, "method": m, "metric": metric,
                                    "query": np.arange(len(v)), "value": v}) for (m, metric), v in values.items()],
                     ignore_index=True)


def method_rows(domain: str, values: dict, pred: dict[str, np.ndarray], true: np.ndarray, cfg: dict,
                boot: dict) -> list[dict]:
    """One row per method from its per-query ``values`` (rank correlation with its bootstrap
    interval over queries, calibrated MAE, recall@k), then the two-stage search."""
    rows = []
    for m in pred:
        row = {"domain": domain, "method": m,
               **{f"rho_{k}": v for k, v in summarize(values[m, "rho"], boot["resamples"], boot["level"],
                                                      boot["seed"]).as_dict().items()},
               "mae": float(values[m, "mae"].mean())}
        row |= {f"recall@{k}": float(values[m, f"recall@{k}"].mean()) for k in cfg["recall_k"]}
        rows.append(row)
    staged = two_stage(pred["cosine"], pred["drm"], cfg["shortlist"])
    rows.append({"domain": domain, "method": f"cosine top-{cfg['shortlist']} → drm",
                 **{f"recall@{k}": float(recall_at_k(staged, true, k).mean()) for k in cfg["recall_k"]}})
    return rows


def evaluate_domain(ctx: StageContext, cfg: dict, host, models: dict, calibration: dict,
                    domain: str) -> tuple[list[dict], pd.DataFrame, list[dict], dict, dict]:
    """Queries against the gallery on ``domain``: its rows, their per-query values, example
    rankings, scatter sample, and what was read (the source's first queries + gallery items,
    which the rankings index)."""
    n_q, n_g = cfg["queries"], cfg["gallery"]
    what = f"retrieval.{ctx.wildcard}.sources.{domain}"
    source, prep = preprocess.open_for_host(ctx.inputs[f"source_{domain}"], ctx.params["sources"], host,
                                            zoo.entry(ctx.inputs["config"]), what)
    source = need(source, n_q + n_g, f"retrieval.{ctx.wildcard}: queries + gallery")
    x = read_inputs(source, prep).x
    seen = {"source": source.describe(), "preprocess": prep.describe(), "input_sha256": digest_of(x)}
    Ft, log_t = encode(host, cfg["decoder"], cfg["layer"], x)
    Fq, Fg = Ft[:n_q], Ft[n_q:]
    true = silog_matrix(log_t[:n_q], log_t[n_q:]).numpy()
    pred = {m: distances(m, models, Fq, Fg) for m in (*VARIANTS, *BASELINES)}
    values = per_query(pred, true, calibration, cfg)
    rows = method_rows(domain, values, pred, true, cfg, ctx.params["learn"]["bootstrap"])
    pick = np.random.default_rng(cfg["seed"]).choice(true.size, size=min(2000, true.size), replace=False)
    scatter = {"true": true.ravel()[pick].tolist(),
               **{m: (calibration[m][0] * pred[m].ravel()[pick] + calibration[m][1]).tolist()
                  for m in ("drm", "l2", "cosine")}}
    examples = [{"query": int(i),
                 "drm": (n_q + np.argsort(pred["drm"][i], kind="stable")[:5]).tolist(),
                 "cosine": (n_q + np.argsort(pred["cosine"][i], kind="stable")[:5]).tolist(),
                 "true": (n_q + np.argsort(true[i], kind="stable")[:5]).tolist()}
                for i in range(cfg["examples"])]
    return rows, tidy_values(ctx.wildcard, domain, values), examples, scatter, seen


def write_dvc_files(ctx: StageContext, rows: list[dict], curves: list[dict]) -> None:
    """Per domain and method, the mean Spearman ρ against the true decoder distance and recall@k
    (a DVC metric, ``<domain>.<method>.rho``; the two-stage search as ``two_stage``); the held-out
    regression loss of each variant (a DVC plot)."""
    headline: dict = {}
    for row in rows:
        method = row["method"] if row["method"] in (*VARIANTS, *BASELINES) else "two_stage"
        values = {k.removesuffix("_mean"): v for k, v in row.items() if k == "rho_mean" or k.startswith("recall@")}
        headline.setdefault(row["domain"], {})[method] = values
    dvc_files.write_metrics(ctx.outputs.get("headline"), headline, ctx.provenance())
    dvc_files.write_plot(ctx.outputs.get("loss_plot"),
                         dvc_files.wide(curves, "step", "heldout_regression", "variant", tuple(VARIANTS)),
                         ctx.provenance())


def run(ctx: StageContext) -> None:
    name = ctx.wildcard
    cfg = ctx.params["retrieval"][name]
    torch.manual_seed(cfg["seed"])
    torch.use_deterministic_algorithms(True, warn_only=True)
    host = freeze(zoo.load(ctx.inputs["weights"], ctx.inputs["config"], ctx.device)).cpu()

    cache, F, importance, true_train = training_data(ctx, cfg, host)
    ids = np.arange(len(F))
    train_ids, held_ids = ids[:-cfg["holdout"]], ids[-cfg["holdout"]:]
    models, curves = train_variants(ctx, cfg, cache.dim, F, true_train, importance, train_ids, held_ids)

    # calibration of every method on the held-out training pairs
    held = F[held_ids]
    true_held = true_train[held_ids][:, held_ids].numpy()
    upper = np.triu_indices(len(held_ids), 1)
    methods = (*VARIANTS, *BASELINES)
    calibration = {m: fit_calibration(distances(m, models, held, held)[upper], true_held[upper]) for m in methods}

    rows, tidy, examples, scatter, seen = [], [], {}, {}, {}
    for domain in cfg["domains"]:
        domain_rows, values, examples[domain], scatter[domain], seen[domain] = evaluate_domain(
            ctx, cfg, host, models, calibration, domain)
        rows += domain_rows
        tidy.append(values)
        ctx.log.info("%s %s: ρ %s", name, domain, ", ".join(f"{r['method']} {r.get('rho_mean', float('nan')):.3f}"
                                                            for r in rows if r["domain"] == domain))
    drm = models["drm"]
    zoo_cfg = {"kind": "drm", "rank": cfg["rank"], "dim": cache.dim, "head": json.loads(
        Path(ctx.inputs["head_config"]).read_text())["architecture"]}
    zoo.save(drm, zoo_cfg, ctx.outputs["weights"], ctx.outputs["config"], ctx.provenance())
    write_table(pd.DataFrame(curves), ctx.outputs["curve"], provenance=ctx.provenance())
    write_values(pd.concat(tidy, ignore_index=True), ctx.outputs["values"], provenance=ctx.provenance())
    write_json(ctx.outputs["metrics"], {
        "name": name, **cfg, "parameters": param_count(drm), "train_images": len(train_ids),
        "holdout_images": len(held_ids), "calibration": calibration, "rows": rows, "examples": examples,
        "scatter": scatter, "provenance": {**ctx.provenance(), "input": seen}})
    write_dvc_files(ctx, rows, curves)
