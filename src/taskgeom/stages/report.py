"""The ``report`` stage: results/REPORT.md from every table the pipeline made, each beside
the paper's figures where it has a counterpart (references/paper_numbers.yaml, rendered as
sentences and small tables where the table does not already hold the paper's rows), with the
figures embedded in the section they belong to."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from taskgeom.artifacts.atomic import write_text
from taskgeom.artifacts.provenance import split_header
from taskgeom.artifacts.tables import read_table, signed
from taskgeom.evaluate.shortfalls import Shortfalls, annotate, shortfalls
from taskgeom.pipeline.registry import STAGES
from taskgeom.pipeline.runtime import StageContext


def paper_table1(numbers: dict) -> str:
    t = numbers["diagnostic_table1"]
    s, e = t["settings"], t["extra"]
    by_layer = ", ".join(f"{v:g} at layer {k}" for k, v in e["dinov2_cls_kappa_cap_by_layer"].items())
    da = e["depth_anything_multilayer_probe"]
    return (f"Its Table 1 rows are in the table above (r = {s['r']}, {s['probes']} probes, q = {s['power_iters']}, "
            f"{s['images']} images). It also reports: DINOv2-B/14's CLS probe has κ_cap(20) = {by_layer}; a "
            f"multi-layer Depth-Anything-V2 probe has erank {da['erank']:g} and token CV {da['cv']:g}; the "
            f"multi-layer VGGT probe has erank {e['vggt_multilayer_probe_erank']:g}; the diagnostic costs about "
            f"{e['products_per_image']} JVP/VJP products per image.")


def paper_ablations(numbers: dict) -> str:
    ih = numbers["importance_head"]
    grid = lambda xs: ", ".join(f"{x:g}" for x in xs)
    return (f"It ablates hidden widths {grid(ih['ablation_hidden_widths'])}, attention heads "
            f"{grid(ih['ablation_attention_heads'])} and ranking-loss weights {grid(ih['ablation_rank_loss_weights'])} "
            f"around a head of {ih['params']:,} parameters; references/paper_numbers.yaml holds the grid, not ρ per "
            "setting.")


def paper_table2(numbers: dict) -> str:
    clip = numbers["clip_cls_pruning"]["imagenet_eta_0_5"]
    t2 = numbers["pruning_table2"]
    imp, tome = clip["importance"], clip["tome_score"]
    return (f"Its Table 2 rows are in the tables above (ImageNet-val at 224 px, mean over 3 seeds). CLIP ViT-B/16 "
            f"on ImageNet at η = 0.5: CLS degradation ×100 of importance {imp:g} against ToMe scoring {tome:g} "
            f"(importance − ToMe = {signed(imp - tome)}, ratio {imp / tome:.3f}), Wilcoxon p < "
            f"{clip['wilcoxon_p_below']:.0e}: importance better. Dense, single stage, η = 0.5: importance cuts "
            f"ToMe scoring's additional SILog by {t2['headline_reduction_vs_tome_at_0_5']:.0%}.")


def paper_speed(numbers: dict) -> str:
    s = numbers["speed"]
    rows = [("224", "0.2", s["res_224_eta_0_2"]["flops_saved"], f"{s['res_224_eta_0_2']['wallclock_speedup']}×", "–"),
            ("448", "", s["res_448"]["flops_saved"], f"{s['res_448']['wallclock_speedup']}×",
             f"{s['res_448']['tome_speedup']}×")]
    table = pd.DataFrame(rows, columns=["resolution (px)", "η", "FLOPs saved", "wall-clock speedup (A40)",
                                        "ToMe speedup"])
    table["FLOPs saved"] = table["FLOPs saved"].map(lambda x: f"{x:.1%}")
    lo, hi = s["head_plus_llf_overhead_vs_tome_scoring"]
    return (table.to_markdown(index=False) + f"\n\nThe importance head plus LLF cost {lo:.0%}–{hi:.0%} more than "
            "ToMe scoring.")


@dataclass(frozen=True)
class Section:
    title: str
    input: str            # the report stage's input name (a CSV)
    text: str
    paper: Callable[[dict], str] | None = None  # the paper's numbers the table does not hold, as Markdown
    pivots: bool = False          # show the stage's Markdown pivots (beside the CSV) instead of the long CSV
    figures: tuple[str, ...] = ()  # figures (results/figures/<name>.png) embedded after the table
    speed: bool = False           # the machine-dependent speed table: its deterministic part only


FIGURE_CAPTIONS = {
    "world_samples": "Samples of the synthetic world: RGB with its class, depth, the line-drawing render, and the "
                     "views of one multi-view group.",
    "spectra": "Normalised singular-value spectra σ_i²/‖J‖_F² of every probe (mean over test images).",
    "kappa_curves": "κ_cap(r) per probe (band: min–max over images); black stars: the paper's κ_cap(20) (Table 1).",
    "importance_maps": "Importance head against its Jacobian-derived target on held-out images, with ρ per image "
                       "and the paper's ρ where it reports one.",
    "training_curves": "Training loss of every importance head, SPN and VAE.",
    "prune_degradation": "Degradation against the pruning ratio η per method (band: bootstrap 95% interval over "
                         "images); dashed with stars: the paper's Table 2 values.",
    "prune_maps": "The paper's Figure 2 on our zoo: input, importance head and ToMe score maps (ρ against the "
                  "Jacobian-derived target), depth.",
    "retrieval_distances": "Calibrated predicted against true decoder distance per method (ρ: ours, and the "
                           "paper's where it reports one; the paper's cross-domain shift is ImageNet → NYU).",
    "retrieval_examples": "Example queries with their top five by DRM and by cosine: RGB above, depth below.",
}


NO_ROWS = "_No rows: this profile runs nothing that this table reports._"

SECTIONS = (
    Section("Findings: the paper's claims on this run", "findings",
            "Judged by `taskgeom.evaluate.findings`. The per-image values behind every p-value and interval are "
            "published beside each stage's results; docs/results.md shows how to recompute them.", pivots=True),
    Section("Data", "data_summary",
            "The synthetic RGB-D world as stored: splits, views, resolutions, class balance, the share of indoor "
            "rooms, depth and far-plane statistics and the RGB power-spectrum slope (natural images ≈ −2).",
            figures=("world_samples",)),
    Section("Token redundancy at the pruning layers", "data_token_redundancy",
            "How much the tokens repeat one another where each model is pruned: the share of patch-token pairs "
            "whose attention keys are near-duplicates (cosine above the threshold). Near 1, every method removes "
            "tokens at little cost."),
    Section("Model zoo", "zoo_table",
            "Held-out metrics of the zoo's models against trivial baselines: the tiny models the pipeline trains, "
            "standing in for the paper's DINOv2 / CLIP and Depth-Anything-V2 (the default's tiny-trunk, one backbone "
            "with a CLS classifier and a DPT depth head; the smoke profile's tiny-cls and tiny-dpt) and VGGT "
            "(tiny-mv), "
            "or the paper's models, zero-shot on their test sources."),
    Section("Table 1: the tractability diagnostic", "diagnose_table1",
            "κ_cap(20), token CV, effective rank and r_0.90 of every probe, matrix-free "
            "(`taskgeom.diagnostics.diagnose`), "
            "as the mean over test images with a bootstrap 95% interval; the regime follows "
            "`taskgeom.diagnostics.regime` and names the architecture it calls for. The paper's rows follow ours "
            "(with the regime our rule gives their numbers where it differs).", paper_table1,
            figures=("spectra", "kappa_curves")),
    Section("Power-iteration convergence (App. C.3)", "diagnose_power_iterations",
            "Subspace-alignment error of the top-20 modes from randomized power iteration after q rounds, against the "
            "dense SVD (or q = 15 where the probe is too large for it); the paper's rows follow ours."),
    Section("Output metric: Euclidean vs SO(3) on the camera head", "diagnose_output_metric",
            "The camera head's pullback with the raw encoding vs with rotations measured by their geodesic angle "
            "(`taskgeom.probes.so3_camera_metric`): κ_cap, erank and how far the token-importance ranking moves; "
            "the paper's row follows ours."),
    Section("Diagnostic accuracy against the dense reference", "diagnose_accuracy",
            "Worst-image errors of the matrix-free estimates against `diagnose_exact` on the probes small enough for "
            "the dense Jacobian."),
    Section("Importance head (§5.4–5.5)", "metric_importance",
            "Spearman ρ between the importance head's prediction (from features alone) and its Jacobian-derived "
            "target on held-out images: the spectral target e_t (RandNLA top-r modes) or the block norm ‖J_t‖_F², "
            "mean ± std over seeds, beside the untrained head; `paper_rho` and the paper's rows give its ρ.",
            figures=("importance_maps",)),
    Section("Importance-head ablations (App. F)", "metric_head_ablations",
            "Each variant beside its probe's first head: target type, ranking-loss weight w_rank, training-set "
            "size, head width and attention heads.", paper_ablations),
    Section("Table 13: the SPN from RandNLA vs exact supervision", "metric_table13",
            "Subspace alignment V1 of the SPN's predicted top-r modes with the reference subspace on held-out "
            "images, by supervision, beside a randomly initialised SPN; the paper's rows follow ours.",
            figures=("training_curves",)),
    Section("The VAE bottleneck (§6)", "metric_vae",
            "The diagnostic of the probe at the VAE's latent registers against the probe at the decoder's own "
            "input layers, on the same held-out groups, and the depth decoded from reconstructed features "
            "against the depth from the original ones; the paper's values are in its columns."),
    Section("Table 2: token merging (CLS) and pruning (dense)", "prune_table2",
            "CLS degradation ×100 = 100·(1 − cos) of the embedding after merging, and the additional SILog ×100 of "
            "the depth after hard pruning + Last-Layer Fusion, at the base domain and resolution, mean over seeds. "
            "Below each, importance against each baseline on the same images: the signed difference and ratio "
            "(lower is better, so a negative difference favours importance), the Wilcoxon signed-rank p and the "
            "verdict.", paper_table2, pivots=True, figures=("prune_degradation", "prune_maps")),
    Section("Tables 4–5: pruning at higher resolutions", "prune_resolutions",
            "Additional SILog ×100 per schedule at the base resolution, 1.5× and 2×, with importance's relative "
            "reduction of ToMe scoring's error (positive: importance better).", pivots=True),
    Section("Pruning schedules and Last-Layer Fusion (App. E.1)", "prune_schedules",
            "1, 2 and 4 pruning stages, each with LLF on and off, at the base setting.", pivots=True),
    Section("The second domain (App. G, the ImageNet-Sketch role)", "prune_second_domain",
            "Both tasks on the line-drawing renders of the test split.", pivots=True),
    Section("Table 12: every baseline", "prune_baselines",
            "Random, ToMe scoring, EViT and ToMe merging against importance, each comparison with its signed "
            "difference, Wilcoxon p and verdict.", pivots=True),
    Section("k-NN accuracy after merging (App. H)", "prune_accuracy",
            "Weighted k-NN top-1 of the merged CLS embedding against the unmerged training embeddings.", pivots=True),
    Section("Cost of pruning", "prune_speed",
            "FLOPs saved against the unpruned model, scoring and reinsertion included.", paper_speed, speed=True),
    Section("Table 14: task-induced retrieval, in-distribution (App. K)", "retrieval_table14",
            "Spearman ρ per query between each feature distance and the true decoder-output distance "
            "(SILog of the depth outputs), recall@k and calibrated MAE; the paper's ρ follows ours.",
            figures=("retrieval_distances", "retrieval_examples")),
    Section("Table 15: task-induced retrieval, cross-domain", "retrieval_table15",
            "Trained on the base domain, queried on the sketch renders; the paper's rows (ImageNet → NYU) follow "
            "ours."),
    Section("DRM ablations", "retrieval_ablation", "Without regression; without distillation."),
    Section("Two-stage search", "retrieval_two_stage", "Cosine shortlist, DRM rerank: the recall it keeps."),
)


def figures(report_dir: Path) -> dict[str, str]:
    """Every PNG figure any stage declares: its name -> its path relative to the report."""
    pngs = [p for s in STAGES for p in s.outs.values() if p.endswith(".png")]
    return {Path(p).stem: os.path.relpath(p, report_dir) for p in pngs}


def embed(name: str, rel: str) -> list[str]:
    return [f"![{FIGURE_CAPTIONS.get(name, name)}]({rel})", ""]


def speed_block(path: Path, rel: str) -> list[str]:
    """FLOPs saved (deterministic) embedded, with the machine and batch the wall clock ran on; the
    wall-clock speedups only linked: they change from run to run, and this report must not."""
    t = read_table(path)
    if t.empty:
        return ["No speed measurements.", ""]
    machines = ", ".join(f"`{m}`" for m in sorted(t["machine"].astype(str).unique()))
    flops = t.pivot_table(index=["model", "resolution", "schedule", "method"], columns="ratio",
                          values="flops_saved", aggfunc="first", sort=False)
    flops = flops[sorted(flops.columns)].map(lambda x: f"{x:.1%}")
    flops.columns = [f"η={c:g}" for c in flops.columns]
    pivots = Path(rel).with_suffix(".md").as_posix()
    return [f"Measured on **{machines}**, batch of {int(t['batch'].iloc[0])} images (`prune-speed`).", "",
            "Theoretical FLOPs saved (share of the unpruned model's):", "",
            flops.reset_index().to_markdown(index=False), "",
            f"The wall-clock speedups measured on {machines} are in [`{pivots}`]({pivots}) and its CSV: they "
            "change from run to run, and this report is byte-identical between runs, so it does not copy them.", ""]


def table_block(path: Path, found: Shortfalls) -> list[str]:
    """A CSV as a Markdown table, its probe names marked with the zoo's shortfalls that apply to
    them (``evaluate.shortfalls``) and each mark's footnote below it."""
    table, notes = annotate(read_table(path), found)
    return [table.to_markdown(index=False, floatfmt=".4g") if len(table) else NO_ROWS, "",
            *(line for note in notes for line in (note, ""))]


