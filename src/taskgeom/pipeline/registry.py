"""The stage registry: the single source of both DAGs.

Each stage is one ``taskgeom STAGE`` subcommand, run by ``taskgeom.stages.<stage>`` (see
``stage.Stage``). Its named inputs, outputs and parameter keys are declared here once;
``dvc.yaml`` is generated from this table (``taskgeom dvc-yaml``) and the Snakefile's
``stage_rule`` makes one Snakemake rule per stage through ``taskgeom.pipeline.dag``. A stage's code
is not declared: it is derived from its runner's imports (``codedeps``, ``code_records``).

Each experiment stage also writes its headline figures (``results/metrics/<stage>/<item>.yaml``,
declared DVC metrics) and the rows of its plots (``results/plots/<plot>/<item>.yaml``, declared
DVC plots with their axes), for ``dvc exp show``, ``dvc metrics diff`` and ``dvc plots diff``.
A plot's series are fixed here (DVC needs its fields by name): its runner writes exactly these
fields, ``None`` for one a configuration lacks (tests/test_dvc_metrics.py checks they agree).

In DVC every stage depends on ``check-params``, whose output never changes while params.yaml is
valid: an invalid params.yaml stops DVC there, before any stage deletes its outputs to rerun. It is
DVC's counterpart of the Snakefile's ``validate(config)``, which stops Snakemake before it builds its
DAG, so Snakemake has no such rule.

A stage's ``seconds`` (``schedule``'s job costs) is its jobs' mean wall time, rounded, in the default
run of 3a289bf on 2 cores (``benchmarks/stage_profile.py``; results/benchmarks/default_run_profile.csv
of a11fabc): declared, not read from a file.
"""

from __future__ import annotations

from collections.abc import Iterator

from taskgeom.pipeline import paths
from taskgeom.pipeline.config import get
from taskgeom.pipeline.identity import IDENTITY
from taskgeom.pipeline.paths import ALL_SOURCES, SOURCE_INDEX, headline, plot_data, reads, source_params
from taskgeom.pipeline.stage import PARAMS_OK, Collect, Plot, Stage, fill
from taskgeom.prune.methods import NAMES as PRUNE_METHODS  # the schema's prune_methods

PKG = "src/taskgeom"
WORLD_FILES = {split: f"data/world/{split}.h5" for split in ("train", "val", "test", "mv_train", "mv_test")}

TARGET_SPLITS = ("train", "val", "test")
RETRIEVAL_VARIANTS = ("drm", "no_regression", "no_distillation")     # stages/retrieval.py's VARIANTS
VAE_TERMS = ("loss", "recon", "task", "kl")                            # the VAE loss and its terms
SPN_SUPERVISION = ("exact", "q1", "q")                                 # q: learn.targets.power_iters
STEP, LOSS = "step", "loss (mean over each logging window)"
FINDINGS_INPUTS = {name: paths.TABLE_CSVS[name] for name in (  # taskgeom.evaluate.findings.CLAIMS' tables
    "diagnose_table1", "diagnose_power_iterations", "metric_importance", "metric_table13", "metric_vae",
    "prune_table2", "prune_schedules", "prune_resolutions", "retrieval_table14", "retrieval_table15")}
COLLECTED = ("zoo", "diagnose.probes", "vae", "learn.spn", "learn.heads", "prune.cls", "prune.dense",
             "retrieval", "sources")  # the params lists and mappings that Collect inputs range over
PRUNE_SETTINGS = ("prune.ratios", "prune.seeds", "prune.images", "prune.batch_size", "prune.domains",
                  "prune.resolutions")


def degradation(what: str) -> Plot:
    return Plot("ratio", PRUNE_METHODS, f"{what} ×100 against η, per method", "η (fraction of patch tokens removed)",
                f"{what} ×100 (lower is better)")


