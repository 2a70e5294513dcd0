"""The ``metric-tables`` stage: what learning the metric achieved, beside the paper's figures.

- importance: Spearman ρ of each probe's importance head against its target on held-out images
  (mean ± std over seeds, bootstrap interval), its untrained floor, its size (paper §5.5, App. F);
  beside it, what the targets leave to learn: the per-image ρ between the spectral and the
  block-norm target (targets_rho) and the slot's share of the target's rank variance;
- head_ablations: every head that differs from its probe's first head in one setting (target
  type, w_rank, training-set size, width, attention heads), beside that first head;
- table13: SPN subspace alignment V1 on held-out images per supervision — random init, exact
  spectral, RandNLA at q = 1 and at params' q (paper Table 13);
- vae: the diagnostic of the latent probe against the original probe, and the reconstruction
  quality of the task output (paper §6);
- figures: predicted vs target importance maps over a few held-out images per probe, and the
  training curves of every head (first seed), SPN and VAE.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from taskgeom.artifacts.figures import plt, save_figure, series_styles
from taskgeom.artifacts.tables import read_table, write_table
from taskgeom.data.indexed import open_named
from taskgeom.data.sources import first_view
from taskgeom.pipeline.runtime import StageContext

ABLATION_KEYS = ("target", "w_rank", "train_images", "width", "heads", "layers", "steps")


def _ci(s: dict) -> str:
    return f"[{s['low']:.3g}, {s['high']:.3g}]"


def base_heads(heads: list[dict]) -> dict[str, dict]:
    """probe -> its first head (in params order): the reference its ablations are read against."""
    base: dict[str, dict] = {}
    for h in heads:
        base.setdefault(h["probe"], h)
    return base


def ablation_of(head: dict, base: dict) -> str | None:
    """The one setting in which ``head`` differs from ``base`` (None: it is the base, or differs in more)."""
    diff = [k for k in ABLATION_KEYS if head[k] != base[k]]
    return diff[0] if len(diff) == 1 else None


def paper_rho(numbers: dict, head: dict) -> float | None:
    ih = numbers["importance_head"]
    if head["probe"].startswith("cls"):
        return ih["spearman_dinov2_cls_l10"]["mean"] if head["target"] == "spectral" else None
    if "depth" in head["probe"]:
        return ih[f"spearman_dpt_depth_{'spectral' if head['target'] == 'spectral' else 'block_norm'}_target"]["value"]
    return None


def head_row(h: dict) -> dict:
    rho = h["summary"]["rho_test"]
    row = {"head": h["head"], "probe": h["probe"], "target": h["target"], "w_rank": h["w_rank"],
           "train_images": h["train_images"], "width": h["width"], "heads": h["heads"], "parameters": h["parameters"],
           "seeds": len(h["seeds_detail"]), "rho": rho["mean"], "rho_std": rho["std"], "rho_ci": _ci(rho),
           "rho_untrained": h["summary"]["rho_random_init"]["mean"], "rho_position_only": h["rho_mean_map"]["mean"],
           "targets_rho": h["targets_agreement"]["mean"], "targets_rho_ci": _ci(h["targets_agreement"]),
           "position_share": h["position_share"]}
    if "rho_test_vs_exact" in h["summary"]:
        row["rho_vs_exact_target"] = h["summary"]["rho_test_vs_exact"]["mean"]
    return row


def importance_table(heads: list[dict], numbers: dict) -> pd.DataFrame:
    base = base_heads(heads)
    rows = []
    for h in heads:
        if h is base[h["probe"]] or ablation_of(h, base[h["probe"]]) == "target":
            rows.append({"source": "ours", **head_row(h), "paper_rho": paper_rho(numbers, h)})
    rows.append({"source": "paper", "head": "importance head", "probe": "dinov2-b14 cls L10", "target": "spectral",
                 "parameters": numbers["importance_head"]["params"],
                 "rho": numbers["importance_head"]["spearman_dinov2_cls_l10"]["mean"],
                 "rho_std": numbers["importance_head"]["spearman_dinov2_cls_l10"]["std"]})
    for target in ("spectral", "block_norm"):
        rows.append({"source": "paper", "head": "importance head", "probe": "dpt depth", "target": target,
                     "rho": numbers["importance_head"][f"spearman_dpt_depth_{target}_target"]["value"]})
    return pd.DataFrame(rows)


def ablation_table(heads: list[dict], numbers: dict) -> pd.DataFrame:
    base = base_heads(heads)
    rows = []
    for h in heads:
        key = ablation_of(h, base[h["probe"]])
        if key is None:
            continue
        b = base[h["probe"]]
        for member, label in ((b, "base"), (h, "variant")):
            rows.append({"ablation": key, "role": label, "value": member[key], **head_row(member)})
    if not rows:  # no head differs from its probe's first head in exactly one setting
        return pd.DataFrame(columns=["ablation", "role", "value", "head", "probe", "rho"])
    df = pd.DataFrame(rows).drop_duplicates(subset=["ablation", "head"])
    df["_number"] = pd.to_numeric(df["value"], errors="coerce")
    df = df.sort_values(["probe", "ablation", "_number"], kind="stable").drop(columns="_number")
    paper = numbers["importance_head"]
    df["paper_grid"] = df["ablation"].map({"w_rank": str(paper["ablation_rank_loss_weights"]),
                                           "width": str(paper["ablation_hidden_widths"]),
                                           "heads": str(paper["ablation_attention_heads"])})
    return df


def table13(spns: list[dict], numbers: dict) -> pd.DataFrame:
    rows = []
    for s in spns:
        floor = s["summary"]["random-init"]["mean"]
        best = s["summary"].get("exact", {}).get("mean")
        for sup, summ in s["summary"].items():
            rows.append({"source": "ours", "probe": s["probe"], "supervision": sup, "reference": s["reference"],
                         "rank": s["rank"], "input_dim": s["tokens"] * s["dim"],
                         "v1": summ["mean"], "v1_std": summ["std"], "v1_ci": _ci(summ),
                         "x_random_floor": summ["mean"] / floor if floor > 0 else math.nan,
                         "share_of_exact": summ["mean"] / best if best else math.nan, "seeds": summ["n"]})
    paper = numbers["spn_vae_table13"]
    for sup, key in (("random-init", "random_init"), ("exact", "spectral_supervision"), ("q1", "randnla_q1")):
        rows.append({"source": "paper", "probe": "vggt depth, VAE latent", "supervision": sup, "reference": "exact",
                     "input_dim": paper["vae"]["latent_dim"], "v1": paper[key],
                     "x_random_floor": paper[key] / paper["random_init"],
                     "share_of_exact": paper[key] / paper["spectral_supervision"]})
    return pd.DataFrame(rows)


def vae_table(vaes: dict[str, dict], numbers: dict) -> pd.DataFrame:
    paper = numbers["diagnostic_table1"]
    vgg = paper["extra"]["vgg_depth_vae_compressed"]
    paper_original = {"erank": paper["extra"]["vggt_multilayer_probe_erank"]}
    paper_latent = {"erank": f"{vgg['erank_range'][0]}–{vgg['erank_range'][1]}", "r90": vgg["r90"]}
    rows = []
    for name, v in vaes.items():
        for k in ("erank", "r90", "kappa_cap", "cv"):
            o, z = v["original_probe"][k], v["latent_probe"][k]
            rows.append({"vae": name, "quantity": k, "original": o["mean"], "original_ci": _ci(o), "latent": z["mean"],
                         "latent_ci": _ci(z),
                         "ratio_original_over_latent": o["mean"] / z["mean"] if z["mean"] else math.nan,
                         "paper_original": paper_original.get(k), "paper_latent": paper_latent.get(k)})
        for k, val in v["reconstruction"].items():
            rows.append({"vae": name, "quantity": f"reconstruction_{k}", "latent": val,
                         "paper_latent": vgg["delta1"] if k == "delta1" else None})
        rows.append({"vae": name, "quantity": "dims (N·D → K·d)", "original": v["feature_tokens"] * v["feature_dim"],
                     "latent": v["latent_dim"], "paper_latent": numbers["spn_vae_table13"]["vae"]["latent_dim"]})
    return pd.DataFrame(rows)


def token_grid(n: int) -> tuple[int, int]:
    """(prefix, side) with n = prefix + side² and the fewest prefix tokens."""
    for prefix in range(0, 9):
        side = int(round(math.sqrt(n - prefix)))
        if side * side == n - prefix:
            return prefix, side
    raise ValueError(f"{n} tokens do not form one square patch grid")


def test_images(ctx: StageContext, heads: list[dict]) -> dict[str, dict[int, np.ndarray]]:
    """probe -> {index: image} of the test items that its heads' examples show (the probe's
    ``sources.test``, whose first items its cached test targets hold)."""
    images: dict[str, dict[int, np.ndarray]] = {}
    for h in heads:
        if h.get("examples"):
            name = ctx.params["learn"]["probes"][h["probe"]]["sources"]["test"]
            source = open_named(name, ctx.inputs["sources"], ctx.params["sources"])
            images.setdefault(h["probe"], {}).update({i: first_view(source[i].image) for i in h["examples"]["index"]})
    return images


def importance_figure(heads: list[dict], images: dict[str, dict[int, np.ndarray]], outputs: dict[str, Path],
                      provenance: dict, numbers: dict) -> None:
    """Per probe's first head: input, target (log), prediction with its Spearman ρ, and the
    paper's ρ where it reports one for that kind of probe."""
    shown = [h for h in base_heads(heads).values() if h.get("examples")]
    k = len(shown[0]["examples"]["index"]) if shown else 1
    fig, axes = plt.subplots(max(1, len(shown)) * 3, k, figsize=(2.1 * k, 6.3 * max(1, len(shown))), squeeze=False)
    for p, h in enumerate(shown):
        ex = h["examples"]
        for j, i in enumerate(ex["index"]):
            pred, target = np.asarray(ex["predicted"][j]), np.asarray(ex["target"][j])
            prefix, side = token_grid(len(target))
            axes[3 * p, j].imshow(images[h["probe"]][i])
            axes[3 * p, j].set_title(f"{h['probe']} #{i}", fontsize=7)
            axes[3 * p + 1, j].imshow(np.log(np.maximum(target[prefix:], 1e-30)).reshape(side, side), cmap="magma")
            axes[3 * p + 1, j].set_title(f"target ({h['target']}, log)", fontsize=7)
            axes[3 * p + 2, j].imshow(pred[prefix:].reshape(side, side), cmap="magma")
            paper = paper_rho(numbers, h)
            axes[3 * p + 2, j].set_title(f"head, ρ = {ex['rho'][j]:.2f}"
                                         + (f" (paper {paper:.3g})" if paper is not None else ""), fontsize=7)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    save_figure(fig, outputs["importance_maps_png"], outputs["importance_maps_pdf"], provenance=provenance)


