"""The ``retrieval-tables`` stage: task-induced retrieval beside the paper's figures (App. K).

- table14: in-distribution (the training domain) — Spearman ρ per query of DRM, L2 and cosine
  against the true decoder-output distance (mean, bootstrap interval), recall@k, calibrated MAE;
- table15: the same on the other domains (cross-domain, trained on the first only), with each
  method's ρ on the first domain and how far the domain's decoder-output distances lie from the
  first's (``distance_shift``: the two-sample Kolmogorov–Smirnov statistic between the pairs
  each run samples for its scatter figure; ``distance_ratio``: the ratio of their medians);
- ablation: the DRM without regression and without distillation;
- two_stage: recall@k of a cosine shortlist reranked by DRM against full DRM search;
- figures: calibrated predicted vs true decoder distance per method; example queries with their
  top-5 by DRM and by cosine, with depth maps.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy import stats

from taskgeom.artifacts.figures import plt, save_figure, series_styles
from taskgeom.artifacts.tables import write_table
from taskgeom.data.indexed import open_named
from taskgeom.pipeline.runtime import StageContext

METHODS = ("drm", "l2", "cosine")
ABLATION = ("drm", "no_regression", "no_distillation")
SHIFT = ("rho_first_domain", "distance_shift", "distance_ratio")


def rows_of(results: list[dict]) -> pd.DataFrame:
    frames = [pd.DataFrame(r["rows"]).assign(model=r["name"], train_domain=r["domains"][0]) for r in results]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def write(ctx: StageContext, name: str, df: pd.DataFrame, caption: str) -> None:
    write_table(df, ctx.outputs[f"{name}_csv"], ctx.outputs[f"{name}_md"], ctx.outputs[f"{name}_tex"], caption,
                provenance=ctx.provenance())


def columns(df: pd.DataFrame) -> list[str]:
    keep = ["model", "domain", "method", "rho_mean", "rho_low", "rho_high", "rho_n", "mae"]
    return [c for c in keep if c in df] + recall_columns(df)


def recall_columns(df: pd.DataFrame) -> list[str]:
    return sorted((c for c in df if c.startswith("recall@")), key=lambda c: int(c.split("@")[1]))


def paper_rows(numbers: dict, cross: bool) -> pd.DataFrame:
    r = numbers["retrieval"]
    if not cross:
        return pd.DataFrame([{"model": "paper", "domain": "in-distribution", "method": m, "rho_mean": v}
                             for m, v in r["in_distribution_spearman"].items()])
    c = r["cross_dataset"]
    return pd.DataFrame([{"model": "paper", "domain": "ImageNet → NYU", "method": "drm", "rho_mean": c["drm_spearman"],
                          "mae": c["drm_mae"]},
                         {"model": "paper", "domain": "ImageNet → NYU", "method": "cosine",
                          "rho_mean": c["cosine_spearman"], "mae": c["cosine_mae"]}])


def examples_figure(ctx: StageContext, results: list[dict]) -> None:
    """Each example query with its top-5 by DRM and by cosine: RGB above, depth below."""
    res = results[0] if results else None
    domain = res["domains"][0] if res else None
    ex = res["examples"][domain] if res else []
    n_rows = max(2 * len(ex), 1)
    fig, axes = plt.subplots(n_rows, 11, figsize=(16.5, 1.6 * n_rows), squeeze=False)
    if ex:
        needed = max(max(e["query"], *e["drm"], *e["cosine"]) for e in ex) + 1
        source = open_named(res["provenance"]["input"][domain]["source"]["name"], ctx.inputs["sources"],
                            ctx.params["sources"]).first(needed)
        for k, e in enumerate(ex):
            items = [e["query"], *e["drm"], *e["cosine"]]
            labels = ["query"] + [f"DRM {i + 1}" for i in range(5)] + [f"cosine {i + 1}" for i in range(5)]
            for j, (idx, label) in enumerate(zip(items, labels)):
                item = source[idx]
                axes[2 * k][j].imshow(item.image)
                axes[2 * k][j].set_title(label, fontsize=7)
                if item.depth is not None:  # ground truth where the source has it
                    axes[2 * k + 1][j].imshow(item.depth, cmap="viridis_r")
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    save_figure(fig, ctx.outputs["retrieval_examples_png"], ctx.outputs["retrieval_examples_pdf"],
                provenance=ctx.provenance())


def paper_rho(numbers: dict, method: str, in_distribution: bool) -> float | None:
    """The paper's Spearman ρ of ``method`` (Table 14 in distribution, Table 15 across data sets)."""
    r = numbers["retrieval"]
    if in_distribution:
        return r["in_distribution_spearman"].get(method)
    return r["cross_dataset"].get(f"{method}_spearman")


