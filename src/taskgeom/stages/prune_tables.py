"""The ``prune-tables`` stage: token merging and pruning results beside the paper's figures.

- table2: CLS degradation ×100 (random, ToMe score, importance) and dense additional SILog ×100
  (single stage, LLF) at the base domain and resolution, mean over seeds (paper Table 2), with the
  Wilcoxon p of importance against each baseline;
- resolutions: dense additional SILog per schedule at every resolution, and importance's relative
  reduction against ToMe scoring (paper Tables 4, 5);
- schedules: 1 / 2 / 4 stages, LLF on and off, at the base setting (App. E.1);
- second_domain: both tasks on the sketch renders (the ImageNet-Sketch role, App. G);
- baselines: every method (EViT and ToMe merging included) on both tasks (paper Table 12);
- accuracy: weighted k-NN top-1 of the pruned CLS embedding (App. H);
- speed: FLOPs saved and wall-clock speedup against the unpruned model (§7.3, App. D);
- figures: degradation against η per method; importance and ToMe score maps beside the depth
  output, each with its Spearman ρ against the Jacobian-derived target (paper Figure 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from taskgeom.artifacts.atomic import write_text
from taskgeom.artifacts.figures import PAPER, plt, save_figure, series_styles
from taskgeom.artifacts.tables import ALPHA, add_effects, comparison, read_table, write_table
from taskgeom.data.indexed import open_named
from taskgeom.pipeline.runtime import StageContext
from taskgeom.prune.methods import METHODS, NAMES

TABLE2_METHODS = ("random", "tome_score", "importance")
TABLE2_REFERENCE = ("tome",)  # shown in Table 2 as a labelled reference line, not one of its columns
METHOD_ORDER = NAMES
METHOD_LABELS = {m.name: m.label for m in METHODS.values()}  # tables' and figures' names; CSVs keep the names
STYLE = dict(zip(METHOD_ORDER, series_styles(len(METHOD_ORDER))))
SETTING = ("part", "source", "model", "domain", "resolution", "schedule", "llf", "metric", "ratio")
EFFECT_COLUMNS = ("importance_mean", "importance_minus_method", "importance_over_method", "verdict")
COMPARED = (f"Lower is better: importance − baseline < 0 (importance / baseline < 1) favours importance; the "
            f"verdict reads the two-sided Wilcoxon signed-rank test, paired by image, at α = {ALPHA:g}")


def read_all(paths: list[Path]) -> pd.DataFrame:
    frames = [read_table(p) for p in paths]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def label(method: str) -> str:
    """The name tables and figures give ``method`` (``METHOD_LABELS``; other names as they are)."""
    return METHOD_LABELS.get(method, method)


def labelled(df: pd.DataFrame, column: str = "method") -> pd.DataFrame:
    """``df`` with ``column`` (the machine method names) replaced by their labels, for display."""
    return df.assign(**{column: df[column].map(label)}) if column in df else df


def ordered(df: pd.DataFrame, order: tuple[str, ...] = METHOD_ORDER) -> pd.DataFrame:
    rank = {m: i for i, m in enumerate(order)}
    keys = [c for c in ("part", "source", "model", "resolution", "schedule", "_o") if c in df or c == "_o"]
    return df.assign(_o=df["method"].map(rank)).sort_values(keys, kind="stable").drop(columns="_o")


def pivot(df: pd.DataFrame, index: list[str], value: str = "mean") -> pd.DataFrame:
    """Rows ``index``, one column per ratio η."""
    out = df.pivot_table(index=index, columns="ratio", values=value, aggfunc="first", sort=False)
    out = out[sorted(out.columns)]
    out.columns = [f"η={c:g}" for c in out.columns]
    return out.reset_index()


def effects(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with importance's signed effect against each method in its setting and the verdict
    (``artifacts.tables.add_effects``); the difference is the mean paired difference."""
    return add_effects(df, [c for c in SETTING if c in df]) if not df.empty else df


