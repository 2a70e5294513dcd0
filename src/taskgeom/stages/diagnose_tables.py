"""The ``diagnose-tables`` stage: the diagnostic's tables and figures from every probe's results.

- table1: κ_cap(r), CV, erank, r_0.90 (mean and bootstrap interval over images), regime and the
  architecture it calls for, with the paper's Table 1 rows beside ours (and the regime our rule
  gives the paper's own numbers).
- power_iterations: subspace-alignment error of randomized power iteration at each q (App. C.3),
  with the mean gap ratio σ_{r+p}/σ_r of its images' sketches (gap, ``stages.diagnose.power_errors``);
- output_metric: Euclidean vs SO(3)-aware output metric on the camera head — κ_cap, erank, and the
  Spearman ρ (and top-half overlap) between the two token-importance rankings e_t, per image.
- accuracy: the matrix-free diagnosis against the dense reference where a probe allows it.
- figures: normalised singular-value spectra σ_i²/‖J‖_F² and κ_cap(r) curves per probe.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import yaml

from taskgeom.artifacts.figures import PAPER_POINT, plt, save_figure, series_styles
from taskgeom.artifacts.tables import write_table
from taskgeom.diagnostics import regime
from taskgeom.evaluate.stats import spearman, summarize
from taskgeom.pipeline.runtime import StageContext

SHORT = {"depth-anything-v2": "DA-V2", "dinov2-b14": "DINOv2-B/14", "vggt": "VGGT"}   # figure labels
PAPER_OUTPUT_DIM = {"camera": 9, "cls": 768}  # the paper's M where the regime rule needs it (VGGT: one frame)


def _interval(s: dict, digits: int = 3) -> str:
    return f"[{s['low']:.{digits}g}, {s['high']:.{digits}g}]"


def table1(results: list[dict], paper: dict, regimes: dict) -> pd.DataFrame:
    rows = []
    for res in results:
        s = res["summary"]
        rows.append({
            "source": "ours", "probe": res["probe"], "model": res["model"], "decoder": res["decoder"],
            "layers": " ".join(map(str, res["layers"])), "metric": res["output_metric"],
            "N": res["tokens"], "D": res["dim"], "M": res["output_dim"], "images": res["images"],
            "kappa_cap": s["kappa_cap"]["mean"], "kappa_cap_ci": _interval(s["kappa_cap"]),
            "cv": s["cv"]["mean"], "cv_ci": _interval(s["cv"]),
            "erank": s["erank"]["mean"], "erank_ci": _interval(s["erank"]),
            "r90": s["r90"]["mean"], "r90_ci": _interval(s["r90"]),
            "regime": res["regime"], "architecture": res["architecture"],
            "products": s["products"]["mean"],
        })
    r = paper["settings"]["r"]
    for row in paper["rows"]:
        kappa, cv, erank = row["kappa_cap_20"], row["cv"], row["erank"]
        ours = regime(kappa, erank, 0, cv if cv is not None else 0.0, PAPER_OUTPUT_DIM.get(row["decoder"], 10**6),
                      r, **regimes)
        rows.append({"source": "paper", "probe": f"{row['backbone']} {row['decoder']}", "model": row["backbone"],
                     "decoder": row["decoder"], "layers": str(row["layer"]), "images": paper["settings"]["images"],
                     "kappa_cap": kappa, "cv": cv, "erank": erank,
                     "regime": row["regime"] + ("" if ours == row["regime"] else f" (our rule: {ours})")})
    return pd.DataFrame(rows)


def power_table(results: list[dict], paper: dict) -> pd.DataFrame:
    rows = []
    for res in results:
        if not res["power_table"]:
            continue
        frame = pd.DataFrame(res["power_table"])
        qs = [c for c in frame.columns if c.startswith("q") and c[1:].isdigit()]
        rows.append({"source": "ours", "probe": res["probe"], "reference": frame["reference"].iloc[0],
                     "images": len(frame),  # rounding can leave 1 − alignment a hair below 0
                     **{f"error_{c}": float(frame[c].clip(lower=0).mean()) for c in qs},
                     **({"gap": float(frame["gap"].mean())} if "gap" in frame else {})})
    for name, errors in paper.items():
        rows.append({"source": "paper", "probe": name, **{f"error_q{q}": v for q, v in errors.items()}})
    return pd.DataFrame(rows)


def output_metric_table(results: list[dict], arrays: dict[str, Path], paper: dict, boot: dict) -> pd.DataFrame:
    """Pairs of probes that differ only in their output metric (euclidean vs so3)."""
    key = lambda r: (r["model"], r["decoder"], tuple(r["layers"]))
    euclid = {key(r): r for r in results if r["output_metric"] == "euclidean"}
    rows = []
    for so3 in (r for r in results if r["output_metric"] == "so3"):
        base = euclid.get(key(so3))
        if base is None:
            continue
        with h5py.File(arrays[base["probe"]], "r") as a, h5py.File(arrays[so3["probe"]], "r") as b:
            e_a, e_b = a["token_energy"][:], b["token_energy"][:]
        n = min(len(e_a), len(e_b))
        rho = [spearman(e_a[i], e_b[i]) for i in range(n)]
        half = e_a.shape[1] // 2
        top = [len(set(np.argsort(-e_a[i])[:half]) & set(np.argsort(-e_b[i])[:half])) / half for i in range(n)]
        rho_s = summarize([x for x in rho if np.isfinite(x)], **boot)
        rows.append({"source": "ours", "probes": f"{base['probe']} vs {so3['probe']}",
                     "kappa_cap_euclidean": base["summary"]["kappa_cap"]["mean"],
                     "kappa_cap_so3": so3["summary"]["kappa_cap"]["mean"],
                     "erank_euclidean": base["summary"]["erank"]["mean"], "erank_so3": so3["summary"]["erank"]["mean"],
                     "spearman_rho": rho_s.mean, "spearman_rho_ci": f"[{rho_s.low:.3g}, {rho_s.high:.3g}]",
                     "top_half_agreement": float(np.mean(top)), "images": n})
    rows.append({"source": "paper", "probes": "VGGT camera: Euclidean vs SO(3)", "kappa_cap_so3": paper["kappa_cap"],
                 "spearman_rho": paper["ranking_spearman_vs_euclidean"], "top50_agreement": paper["top50_agreement"]})
    return pd.DataFrame(rows)


def accuracy_table(results: list[dict]) -> pd.DataFrame:
    rows = []
    for res in results:
        if not res["dense"]:
            continue
        frame = pd.DataFrame(res["dense"])
        rows.append({"probe": res["probe"], "images": len(frame),
                     "max_kappa_abs_error": frame["kappa_abs"].max(), "max_erank_rel_error": frame["erank_rel"].max(),
                     "max_cv_rel_error": frame["cv_rel"].max(), "max_r90_abs_error": int(frame["r90_abs"].max()),
                     "max_frob2_rel_error": frame["frob2_rel"].max(),
                     "exact_kappa_cap": frame["exact_kappa"].mean(), "exact_erank": frame["exact_erank"].mean(),
                     "exact_r90": frame["exact_r90"].mean()})
    columns = ["probe", "images", "max_kappa_abs_error", "max_erank_rel_error", "max_cv_rel_error",
               "max_r90_abs_error", "max_frob2_rel_error", "exact_kappa_cap", "exact_erank", "exact_r90"]
    return pd.DataFrame(rows, columns=columns)


def paper_kappa_labels(paper: dict, close: float = 0.05) -> list[tuple[float, str]]:
    """Where to write the names of the paper's Table 1 rows beside their κ_cap(r): rows closer
    than ``close`` share one multi-line label at their mean κ. (κ, label) pairs."""
    groups: list[list[dict]] = []
    for row in sorted(paper["rows"], key=lambda r: r["kappa_cap_20"]):
        if groups and row["kappa_cap_20"] - groups[-1][0]["kappa_cap_20"] < close:
            groups[-1].append(row)
        else:
            groups.append([row])
    name = lambda r: f"{SHORT.get(r['backbone'], r['backbone'])} {r['decoder']} L{r['layer']}"
    return [(float(np.mean([r["kappa_cap_20"] for r in g])), "\n".join(name(r) for r in g)) for g in groups]


def figures(results: list[dict], arrays: dict[str, Path], outputs: dict[str, Path], provenance: dict,
            paper: dict) -> None:
    """Spectra and κ_cap(r) curves, one colour and marker per probe; the paper's κ_cap(r) at its r
    (Table 1) as black stars. The paper reports no spectra."""
    fig_s, ax_s = plt.subplots(figsize=(7.5, 4.8))
    fig_k, ax_k = plt.subplots(figsize=(7.5, 4.8))
    for res, style in zip(results, series_styles(len(results))):
        with h5py.File(arrays[res["probe"]], "r") as f:
            sigma, frob2, curves = f["sigma"][:], f["frob2"][:], f["kappa_curve"][:]
        share = (sigma ** 2 / frob2[:, None]).mean(0)     # σ_i² / ‖J‖_F², mean over images
        i = np.arange(1, len(share) + 1)
        ax_s.semilogy(i, np.maximum(share, 1e-12), ms=3, lw=1, label=res["probe"], **style)
        ax_k.plot(i, curves.mean(0), ms=3, lw=1, label=res["probe"], **style)
        ax_k.fill_between(i, curves.min(0), curves.max(0), color=style["color"], alpha=0.12)
    r = paper["settings"]["r"]
    ax_k.plot([r] * len(paper["rows"]), [row["kappa_cap_20"] for row in paper["rows"]], **PAPER_POINT,
              label=f"paper κ_cap({r}), Table 1")
    for kappa, label in paper_kappa_labels(paper):
        ax_k.annotate(label, (r, kappa), xytext=(8, 0), textcoords="offset points", fontsize=6, va="center")
    ax_s.set(xlabel="mode index i (singular values in descending order)",
             ylabel="σ_i² / ‖J‖_F²  (share of sensitivity; mean over images)",
             title="Singular-value spectra of the probes (the paper reports none)")
    ax_k.set(xlabel="rank r (number of top singular modes)", ylabel="κ_cap(r)  (share of ‖J‖_F² captured)",
             title="Captured sensitivity κ_cap(r) (band: min–max over images)", ylim=(0, 1.02),
             xlim=(0, r * 1.45))
    ax_k.axhline(0.9, color="grey", lw=0.8, ls=":", label="κ_cap = 0.90 (defines r_0.90)")
    for ax in (ax_s, ax_k):
        ax.legend(fontsize=6, ncol=2, loc="lower right" if ax is ax_k else "upper right")
    save_figure(fig_s, outputs["spectra_png"], outputs["spectra_pdf"], provenance=provenance)
    save_figure(fig_k, outputs["kappa_curves_png"], outputs["kappa_curves_pdf"], provenance=provenance)


def run(ctx: StageContext) -> None:
    results = [json.loads(Path(p).read_text()) for p in ctx.inputs["summaries"]]
    arrays = {Path(p).stem: Path(p) for p in ctx.inputs["arrays"]}
    numbers = yaml.safe_load(ctx.inputs["paper_numbers"].read_text())
    paper1 = numbers["diagnostic_table1"]
    settings = ctx.params["diagnose"]
    regimes, boot, est = settings["regimes"], settings["bootstrap"], settings["estimator"]
    caption = (f"r = {est['r']}, num_probes = {est['num_probes']}, q = {est['power_iters']}; "
               "mean over images with a bootstrap 95% interval")
    tables = {
        "table1": (table1(results, paper1, regimes), f"Table 1: the tractability diagnostic ({caption})."),
        "power_iterations": (power_table(results, numbers["power_iteration_alignment_error"]),
                             "Subspace-alignment error 1 − ‖VᵀV̂‖_F²/r of randomized power iteration at q (App. C.3)."),
        "output_metric": (output_metric_table(results, arrays, paper1["extra"]["output_metric_so3_camera"], boot),
                          "Camera head: Euclidean vs SO(3)-aware output metric; ρ between the token rankings e_t."),
        "accuracy": (accuracy_table(results), "Matrix-free diagnose against the dense reference (worst image)."),
    }
    for name, (df, cap) in tables.items():
        write_table(df, ctx.outputs[f"{name}_csv"], ctx.outputs[f"{name}_md"], ctx.outputs[f"{name}_tex"], caption=cap,
                    provenance=ctx.provenance())
    figures(results, arrays, ctx.outputs, ctx.provenance(), paper1)