def render(ctx: StageContext) -> str:
    numbers = yaml.safe_load(ctx.inputs["paper_numbers"].read_text())
    found = shortfalls(ctx.params, read_table(ctx.inputs["zoo_table"]))
    report_dir = ctx.outputs["report"].parent
    figs, shown = figures(report_dir), set()
    out = ["# taskgeom results", "",
           f"Profile `{ctx.params['profile']}`. Every table below is generated from its CSV under `results/`, "
           "which the pipeline's stages wrote; regenerate with `snakemake -c2` or `dvc repro`.", ""]
    for section in SECTIONS:
        path = ctx.inputs[section.input]
        rel = os.path.relpath(path, report_dir)
        out += [f"## {section.title}", "", section.text, "", f"Source: [`{rel}`]({rel})", ""]
        if section.speed:
            out += speed_block(path, rel)
        elif section.pivots:
            out += [split_header(Path(path).with_suffix(".md").read_text(), ".md")[1], ""]
        else:
            out += table_block(path, found)
        paper = section.paper(numbers) if section.paper else ""
        if paper.strip():
            out += ["**Paper (Bond et al.):**" + ("\n\n" if paper.startswith("|") else " ") + paper, ""]
        for name in section.figures:
            out += embed(name, figs[name])
            shown.add(name)
    rest = [name for name in figs if name not in shown]
    if rest:
        out += ["## Other figures", ""]
        for name in rest:
            out += embed(name, figs[name])
    return "\n".join(out) + "\n"


def run(ctx: StageContext) -> None:
    write_text(ctx.outputs["report"], render(ctx), ctx.provenance())