def markdown(sections: list[tuple[str, pd.DataFrame]]) -> str:
    """One ``### title`` (its first line; the rest a paragraph) and table per section."""
    return "\n\n".join(f"### {title}\n\n{df.to_markdown(index=False, floatfmt='.4g')}" for title, df in sections) + "\n"


def write(ctx: StageContext, name: str, long: pd.DataFrame, sections: list[tuple[str, pd.DataFrame]],
          caption: str) -> None:
    """CSV (long, the source of truth), Markdown (one pivot per section), LaTeX (the first pivot)."""
    write_table(long, ctx.outputs[f"{name}_csv"], provenance=ctx.provenance())
    write_text(ctx.outputs[f"{name}_md"], f"{caption}\n\n" + markdown(sections), ctx.provenance())
    first = sections[0][1] if sections else long
    write_text(ctx.outputs[f"{name}_tex"], first.to_latex(index=False, float_format=lambda x: f"{x:.4g}",
                                                          caption=caption, escape=True), ctx.provenance())


def token_redundancy(ctx: StageContext, summaries: dict[str, list[dict]]) -> None:
    """Each model's share of near-duplicate token pairs at its pruning layer (``prune/redundancy.py``)."""
    rows = [{"model": s["model"], "part": part, **s["near_duplicate_keys"]}
            for part, group in summaries.items() for s in group]
    write_table(pd.DataFrame(rows, columns=["model", "part", "layer", "threshold", "share"]),
                ctx.outputs["token_redundancy_csv"], ctx.outputs["token_redundancy_md"],
                ctx.outputs["token_redundancy_tex"], provenance=ctx.provenance(),
                caption="Share of patch-token pairs whose attention keys (ToMe's similarity) have cosine above the "
                        "threshold at each model's pruning layer, over the first domain's base-resolution images.")


def base_rows(df: pd.DataFrame, base_res: int, domain: str = "rgb") -> pd.DataFrame:
    return df[(df["domain"] == domain) & (df["resolution"] == base_res)]


def paper_table2(numbers: dict) -> pd.DataFrame:
    t2 = numbers["pruning_table2"]
    rows = []
    for part, key, model in (("cls", "cls_cosine_degradation_x100_dinov2_b14", "dinov2-b14"),
                             ("dense", "dpt_additional_silog_x100_depth_anything_v2_single_stage",
                              "depth-anything-v2")):
        for method, values in t2[key].items():
            rows += [{"part": part, "source": "paper", "model": model, "method": method, "ratio": r, "mean": v}
                     for r, v in zip(t2["ratios"], values)]
    return pd.DataFrame(rows)


TABLE2_CAPTION = (f"{label('tome_score')} is ToMe's key-similarity score inside the same hard reduction, as in the "
                  f"paper's Table 2; {label('tome')} is ToMe's own soft merging, a reference line the paper's "
                  "Table 2 does not report.")


def table2_rows(cls: pd.DataFrame, dense: pd.DataFrame, base_res: int) -> pd.DataFrame:
    """Our Table 2 rows: CLS degradation and single-stage + LLF additional SILog at the base
    domain and resolution, for ``TABLE2_METHODS`` and the ``TABLE2_REFERENCE`` lines (ToMe's
    merging) where the run has them, in that order within each model; source "ours"."""
    shown = (*TABLE2_METHODS, *TABLE2_REFERENCE)
    ours = []
    if not cls.empty:
        c = base_rows(cls, base_res)
        ours.append(c[(c["metric"] == "cls_degradation") & c["method"].isin(shown)].assign(part="cls"))
    if not dense.empty:
        d = base_rows(dense, base_res)
        ours.append(d[(d["metric"] == "add_silog") & (d["schedule"] == "1-stage") & d["llf"]
                      & d["method"].isin(shown)].assign(part="dense"))
    return ordered(pd.concat(ours, ignore_index=True), shown).assign(source="ours") if ours else pd.DataFrame()