def distances_figure(ctx: StageContext, results: list[dict], numbers: dict) -> None:
    """Calibrated predicted against true decoder distance per method and domain; the legend gives
    our Spearman ρ (mean over queries) beside the paper's where it reports one."""
    res = results[0] if results else None
    domains = res["domains"] if res else []
    fig, axes = plt.subplots(1, max(len(domains), 1), figsize=(4.8 * max(len(domains), 1), 4.3), squeeze=False)
    rho = {(r["domain"], r["method"]): r.get("rho_mean") for r in res["rows"]} if res else {}
    for ax, domain in zip(axes[0], domains):
        sc = res["scatter"][domain]
        for m, style in zip(METHODS, series_styles(len(METHODS))):
            ours, paper = rho.get((domain, m)), paper_rho(numbers, m, domain == domains[0])
            label = m + (f", ρ = {ours:.2f}" if ours is not None else "") + \
                (f" (paper {paper:.2f})" if paper is not None else "")
            ax.scatter(sc["true"], sc[m], s=4, alpha=0.4, label=label, color=style["color"], marker=style["marker"])
        lim = [0, max(sc["true"]) * 1.05]
        ax.plot(lim, lim, color="black", lw=0.8, label="y = x (perfect calibration)")
        ax.set_xlabel("true decoder distance (SILog between depth outputs)")
        ax.set_ylabel("predicted distance, linearly calibrated (same units)")
        ax.set_title(f"{res['name']}, {domain}{' (training domain)' if domain == domains[0] else ''}", fontsize=9)
        ax.legend(fontsize=7, markerscale=3)
    save_figure(fig, ctx.outputs["retrieval_distances_png"], ctx.outputs["retrieval_distances_pdf"],
                provenance=ctx.provenance())


def shift_columns(cross: pd.DataFrame, ind: pd.DataFrame, results: list[dict]) -> pd.DataFrame:
    """``cross`` with, per row, the method's ρ on its model's first domain (rho_first_domain) and
    the shift of the domain's decoder-output distances from the first domain's (distance_shift,
    distance_ratio; module docstring).

    Args:
        cross: the cross-domain rows (model, domain, method, rho_mean, ...).
        ind: the first-domain rows of the same models.
        results: every run's metrics (their ``scatter``: domain -> sampled true distances).

    Returns:
        A copy of ``cross`` with the three columns.
    """
    first = ind.set_index(["model", "method"])["rho_mean"]
    shift = {}
    for r in results:
        base = np.asarray(r["scatter"][r["domains"][0]]["true"])
        for domain in r["domains"][1:]:
            other = np.asarray(r["scatter"][domain]["true"])
            shift[r["name"], domain] = (float(stats.ks_2samp(base, other).statistic),
                                        float(np.median(other) / np.median(base)))
    keys = list(zip(cross["model"], cross["domain"]))
    return cross.assign(rho_first_domain=[first.get((m, k), np.nan) for m, k in zip(cross["model"], cross["method"])],
                        distance_shift=[shift[k][0] for k in keys], distance_ratio=[shift[k][1] for k in keys])


def run(ctx: StageContext) -> None:
    numbers = yaml.safe_load(ctx.inputs["paper_numbers"].read_text())
    results = [json.loads(Path(p).read_text()) for p in ctx.inputs["metrics"]]
    df = rows_of(results)
    ranked = df[df["method"].isin((*METHODS, *ABLATION))] if not df.empty else df
    ind = ranked[ranked["domain"] == ranked["train_domain"]] if not df.empty else df
    cross = ranked[ranked["domain"] != ranked["train_domain"]] if not df.empty else df
    write(ctx, "table14", pd.concat([ind[ind["method"].isin(METHODS)][columns(ind)], paper_rows(numbers, False)],
                                    ignore_index=True),
          "Table 14: in-distribution retrieval — Spearman ρ per query between each distance and the true "
          "decoder-output "
          "distance (mean, bootstrap 95% interval over queries), recall@k of the true nearest neighbours, MAE after a "
          "linear calibration on held-out training pairs; the paper's ρ below ours.")
    cross15 = shift_columns(cross[cross["method"].isin(METHODS)], ind, results) if not df.empty else df
    write(ctx, "table15", pd.concat([cross15[columns(cross15) + [c for c in SHIFT if c in cross15]],
                                     paper_rows(numbers, True)], ignore_index=True),
          "Table 15: cross-domain retrieval (trained on the first domain, queried on the others; the paper: ImageNet → "
          "NYU-Depth-V2).")
    write(ctx, "ablation", ranked[ranked["method"].isin(ABLATION)][columns(ranked)] if not df.empty else df,
          "DRM ablations: without the regression term (A and the scale stay at their initialisation) and without "
          "distillation toward the Jacobian-derived token importance.")
    staged = df[df["method"].str.contains("→") | (df["method"] == "drm")] if not df.empty else df
    write(ctx, "two_stage", staged[["model", "domain", "method", *recall_columns(df)]]
          if not df.empty else df,
          "Two-stage search: a cosine shortlist reranked by DRM, against DRM over the whole gallery (recall@k of the "
          "true nearest neighbours). Queries per second: `python benchmarks/retrieval_speed.py`.")
    distances_figure(ctx, results, numbers)
    examples_figure(ctx, results)
