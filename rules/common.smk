# One Snakemake rule per stage of the registry (src/taskgeom/pipeline/registry.py).

# Snakemake's report (`snakemake --report report.html`): every figure (PNG) and table (the CSV a
# stage publishes beside its Markdown) under results/, and REPORT.md, flagged with report() where the
# rule is made. The category is the paper section of the stage that writes it, the subcategory its
# kind; the label and the caption (reST + Jinja, under docs/report/) come from REPORT_ITEMS. Other
# outputs (HDF5, weights, JSON, run-level CSVs, the PDF / Markdown / LaTeX twins) are not flagged.
# A figure or table missing from REPORT_ITEMS is still shown, captioned docs/report/uncaptioned.rst
# (tests/test_snakemake_report.py fails on it). The flags change neither the jobs nor their files.
REPORT_SECTIONS = {  # registry stage -> report category
    "fetch": "Data",
    "zoo-table": "Zoo",
    "diagnose-tables": "§4 Tractability diagnostic (Table 1)",
    "metric-tables": "§5–6 Learned metrics",
    "prune-tables": "§7 Pruning",
    "retrieval-tables": "App. K Retrieval",
    "findings": "Summary",
    "report": "Summary",
}
REPORT_KINDS = {"png": "Figures", "csv": "Tables", "md": "Markdown"}  # file suffix -> subcategory
REPORT_ITEMS = {  # output path -> (label, caption file under docs/report/)
    "results/data/summary.csv": ("The synthetic world, as stored", "data_summary.rst"),
    "results/figures/world_samples.png": ("Samples of the synthetic world", "world_samples.rst"),
    "results/data/token_redundancy.csv": ("Token redundancy at the pruning layers", "token_redundancy.rst"),
    "results/zoo_table.csv": ("Model zoo: held-out metrics", "zoo_table.rst"),
    "results/diagnose/table1.csv": ("Table 1: the tractability diagnostic", "diagnose_table1.rst"),
    "results/diagnose/power_iterations.csv": ("App. C.3: power-iteration convergence", "diagnose_power_iterations.rst"),
    "results/diagnose/output_metric.csv": ("Output metric: Euclidean vs SO(3)", "diagnose_output_metric.rst"),
    "results/diagnose/accuracy.csv": ("Accuracy against the dense reference", "diagnose_accuracy.rst"),
    "results/figures/spectra.png": ("Singular-value spectra", "spectra.rst"),
    "results/figures/kappa_curves.png": ("κ_cap(r) curves", "kappa_curves.rst"),
    "results/metric/importance.csv": ("§5.4–5.5: importance head", "metric_importance.rst"),
    "results/metric/head_ablations.csv": ("App. F: importance-head ablations", "metric_head_ablations.rst"),
    "results/metric/table13.csv": ("Table 13: SPN, RandNLA vs exact supervision", "metric_table13.rst"),
    "results/metric/vae.csv": ("§6: the VAE bottleneck", "metric_vae.rst"),
    "results/figures/importance_maps.png": ("Importance maps: head vs target", "importance_maps.rst"),
    "results/figures/training_curves.png": ("Training curves: heads, SPN, VAE", "training_curves.rst"),
    "results/prune/table2.csv": ("Table 2: merging (CLS) and pruning (dense)", "prune_table2.rst"),
    "results/prune/resolutions.csv": ("Tables 4–5: higher resolutions", "prune_resolutions.rst"),
    "results/prune/schedules.csv": ("App. E.1: schedules and Last-Layer Fusion", "prune_schedules.rst"),
    "results/prune/second_domain.csv": ("App. G: the second domain", "prune_second_domain.rst"),
    "results/prune/baselines.csv": ("Table 12: every baseline", "prune_baselines.rst"),
    "results/prune/accuracy.csv": ("App. H: k-NN accuracy after merging", "prune_accuracy.rst"),
    "results/prune/speed.csv": ("§7.3, App. D: cost of pruning", "prune_speed.rst"),
    "results/figures/prune_degradation.png": ("Degradation against the pruning ratio", "prune_degradation.rst"),
    "results/figures/prune_maps.png": ("Figure 2: importance and ToMe maps", "prune_maps.rst"),
    "results/retrieval/table14.csv": ("Table 14: retrieval, in-distribution", "retrieval_table14.rst"),
    "results/retrieval/table15.csv": ("Table 15: retrieval, cross-domain", "retrieval_table15.rst"),
    "results/retrieval/ablation.csv": ("DRM ablations", "retrieval_ablation.rst"),
    "results/retrieval/two_stage.csv": ("Two-stage search", "retrieval_two_stage.rst"),
    "results/figures/retrieval_distances.png": ("Predicted vs true decoder distance", "retrieval_distances.rst"),
    "results/figures/retrieval_examples.png": ("Example retrievals: DRM vs cosine", "retrieval_examples.rst"),
    "results/findings.csv": ("Findings: the paper's claims on this run", "findings.rst"),
    "results/REPORT.md": ("REPORT.md: every table beside the paper's", "report_md.rst"),
}


def in_report(path, outputs):
    """A figure, a published table (a CSV with its Markdown beside it) or a listed output."""
    return path in REPORT_ITEMS or path.endswith(".png") or (path.endswith(".csv") and path[:-4] + ".md" in outputs)


def report_outputs(name, outputs):
    """A stage's named outputs, its figures and tables flagged for Snakemake's report."""

    def flagged(path):
        label, caption = REPORT_ITEMS.get(path, (path, "uncaptioned.rst"))
        return report(
            path,
            caption=f"{workflow.basedir}/docs/report/{caption}",
            category=REPORT_SECTIONS.get(name, "Other"),
            subcategory=REPORT_KINDS.get(path.rsplit(".", 1)[-1]),
            labels={"result": label},
        )

    paths = set(outputs.values())
    return {key: flagged(path) if in_report(path, paths) else path for key, path in outputs.items()}


# Ready jobs start longest remaining path first (taskgeom.pipeline.schedule).
PRIORITIES = priorities(config)


def stage_rule(name):
    """The rule of one registry stage, named as the stage (``prune-dense``, the name dvc.yaml,
    the ``taskgeom`` command and ``snakemake -R`` all use). A function per rule, so each rule's
    shell command and params close over their own stage."""
    r = snakemake_rule(name, config, PRIORITIES, IDENTITY)

    rule:
        name:
            name
        input:
            **r.input,
        output:
            **report_outputs(name, r.output),
        params:
            **r.params,
        log:
            r.log,
        benchmark:
            r.benchmark
        threads: r.threads
        priority: r.priority
        resources:
            **r.resources,
        conda:
            f"{workflow.basedir}/envs/environment.yaml"
        shell:
            r.shell


def stage_rules(*names):
    for name in names:
        stage_rule(name)