def every(points) -> int:
    """A marker on about ten points of a curve (on each point of a short one)."""
    return max(1, len(points) // 10)


def curves_figure(heads: list[dict], head_curves: dict[str, pd.DataFrame], spn_curves: dict[str, pd.DataFrame],
                  vae_curves: dict[str, pd.DataFrame], outputs: dict[str, Path], provenance: dict) -> None:
    """Training loss against step: every head (first seed), every SPN per supervision, every VAE's
    terms; one colour and marker per series (the paper reports no curves)."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    styles = iter(series_styles(len(heads)))
    for h in heads:
        c = head_curves[h["head"]]
        c = c[c["seed"] == c["seed"].min()]
        axes[0].plot(c["step"], c["loss"], label=h["head"], lw=1, markevery=every(c), ms=3, **next(styles))
    axes[0].set(title="Importance heads (first seed)", xlabel="optimizer step",
                ylabel="loss (MSE on standardised log target + w_rank · ranking)")
    spn = [(f"{name} · {sup}", g) for name, c in spn_curves.items()
           for sup, g in c[c["seed"] == c["seed"].min()].groupby("supervision", sort=False)]
    for (label, g), style in zip(spn, series_styles(len(spn))):
        axes[1].plot(g["step"], g["loss"], label=label, lw=1, markevery=every(g), ms=3, **style)
    axes[1].set(title="SPN (first seed)", xlabel="optimizer step",
                ylabel="loss (1 − captured energy + energy terms, dimensionless)")
    vae = [(f"{name} {col}", c["step"], c[col]) for name, c in vae_curves.items() for col in ("loss", "recon", "task")]
    for (label, x, y), style in zip(vae, series_styles(len(vae))):
        axes[2].plot(x, y, label=label, lw=1, markevery=every(x), ms=3, **style)
    axes[2].set(title="VAE", xlabel="optimizer step", ylabel="loss (total, reconstruction, task; log scale)",
                yscale="log")
    for ax in axes:
        ax.legend(fontsize=6)
    save_figure(fig, outputs["training_curves_png"], outputs["training_curves_pdf"], provenance=provenance)


def run(ctx: StageContext) -> None:
    heads = [json.loads(Path(p).read_text()) for p in ctx.inputs["heads"]]
    spns = [json.loads(Path(p).read_text()) for p in ctx.inputs["spn"]]
    vaes = {Path(p).stem: json.loads(Path(p).read_text()) for p in ctx.inputs["vae"]}
    numbers = yaml.safe_load(ctx.inputs["paper_numbers"].read_text())
    tables = {
        "importance": (importance_table(heads, numbers),
                       "Importance head: Spearman ρ against its target on held-out images (mean ± std over seeds)."),
        "head_ablations": (ablation_table(heads, numbers),
                           "Importance-head ablations: each variant beside its probe's first head "
                           "(ρ on held-out images)."),
        "table13": (table13(spns, numbers),
                    "Table 13: SPN subspace alignment V1 on held-out images by supervision (reference: exact top-r "
                    "subspace, or RandNLA at the largest q where the probe is too large for the dense reference)."),
        "vae": (vae_table(vaes, numbers), "VAE bottleneck: the diagnostic of the latent probe against the original "
                                          "probe, and the task output's reconstruction quality."),
    }
    for name, (df, cap) in tables.items():
        write_table(df, ctx.outputs[f"{name}_csv"], ctx.outputs[f"{name}_md"], ctx.outputs[f"{name}_tex"], caption=cap,
                    provenance=ctx.provenance())
    importance_figure(heads, test_images(ctx, heads), ctx.outputs, ctx.provenance(), numbers)
    curves = lambda kind: {Path(p).stem.removesuffix("_curve"): read_table(p) for p in ctx.inputs[f"{kind}_curves"]}
    curves_figure(heads, curves("head"), curves("spn"), curves("vae"), ctx.outputs, ctx.provenance())