STAGES: tuple[Stage, ...] = (
    Stage(
        name="check-params",
        help="Validate params.yaml against the schema before anything else runs (every stage depends on it).",
        deps={"params": "params.yaml", "schema": f"{PKG}/params.schema.yaml"},
        outs={"ok": PARAMS_OK, "identity": IDENTITY},
        params=COLLECTED,  # it makes room for the collections a profile leaves empty
        dvc_only=True, persist=True,  # a rejected params.yaml leaves data/params.ok: restoring it restores the state
        recomputed=("identity",),  # rewritten from the data before each decision (pipeline/identity.py)
    ),
    Stage(
        name="fetch",
        help="Render the synthetic RGB-D world into HDF5, with a summary and a figure.",
        deps={"params_ok": PARAMS_OK},
        outs={
            **WORLD_FILES,
            "summary_csv": "results/data/summary.csv",
            "summary_md": "results/data/summary.md",
            "figure_png": "results/figures/world_samples.png",
            "figure_pdf": "results/figures/world_samples.pdf",
        },
        params=("world",),
        mem_mb=4000,
        threads=2,                       # renders chunks in as many processes
        runtime=30, seconds=188,
    ),
    Stage(
        name="sources",
        help="Index and check one image source (every selected item decodes); records what it holds.",
        deps={"params_ok": PARAMS_OK, **WORLD_FILES},
        outs={"index": SOURCE_INDEX.format(source="{source}")},
        params=("sources.{source}",),
        identity=("sources.{source}",),  # the content of its files, wherever they lie
        wildcard="source",
        foreach="sources",
        keyed=True,
        runtime=30, seconds=3,
    ),
    Stage(
        name="zoo",
        help="Train one tiny zoo model on its train source (a world split), or import a paper model; evaluate it "
             "on its test source.",
        deps={"params_ok": PARAMS_OK, **reads("model", "train", "test")},
        outs={
            "weights": "data/zoo/{model}/model.safetensors",
            "config": "data/zoo/{model}/config.json",
            "metrics": "results/zoo/{model}.json",
            "curve": "results/zoo/{model}_curve.csv",
            "headline": headline("zoo", "model"),
            "loss_plot": plot_data("zoo-loss", "model"),
        },
        metrics=("headline",),
        plots={"loss_plot": Plot(STEP, ("train_loss",), "training loss", STEP, LOSS)},
        params=("zoo.{model}", "device", *source_params("model", "train", "test")),
        identity=("zoo.{model}",),  # a paper model's checkpoint, by content
        wildcard="model",
        foreach="zoo",
        keyed=True,
        mem_mb=6000,
        runtime=60, seconds=995, gpu=True,
    ),
    Stage(
        name="zoo-table",
        help="Tabulate every zoo model's held-out metrics against its trivial baseline.",
        deps={"params_ok": PARAMS_OK, "metrics": Collect("results/zoo/{item}.json", over="zoo")},
        outs={"csv": "results/zoo_table.csv", "md": "results/zoo_table.md", "tex": "results/zoo_table.tex"},
        params=(), seconds=1,
    ),
    Stage(
        name="diagnose",
        help="The tractability diagnostic (κ_cap(r), erank, r_0.90, token CV) of one probe over its source's images.",
        deps={"params_ok": PARAMS_OK, "source": SOURCE_INDEX.format(source="{probe.source}"),
              "weights": "data/zoo/{probe.model}/model.safetensors", "config": "data/zoo/{probe.model}/config.json"},
        outs={"summary": "results/diagnose/probes/{probe}.json", "arrays": "results/diagnose/probes/{probe}.h5",
              "headline": headline("diagnose", "probe"), "kappa_plot": plot_data("diagnose-kappa", "probe"),
              "spectrum_plot": plot_data("diagnose-spectrum", "probe")},
        metrics=("headline",),
        plots={"kappa_plot": Plot("r", ("kappa_cap",), "κ_cap(r), mean over images", "r", "κ_cap(r)"),
               "spectrum_plot": Plot("i", ("energy",), "spectrum σ_i² / ‖J‖_F², mean over images", "i",
                                     "σ_i² / ‖J‖_F²")},
        params=("diagnose.probes.{probe}", "sources.{probe.source}", "diagnose.images", "diagnose.estimator",
                "diagnose.dense", "diagnose.power_table", "diagnose.bootstrap", "diagnose.regimes", "device"),
        wildcard="probe",
        foreach="diagnose.probes",
        keyed=True,
        mem_mb=8000,
        runtime=60, seconds=49, gpu=True,
    ),
    Stage(
        name="diagnose-tables",
        help="Table 1 (beside the paper's), the power-iteration table, the output-metric comparison, the "
             "accuracy against the dense reference, and the spectra / κ_cap(r) figures.",
        deps={"params_ok": PARAMS_OK,
              "summaries": Collect("results/diagnose/probes/{item}.json", over="diagnose.probes"),
              "arrays": Collect("results/diagnose/probes/{item}.h5", over="diagnose.probes"),
              "paper_numbers": "references/paper_numbers.yaml"},
        outs={**paths.tables("diagnose", paths.DIAGNOSTIC_TABLES), **paths.figures(("spectra", "kappa_curves"))},
        params=("diagnose.probes", "diagnose.estimator", "diagnose.bootstrap", "diagnose.regimes"), seconds=5,
    ),
    Stage(
        name="vae",
        help="Train a VAE bottleneck before a dense decoder; report reconstruction quality and the latent "
             "probe's diagnostic beside the original probe's (paper §6).",
        deps={"params_ok": PARAMS_OK, **reads("vae", "train", "test"),
              "weights": "data/zoo/{vae.model}/model.safetensors", "config": "data/zoo/{vae.model}/config.json"},
        outs={"weights": "data/vae/{vae}/model.safetensors", "config": "data/vae/{vae}/config.json",
              "metrics": "results/vae/{vae}.json", "curve": "results/vae/{vae}_curve.csv",
              "headline": headline("vae", "vae"), "loss_plot": plot_data("vae-loss", "vae")},
        metrics=("headline",),
        plots={"loss_plot": Plot(STEP, VAE_TERMS, "VAE training loss and its terms", STEP, LOSS)},
        params=("vae.{vae}", *source_params("vae", "train", "test"), "diagnose.estimator", "learn.bootstrap",
                "device"),
        wildcard="vae",
        foreach="vae",
        keyed=True,
        mem_mb=6000,
        runtime=60, seconds=242, gpu=True,
    ),
    Stage(
        name="targets",
        help="Cache one probe's Jacobian targets (RandNLA top-r modes at q = 1 and params' q, e_t, ‖J_t‖_F², "
             "dense ones when small) for its train / val / test images in HDF5, resumably.",
        deps={"params_ok": PARAMS_OK, **reads("probe", *TARGET_SPLITS),
              "weights": "data/{probe.host}/model.safetensors", "config": "data/{probe.host}/config.json"},
        outs={split: f"data/targets/{{probe}}/{split}.h5" for split in TARGET_SPLITS},
        params=("learn.probes.{probe}", *source_params("probe", *TARGET_SPLITS), "learn.targets", "learn.r",
                "device"),
        wildcard="probe",
        foreach="learn.probes",
        keyed=True,
        mem_mb=8000,
        runtime=120, seconds=320, gpu=True,
    ),
    Stage(
        name="spn",
        help="Train one probe's Spectral Pullback Network from exact and RandNLA (q = 1, params' q) targets; "
             "subspace alignment V1 on held-out images against a random-init floor (Table 13).",
        deps={"params_ok": PARAMS_OK, "train": "data/targets/{probe}/train.h5", "test": "data/targets/{probe}/test.h5"},
        outs={"weights": "data/spn/{probe}/model.safetensors", "config": "data/spn/{probe}/config.json",
              "metrics": "results/spn/{probe}.json", "curve": "results/spn/{probe}_curve.csv",
              "headline": headline("spn", "probe"), "loss_plot": plot_data("spn-loss", "probe")},
        metrics=("headline",),
        plots={"loss_plot": Plot(STEP, SPN_SUPERVISION, "SPN training loss per supervision, mean over seeds", STEP,
                                 LOSS)},
        params=("learn.spn.{probe}", "learn.targets.power_iters", "learn.bootstrap", "device"),
        wildcard="probe",
        foreach="learn.spn",
        keyed=True,
        runtime=60, seconds=209, gpu=True,
    ),
    Stage(
        name="head",
        help="Train one importance-head configuration over its seeds; Spearman ρ against its target on "
             "held-out images (§5.4, App. F ablations).",
        deps={"params_ok": PARAMS_OK, **{split: f"data/targets/{{head.probe}}/{split}.h5" for split in TARGET_SPLITS}},
        outs={"weights": "data/heads/{head}/model.safetensors", "config": "data/heads/{head}/config.json",
              "metrics": "results/heads/{head}.json", "curve": "results/heads/{head}_curve.csv",
              "values": "results/heads/{head}_per_image.csv.gz",
              "headline": headline("head", "head"), "loss_plot": plot_data("head-loss", "head")},
        metrics=("headline",),
        plots={"loss_plot": Plot(STEP, ("loss",), "importance-head training loss, mean over seeds", STEP, LOSS)},
        params=("learn.heads.{head}", "learn.head_defaults", "learn.targets.power_iters", "learn.bootstrap", "device"),
        wildcard="head",
        foreach="learn.heads",
        keyed=True,
        runtime=60, seconds=34, gpu=True,
    ),
    Stage(
        name="metric-tables",
        help="Importance-head ρ per probe, its ablations, Table 13 (SPN V1), the VAE comparison, beside the "
             "paper's figures; importance maps and training curves.",
        deps={"params_ok": PARAMS_OK,
              "heads": Collect("results/heads/{item}.json", over="learn.heads"),
              "head_curves": Collect("results/heads/{item}_curve.csv", over="learn.heads"),
              "spn": Collect("results/spn/{item}.json", over="learn.spn"),
              "spn_curves": Collect("results/spn/{item}_curve.csv", over="learn.spn"),
              "vae": Collect("results/vae/{item}.json", over="vae"),
              "vae_curves": Collect("results/vae/{item}_curve.csv", over="vae"),
              "sources": ALL_SOURCES,
              "paper_numbers": "references/paper_numbers.yaml"},
        outs={**paths.tables("metric", paths.METRIC_TABLES), **paths.figures(paths.METRIC_FIGURES)},
        params=("sources", "learn.probes"), seconds=5,
    ),
    Stage(
        name="prune-cls",
        help="Token reduction in a frozen CLS model: importance-guided soft merge against ToMe, ToMe scoring, "
             "EViT and random; CLS degradation per ratio, domain and resolution, k-NN accuracy (§7.1).",
        deps={"params_ok": PARAMS_OK, **reads("cls", "rgb", "sketch", "bank"),
              "weights": "data/zoo/{cls.model}/model.safetensors", "config": "data/zoo/{cls.model}/config.json",
              "head_weights": "data/heads/{cls.head}/model.safetensors",
              "head_config": "data/heads/{cls.head}/config.json",
              "spn_weights": "data/spn/{cls.spn}/model.safetensors", "spn_config": "data/spn/{cls.spn}/config.json"},
        outs={"table": "results/prune/cls/{cls}.csv", "summary": "results/prune/cls/{cls}.json",
              "values": "results/prune/cls/{cls}_per_image.csv.gz",
              "headline": headline("prune-cls", "cls"),
              "degradation_plot": plot_data("prune-cls-degradation", "cls")},
        metrics=("headline",),
        plots={"degradation_plot": degradation("CLS degradation")},
        params=("prune.cls.{cls}", *source_params("cls", "rgb", "sketch", "bank"), *PRUNE_SETTINGS, "prune.knn",
                "learn.bootstrap", "device"),
        wildcard="cls",
        foreach="prune.cls",
        keyed=True,
        runtime=60, seconds=98,
    ),
    Stage(
        name="prune-dense",
        help="Hard prune + Last-Layer Fusion in a frozen dense model: importance against ToMe, ToMe scoring, EViT "
             "and random per schedule, ratio, domain and resolution, LLF on and off (§7.2); Figure 2's maps.",
        deps={"params_ok": PARAMS_OK, **reads("dense", "rgb", "sketch"),
              "weights": "data/zoo/{dense.model}/model.safetensors", "config": "data/zoo/{dense.model}/config.json",
              "head_weights": "data/heads/{dense.head}/model.safetensors",
              "head_config": "data/heads/{dense.head}/config.json", "targets": "data/targets/{dense.probe}/test.h5"},
        outs={"table": "results/prune/dense/{dense}.csv", "summary": "results/prune/dense/{dense}.json",
              "values": "results/prune/dense/{dense}_per_image.csv.gz",
              "headline": headline("prune-dense", "dense"),
              "degradation_plot": plot_data("prune-dense-degradation", "dense")},
        metrics=("headline",),
        plots={"degradation_plot": degradation("additional SILog (first schedule, LLF)")},
        params=("prune.dense.{dense}", *source_params("dense", "rgb", "sketch"), *PRUNE_SETTINGS, "learn.bootstrap",
                "learn.probes", "learn.targets.power_iters", "device"),
        wildcard="dense",
        foreach="prune.dense",
        keyed=True,
        runtime=60, seconds=641,
    ),
    Stage(
        name="prune-speed",
        help="FLOPs removed and measured wall-clock speedup of every pruning method against the unpruned dense "
             "model, per ratio, schedule and resolution (scoring and reinsertion included).",
        deps={"params_ok": PARAMS_OK, **reads("dense", "rgb"),
              "weights": "data/zoo/{dense.model}/model.safetensors", "config": "data/zoo/{dense.model}/config.json",
              "head_weights": "data/heads/{dense.head}/model.safetensors",
              "head_config": "data/heads/{dense.head}/config.json"},
        outs={"table": "results/prune/speed/{dense}.csv"},
        params=("prune.dense.{dense}", *source_params("dense", "rgb"), "prune.ratios", "prune.seeds", "prune.domains",
                "prune.resolutions",
                "prune.speed", "device"),
        wildcard="dense",
        foreach="prune.dense",
        keyed=True,
        threads=2,                       # timings: a 2-core machine to itself
        runtime=60, seconds=103, gpu=True,
    ),
    Stage(
        name="prune-tables",
        help="Table 2 (both halves), the resolution and schedule tables (4, 5), the second-domain table, the "
             "baselines table (12), k-NN accuracy and speed, beside the paper's figures; degradation curves and "
             "Figure 2's importance / ToMe maps.",
        deps={"params_ok": PARAMS_OK,
              "cls": Collect("results/prune/cls/{item}.csv", over="prune.cls"),
              "cls_summary": Collect("results/prune/cls/{item}.json", over="prune.cls"),
              "dense": Collect("results/prune/dense/{item}.csv", over="prune.dense"),
              "dense_summary": Collect("results/prune/dense/{item}.json", over="prune.dense"),
              "speed": Collect("results/prune/speed/{item}.csv", over="prune.dense"),
              "sources": ALL_SOURCES,
              "paper_numbers": "references/paper_numbers.yaml"},
        outs={**paths.tables("prune", paths.PRUNE_TABLES), **paths.tables("data", ("token_redundancy",)),
              **paths.figures(paths.PRUNE_FIGURES)},
        params=("sources",), seconds=5,
    ),
    Stage(
        name="retrieval",
        help="Train the Decoder Retrieval Metric of one probe (regression on decoder-output distances + distillation "
             "of token importance, and both ablations); rank test galleries by it, L2 and cosine (App. K).",
        deps={"params_ok": PARAMS_OK, **reads("retrieval", "train", "rgb", "sketch"),
              "weights": "data/zoo/{retrieval.model}/model.safetensors",
              "config": "data/zoo/{retrieval.model}/config.json",
              "targets": "data/targets/{retrieval.probe}/train.h5",
              "head_weights": "data/heads/{retrieval.head}/model.safetensors",
              "head_config": "data/heads/{retrieval.head}/config.json"},
        outs={"weights": "data/retrieval/{retrieval}/model.safetensors",
              "config": "data/retrieval/{retrieval}/config.json",
              "metrics": "results/retrieval/runs/{retrieval}.json",
              "curve": "results/retrieval/runs/{retrieval}_curve.csv",
              "values": "results/retrieval/runs/{retrieval}_per_query.csv.gz",
              "headline": headline("retrieval", "retrieval"), "loss_plot": plot_data("retrieval-loss", "retrieval")},
        metrics=("headline",),
        plots={"loss_plot": Plot(STEP, RETRIEVAL_VARIANTS, "held-out regression loss per variant", STEP,
                                 "held-out regression loss")},
        params=("retrieval.{retrieval}", *source_params("retrieval", "train", "rgb", "sketch"), "learn.bootstrap",
                "learn.targets.power_iters", "device"),
        wildcard="retrieval",
        foreach="retrieval",
        keyed=True,
        runtime=60, seconds=125,
    ),
    Stage(
        name="retrieval-tables",
        help="Tables 14 (in-distribution) and 15 (cross-domain), the ablation and the two-stage search, beside the "
             "paper's; predicted vs true decoder distance and example retrievals.",
        deps={"params_ok": PARAMS_OK, "metrics": Collect("results/retrieval/runs/{item}.json", over="retrieval"),
              "curves": Collect("results/retrieval/runs/{item}_curve.csv", over="retrieval"),
              "sources": ALL_SOURCES, "paper_numbers": "references/paper_numbers.yaml"},
        outs={**paths.tables("retrieval", paths.RETRIEVAL_TABLES), **paths.figures(paths.RETRIEVAL_FIGURES)},
        params=("sources",), seconds=6,
    ),
    Stage(
        name="findings",
        help="Each of the paper's claims the run tests: the paper's figure, ours, a verdict by a stated rule, why.",
        deps={"params_ok": PARAMS_OK, **FINDINGS_INPUTS},
        outs={ext: f"results/findings.{ext}" for ext in ("csv", "md", "tex")},
        params=("zoo", "diagnose.estimator", "diagnose.regimes"), seconds=1,
    ),
    Stage(
        name="report",
        help="Assemble every table that exists into results/REPORT.md, beside the paper's figures.",
        deps={
            "params_ok": PARAMS_OK,
            "findings": "results/findings.csv",
            "findings_md": "results/findings.md",  # the summary and each claim's checks, shown as written
            "zoo_table": "results/zoo_table.csv",
            "data_summary": "results/data/summary.csv",
            "data_token_redundancy": "results/data/token_redundancy.csv",
            **paths.TABLE_CSVS,
            "paper_numbers": "references/paper_numbers.yaml",
        },
        outs={"report": "results/REPORT.md"},
        params=("profile", "zoo", "vae", "diagnose.probes", "diagnose.estimator", "diagnose.regimes",
                "learn.probes"), seconds=1,  # evaluate/shortfalls.py
    ),
)

BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}


def stage(name: str) -> Stage:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no stage {name!r}; stages: {', '.join(BY_NAME)}") from None


def instances(params: dict) -> Iterator[tuple[Stage, str | None]]:
    """Every Snakemake stage instance of ``params``, in the registry's (topological) order."""
    for stage in STAGES:
        if not stage.dvc_only:
            yield from ((stage, v) for v in (get(params, stage.foreach) if stage.foreach else [None]))


def final_outputs(params: dict) -> list[str]:
    """Every output of every Snakemake stage, wildcards expanded from ``params`` (its `all`)."""
    return [fill(p, s, v) for s, v in instances(params) for p in s.outs.values()]