def table2(ctx, cls: pd.DataFrame, dense: pd.DataFrame, numbers: dict, base_res: int) -> pd.DataFrame:
    ours = table2_rows(cls, dense, base_res)
    ours = effects(ours) if not ours.empty else ours
    long = pd.concat([ours, paper_table2(numbers)], ignore_index=True)
    keep = [c for c in ("part", "source", "model", "method", "ratio", "mean", "std_seeds", "ci_low", "ci_high",
                        "p_vs_importance", "sd_diff_vs_importance", *EFFECT_COLUMNS, "images") if c in long]
    long = long[keep]
    sections = []
    for part, title in (("cls", "CLS degradation ×100 (lower is better)"),
                        ("dense", "Dense additional SILog ×100, single stage + LLF (lower is better)")):
        sub = long[long["part"] == part]
        if sub.empty:
            continue
        sections.append((title, pivot(labelled(sub), ["source", "model", "method"])))
        ours_part = sub[sub["source"] == "ours"]
        if "verdict" in ours_part and (ours_part["verdict"].fillna("") != "").any():
            sections.append((f"{title.split(' ×')[0]}: importance vs each baseline, paired by image\n\n{COMPARED}.",
                             comparison(labelled(ours_part), ["model"])))
    write(ctx, "table2", long, sections,
          f"Table 2: our zoo at the base domain and resolution ({base_res} px), mean over seeds, beside the paper's "
          f"(ImageNet-val @ 224, DINOv2-B/14 CLS and Depth-Anything-V2). {TABLE2_CAPTION}")
    return long


