"""The ``report`` stage: results/REPORT.md from every table the pipeline made, each beside
the paper's figures where it has a counterpart (references/paper_numbers.yaml), and a list
of every figure."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from taskgeom.artifacts.atomic import write_text
from taskgeom.artifacts.provenance import split_header
from taskgeom.artifacts.tables import read_table
from taskgeom.pipeline.registry import STAGES
from taskgeom.pipeline.runtime import StageContext


@dataclass(frozen=True)
class Section:
    title: str
    input: str            # the report stage's input name (a CSV)
    text: str
    paper_key: str | None = None  # top-level key of references/paper_numbers.yaml
    pivots: bool = False          # show the stage's Markdown pivots (beside the CSV) instead of the long CSV
    link_only: bool = False       # machine-dependent figures: linked, not copied, so the report stays reproducible


SECTIONS = (
    Section("Data", "data_summary",
            "The synthetic RGB-D world as stored: splits, views, resolutions, class balance and depth statistics."),
    Section("Tiny model zoo", "zoo_table",
            "Held-out metrics of the zoo models the pipeline trains, against trivial baselines. "
            "They stand in for the paper's DINOv2 / CLIP (tiny-cls), Depth-Anything-V2 (tiny-dpt) and VGGT (tiny-mv)."),
    Section("Table 1: the tractability diagnostic", "diagnose_table1",
            "κ_cap(20), token CV, effective rank and r_0.90 of every probe, matrix-free "
            "(`taskgeom.diagnostics.diagnose`), "
            "as the mean over test images with a bootstrap 95% interval; the regime follows "
            "`taskgeom.diagnostics.regime` and names the architecture it calls for. The paper's rows follow ours "
            "(with the regime our rule gives their numbers where it differs). Figures: `figures/spectra.png`, "
            "`figures/kappa_curves.png`.", "diagnostic_table1"),
    Section("Power-iteration convergence (App. C.3)", "diagnose_power_iterations",
            "Subspace-alignment error of the top-20 modes from randomized power iteration after q rounds, against the "
            "dense SVD (or q = 15 where the probe is too large for it).", "power_iteration_alignment_error"),
    Section("Output metric: Euclidean vs SO(3) on the camera head", "diagnose_output_metric",
            "The camera head's pullback with the raw encoding vs with rotations measured by their geodesic angle "
            "(`taskgeom.probes.so3_camera_metric`): κ_cap, erank and how far the token-importance ranking moves."),
    Section("Diagnostic accuracy against the dense reference", "diagnose_accuracy",
            "Worst-image errors of the matrix-free estimates against `diagnose_exact` on the probes small enough for "
            "the dense Jacobian."),
    Section("Importance head (§5.4–5.5)", "metric_importance",
            "Spearman ρ between the importance head's prediction (from features alone) and its Jacobian-derived "
            "target on held-out images: the spectral target e_t (RandNLA top-r modes) or the block norm ‖J_t‖_F², "
            "mean ± std over seeds, beside the untrained head. Figure: `figures/importance_maps.png`.",
            "importance_head"),
    Section("Importance-head ablations (App. F)", "metric_head_ablations",
            "Each variant beside its probe's first head: target type, ranking-loss weight w_rank, training-set "
            "size, head width and attention heads."),
    Section("Table 13: the SPN from RandNLA vs exact supervision", "metric_table13",
            "Subspace alignment V1 of the SPN's predicted top-r modes with the reference subspace on held-out "
            "images, by supervision, beside a randomly initialised SPN. Training curves: "
            "`figures/training_curves.png`.", "spn_vae_table13"),
    Section("The VAE bottleneck (§6)", "metric_vae",
            "The diagnostic of the probe at the VAE's latent registers against the probe at the decoder's own "
            "input layers, on the same held-out groups, and the depth decoded from reconstructed features "
            "against the depth from the original ones."),
    Section("Table 2: token merging (CLS) and pruning (dense)", "prune_table2",
            "CLS degradation ×100 = 100·(1 − cos) of the embedding after merging, and the additional SILog ×100 of "
            "the depth after hard pruning + Last-Layer Fusion, at the base domain and resolution, mean over seeds, "
            "with the Wilcoxon signed-rank p of importance against each baseline. Figures: "
            "`figures/prune_degradation.png`, `figures/prune_maps.png` (the paper's Figure 2).", pivots=True),
    Section("Tables 4–5: pruning at higher resolutions", "prune_resolutions",
            "Additional SILog ×100 per schedule at the base resolution, 1.5× and 2×, with importance's relative "
            "reduction of ToMe scoring's error.", pivots=True),
    Section("Pruning schedules and Last-Layer Fusion (App. E.1)", "prune_schedules",
            "1, 2 and 4 pruning stages, each with LLF on and off, at the base setting.", pivots=True),
    Section("The second domain (App. G, the ImageNet-Sketch role)", "prune_second_domain",
            "Both tasks on the line-drawing renders of the test split.", pivots=True),
    Section("Table 12: every baseline", "prune_baselines",
            "Random, ToMe scoring, EViT and ToMe merging against importance.", pivots=True),
    Section("k-NN accuracy after merging (App. H)", "prune_accuracy",
            "Weighted k-NN top-1 of the merged CLS embedding against the unmerged training embeddings.", pivots=True),
    Section("Cost of pruning", "prune_speed",
            "FLOPs saved and wall-clock speedup against the unpruned model, scoring and reinsertion included. "
            "Times depend on the machine, so they are not copied here.", "speed", link_only=True),
    Section("Table 14: task-induced retrieval, in-distribution (App. K)", "retrieval_table14",
            "Spearman ρ per query between each feature distance and the true decoder-output distance "
            "(SILog of the depth "
            "outputs), recall@k and calibrated MAE. Figures: `figures/retrieval_distances.png`, "
            "`figures/retrieval_examples.png`.", "retrieval"),
    Section("Table 15: task-induced retrieval, cross-domain", "retrieval_table15",
            "Trained on the base domain, queried on the sketch renders."),
    Section("DRM ablations", "retrieval_ablation", "Without regression; without distillation."),
    Section("Two-stage search", "retrieval_two_stage", "Cosine shortlist, DRM rerank: the recall it keeps."),
)


def figures(report_dir: Path) -> list[str]:
    """Every PNG figure any stage declares, relative to the report."""
    pngs = [p for s in STAGES for p in s.outs.values() if p.endswith(".png")]
    return [os.path.relpath(p, report_dir) for p in pngs]


def paper_block(numbers: dict, key: str) -> str:
    return "Paper (Bond et al.):\n\n```yaml\n" + yaml.safe_dump({key: numbers[key]}, sort_keys=False) + "```\n"


def render(ctx: StageContext) -> str:
    numbers = yaml.safe_load(ctx.inputs["paper_numbers"].read_text())
    out = ["# taskgeom results", "",
           f"Profile `{ctx.params['profile']}`. Every table below is generated from its CSV under `results/`, "
           "which the pipeline's stages wrote; regenerate with `snakemake -c2` or `dvc repro`.", ""]
    for section in SECTIONS:
        path = ctx.inputs[section.input]
        table = read_table(path)
        rel = os.path.relpath(path, ctx.outputs["report"].parent)
        out += [f"## {section.title}", "", section.text, "", f"Source: [`{rel}`]({rel})", ""]
        if section.pivots:
            out += [split_header(Path(path).with_suffix(".md").read_text(), ".md")[1], ""]
        elif not section.link_only:
            out += [table.to_markdown(index=False, floatfmt=".4g"), ""]
        if section.paper_key:
            out += [paper_block(numbers, section.paper_key), ""]
    out += ["## Figures", ""]
    out += [f"- [`{f}`]({f})" for f in figures(ctx.outputs["report"].parent)]
    return "\n".join(out) + "\n"


def run(ctx: StageContext) -> None:
    write_text(ctx.outputs["report"], render(ctx), ctx.provenance())