def relative_reduction(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """1 − importance / tome_score per group (positive: importance removes that share of ToMe scoring's error)."""
    wide = df.pivot_table(index=[*keys, "ratio"], columns="method", values="mean", sort=False)
    if not {"importance", "tome_score"} <= set(wide.columns):
        return pd.DataFrame()
    out = (1.0 - wide["importance"] / wide["tome_score"]).rename("mean").reset_index()
    return out.assign(method=f"reduction vs {label('tome_score')} (> 0: importance better)")


def resolutions(ctx, dense: pd.DataFrame, numbers: dict) -> None:
    d = (dense[(dense["metric"] == "add_silog") & dense["llf"] & (dense["domain"] == "rgb")]
         if not dense.empty else dense)
    long = effects(ordered(d)) if not d.empty else d
    sections = []
    if not d.empty:
        for schedule, sub in d.groupby("schedule", sort=False):
            sub = ordered(sub)
            body = pivot(labelled(sub), ["model", "resolution", "method"])
            red = relative_reduction(sub, ["model", "resolution"])
            if not red.empty:
                body = pd.concat([body, pivot(red, ["model", "resolution", "method"])], ignore_index=True)
            sections.append((f"{schedule} + LLF: additional SILog ×100 per resolution", body))
    nyu = numbers["pruning_table2"]["nyu_two_stage_reduction_vs_tome"]
    write(ctx, "resolutions", long, sections,
          "Tables 4–5: dense pruning at every resolution (base, 1.5×, 2×). The paper: single-stage importance "
          "loses to ToMe at η = 0.5 at 448; the 2-stage schedule cuts ToMe scoring's error by "
          f"{nyu[0]:.0%}–{nyu[1]:.0%} on NYU at every ratio and resolution.")


def schedules(ctx, dense: pd.DataFrame, base_res: int) -> None:
    d = base_rows(dense, base_res) if not dense.empty else dense
    d = d[d["metric"] == "add_silog"] if not d.empty else d
    long = effects(ordered(d)) if not d.empty else d
    sections = [("Additional SILog ×100 per schedule, LLF on and off",
                 pivot(labelled(long), ["model", "schedule", "llf", "method"]))] \
        if not d.empty else []
    if not d.empty:
        red = relative_reduction(d, ["model", "schedule", "llf"])
        if not red.empty:
            sections.append(("Importance's reduction of ToMe scoring's error",
                             pivot(red, ["model", "schedule", "llf"])))
    write(ctx, "schedules", long, sections,
          f"Pruning schedules (1, 2, 4 stages) with and without Last-Layer Fusion at {base_res} px (App. E.1).")


def second_domain(ctx, cls: pd.DataFrame, dense: pd.DataFrame, numbers: dict, base_res: int) -> None:
    parts = []
    if not cls.empty:
        c = base_rows(cls, base_res, "sketch")
        parts.append(c[c["metric"] == "cls_degradation"].assign(part="cls"))
    if not dense.empty:
        d = base_rows(dense, base_res, "sketch")
        parts.append(d[(d["metric"] == "add_silog") & d["llf"]].assign(part="dense"))
    long = effects(ordered(pd.concat(parts, ignore_index=True))) if parts else pd.DataFrame()
    sk = numbers["clip_cls_pruning"]["imagenet_sketch"]
    paper = pd.DataFrame([{"part": "cls", "source": "paper", "model": "clip-b16", "method": m, "ratio": r,
                           "mean": sk[k][m]}
                          for k, r in (("eta_0_05", 0.05), ("eta_0_5", 0.5)) for m in ("tome_score", "importance")])
    sections = []
    if not long.empty:
        long = long.assign(source="ours")
        sections.append(("CLS degradation ×100 on the sketch domain",
                         pivot(labelled(pd.concat([long[long["part"] == "cls"], paper], ignore_index=True)),
                               ["source", "model", "method"])))
        dsub = long[long["part"] == "dense"]
        if not dsub.empty:
            sections.append(("Dense additional SILog ×100 on the sketch domain, per schedule",
                             pivot(labelled(dsub), ["model", "schedule", "method"])))
    write(ctx, "second_domain", pd.concat([long, paper], ignore_index=True), sections,
          "The second domain (line-drawing renders, the ImageNet-Sketch role, App. G), beside the paper's CLIP "
          "ViT-B/16 on ImageNet-Sketch.")


def baselines(ctx, cls: pd.DataFrame, dense: pd.DataFrame, base_res: int) -> None:
    parts = []
    if not cls.empty:
        c = base_rows(cls, base_res)
        parts.append(c[c["metric"] == "cls_degradation"].assign(part="cls", schedule="-"))
    if not dense.empty:
        d = base_rows(dense, base_res)
        parts.append(d[(d["metric"] == "add_silog") & d["llf"]].assign(part="dense"))
    long = effects(ordered(pd.concat(parts, ignore_index=True))) if parts else pd.DataFrame()
    sections = []
    if not long.empty:
        sections.append(("Every method, lower is better",
                         pivot(labelled(long), ["part", "model", "schedule", "method"])))
        sections.append((f"Importance vs each baseline, paired by image\n\n{COMPARED}.",
                         comparison(labelled(long), ["part", "model", "schedule"])))
    write(ctx, "baselines", long, sections,
          "Table 12: every baseline (random, ToMe scoring, EViT, ToMe merging) against importance at the base "
          "setting. The paper: importance best or tied with EViT at every ratio; both beat ToMe scoring.")


def accuracy(ctx, cls: pd.DataFrame, summaries: list[dict], numbers: dict, base_res: int) -> None:
    c = base_rows(cls, base_res) if not cls.empty else cls
    long = ordered(c[c["metric"] == "knn_top1"]) if not c.empty else c
    unpruned = pd.DataFrame([{"model": s["model"], "method": "unpruned", "ratio": r, "mean": s["knn_top1_unpruned"]}
                             for s in summaries for r in sorted(long["ratio"].unique())]) \
        if not long.empty else pd.DataFrame()
    knn = numbers["classification_knn_top1"]
    paper = pd.DataFrame([{"model": "paper dinov2-b14", "method": m, "ratio": 0.5, "mean": v}
                          for m, v in (("unpruned", knn["unpruned"]), ("importance", knn["importance_eta_0_5"]),
                                       ("tome_score", knn["tome_eta_0_5"]))])
    both = pd.concat([long, unpruned, paper], ignore_index=True)
    sections = [("Weighted k-NN top-1 of the CLS embedding", pivot(labelled(both), ["model", "method"]))] \
        if not long.empty else []
    write(ctx, "accuracy", both, sections,
          "k-NN top-1 accuracy after token reduction (App. H; the paper: 0.66–0.68 for every method and ratio, "
          "0.674 unpruned, on ImageNet-val).")


def speed(ctx, paths: list[Path], numbers: dict) -> None:
    long = read_all(paths)
    sections = []
    if not long.empty:
        long = ordered(long)
        sections.append(("Wall-clock speedup against the unpruned model (× , higher is faster)",
                         pivot(labelled(long), ["model", "resolution", "schedule", "method"], "speedup")))
        sections.append(("Theoretical FLOPs saved (share of the unpruned model's)",
                         pivot(labelled(long), ["model", "resolution", "schedule", "method"], "flops_saved")))
    s = numbers["speed"]
    write(ctx, "speed", long, sections,
          f"Cost of pruning, scoring and reinsertion included, batch of "
          f"{int(long['batch'].iloc[0]) if not long.empty else 0} "
          f"images on {long['machine'].iloc[0] if not long.empty else '-'}. The paper (A40): at 224, η = 0.2 saves "
          f"{s['res_224_eta_0_2']['flops_saved']:.1%} of FLOPs at "
          f"{s['res_224_eta_0_2']['wallclock_speedup']}× speed; at "
          f"448, {s['res_448']['flops_saved']:.1%} at {s['res_448']['wallclock_speedup']}× "
          f"(ToMe {s['res_448']['tome_speedup']}×).")


def degradation_panels(cls: pd.DataFrame, dense: pd.DataFrame, numbers: dict, base_res: int) -> list[tuple]:
    """(title, y label, our rows, the paper's rows or None) per panel: CLS per model, dense per
    model and schedule; the paper's Table 2 curves beside its CLS and single-stage dense panels."""
    paper = paper_table2(numbers)
    panels = []
    if not cls.empty:
        c = base_rows(cls, base_res)
        for model, sub in c[c["metric"] == "cls_degradation"].groupby("model", sort=False):
            panels.append((f"{model}: CLS merging", "CLS degradation ×100 = 100·(1 − cos)", sub,
                           paper[paper["part"] == "cls"]))
    if not dense.empty:
        d = base_rows(dense, base_res)
        d = d[(d["metric"] == "add_silog") & d["llf"]]
        for (model, schedule), sub in d.groupby(["model", "schedule"], sort=False):
            panels.append((f"{model}: {schedule} prune + LLF", "additional SILog ×100 vs unpruned depth", sub,
                           paper[paper["part"] == "dense"] if schedule == "1-stage" else None))
    return panels


def degradation_figure(ctx, cls: pd.DataFrame, dense: pd.DataFrame, numbers: dict, base_res: int) -> None:
    """Degradation against η per method (band: bootstrap 95% interval over images), the paper's
    Table 2 values dashed in the same colour where it reports that setting."""
    panels = degradation_panels(cls, dense, numbers, base_res)
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(4.4 * max(len(panels), 1), 3.9), squeeze=False)
    for ax, (title, ylabel, sub, paper) in zip(axes[0], panels):
        for method in METHOD_ORDER:
            m, style = sub[sub["method"] == method].sort_values("ratio"), STYLE[method]
            if not m.empty:
                ax.plot(m["ratio"], m["mean"], ms=4, label=f"ours: {label(method)}", **style,
                        lw=2.2 if method == "importance" else 1.2)
                ax.fill_between(m["ratio"], m["ci_low"], m["ci_high"], color=style["color"], alpha=0.15)
            pm = paper[paper["method"] == method] if paper is not None else pd.DataFrame()
            if not pm.empty:
                ax.plot(pm["ratio"], pm["mean"], **{**PAPER, "color": style["color"]}, marker="*", ms=6,
                        label=f"paper ({pm['model'].iloc[0]}): {label(method)}")
        if "CLS" in ylabel and (sub["mean"] > 0).any():   # spans orders of magnitude; η = 0 (no change) masked
            ax.set_yscale("log", nonpositive="mask")
            shown = pd.concat([sub["mean"], paper["mean"] if paper is not None else pd.Series(dtype=float)])
            ax.set_ylim(bottom=shown[shown > 0].min() / 5)
            ylabel += ", log scale"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("pruning ratio η (share of patch tokens removed)")
        ax.set_ylabel(ylabel + " (lower is better)", fontsize=8)
        ax.legend(fontsize=6)
    save_figure(fig, ctx.outputs["prune_degradation_png"], ctx.outputs["prune_degradation_pdf"],
                provenance=ctx.provenance())


def maps_figure(ctx, summaries: list[dict], numbers: dict) -> None:
    """Paper Figure 2: input, importance head, ToMe score, predicted depth; ρ against the target
    (the paper's DPT-depth importance head reaches ρ ≈ 0.20)."""
    examples = [s for s in summaries if s.get("examples")]
    ex = examples[0]["examples"] if examples else None
    n = len(ex["importance"]) if ex else 1
    fig, axes = plt.subplots(4, n, figsize=(2.3 * n, 9.0), squeeze=False)
    if ex:  # the first images of the first setting (the first domain at the base resolution)
        name = next(iter(examples[0]["provenance"]["input"].values()))["source"]["name"]
        source = open_named(name, ctx.inputs["sources"], ctx.params["sources"])
        rgb = [source[j].image for j in range(n)]
        rows, cols = ex["grid"]
        for j in range(n):
            axes[0][j].imshow(rgb[j])
            for i, key in ((1, "importance"), (2, "tome_score")):
                axes[i][j].imshow(np.asarray(ex[key][j]).reshape(rows, cols), cmap="magma")
                axes[i][j].set_title(f"ρ = {ex['rho'][key][j]:.2f}", fontsize=8)
            axes[3][j].imshow(np.asarray(ex["depth"][j]), cmap="viridis_r")
        for i, name in enumerate(("input", f"importance (L{ex['layer']})", label("tome_score"), "depth")):
            axes[i][0].set_ylabel(name, fontsize=9)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    paper = numbers["importance_head"]["spearman_dpt_depth_spectral_target"]["value"]
    fig.suptitle(f"ρ: Spearman rank correlation of the map with the Jacobian-derived token importance e_t\n"
                 f"(paper, DPT depth head: ρ ≈ {paper:.2f}); predicted depth: brighter is nearer", fontsize=8)
    save_figure(fig, ctx.outputs["prune_maps_png"], ctx.outputs["prune_maps_pdf"], provenance=ctx.provenance())


def run(ctx: StageContext) -> None:
    numbers = yaml.safe_load(ctx.inputs["paper_numbers"].read_text())
    cls, dense = read_all(ctx.inputs["cls"]), read_all(ctx.inputs["dense"])
    cls_summaries = [json.loads(Path(p).read_text()) for p in ctx.inputs["cls_summary"]]
    dense_summaries = [json.loads(Path(p).read_text()) for p in ctx.inputs["dense_summary"]]
    base_res = int(min(pd.concat([cls.get("resolution", pd.Series(dtype=int)),
                                  dense.get("resolution", pd.Series(dtype=int))]), default=0))
    table2(ctx, cls, dense, numbers, base_res)
    resolutions(ctx, dense, numbers)
    schedules(ctx, dense, base_res)
    second_domain(ctx, cls, dense, numbers, base_res)
    baselines(ctx, cls, dense, base_res)
    accuracy(ctx, cls, cls_summaries, numbers, base_res)
    speed(ctx, ctx.inputs["speed"], numbers)
    degradation_figure(ctx, cls, dense, numbers, base_res)
    maps_figure(ctx, dense_summaries, numbers)
    token_redundancy(ctx, {"cls": cls_summaries, "dense": dense_summaries})
