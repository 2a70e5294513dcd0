"""Headline metrics and plot data for DVC: every experiment stage declares them in dvc.yaml, the
registry's plot series agree with what the runners write, the files record their provenance in a
form DVC skips, and DVC reads the numbers and rows back."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml
from conftest import REPO, run

from taskgeom.artifacts import metrics, provenance
from taskgeom.pipeline import registry
from taskgeom.pipeline.runtime import StageContext
from taskgeom.pipeline.stage import Plot, Stage

EXPERIMENTS = ("zoo", "diagnose", "vae", "spn", "head", "prune-cls", "prune-dense", "retrieval")
RECORD = {"stage": "demo[x]", "code_version": "0.1.0+gabc", "device": "cpu", "machine": "host ×2",
          "params": {"learn": {"lr": 0.002, "seeds": [0, 1], "empty": []}}}


def dvc_yaml() -> dict:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())


def test_every_experiment_stage_declares_its_metrics_and_plots_in_dvc_yaml():
    doc = dvc_yaml()
    top = {path: props for entry in doc["plots"] for path, props in entry.items()}
    for name in EXPERIMENTS:
        body = doc["stages"][name]["do"]
        item = "${key}" if registry.stage(name).keyed else "${item}"
        assert body["metrics"] == [f"results/metrics/{name}/{item}.yaml"], name
        staged = [path for entry in body.get("plots", []) for path in entry]
        assert not set(body["metrics"]) & set(body["outs"]) and not set(staged) & set(body["outs"]), name
        for entry in body.get("plots", []):
            (path, props), = entry.items()
            assert props.keys() == {"x", "y", "title", "x_label", "y_label"} and isinstance(props["y"], str), path
            assert item in props["title"], path  # each item's chart says which it is
        drawn = staged + [p for p in body["outs"] if p.rsplit("/", 1)[0] in top]
        assert drawn, f"{name} declares no plot"
    for directory, props in top.items():
        assert isinstance(props["y"], list) and len(props["y"]) > 1 and props["x_label"] and props["y_label"]
        outs = [p if isinstance(p, str) else next(iter(p)) for s in doc["stages"].values()
                for p in s.get("do", s).get("outs", [])]   # a path, or {path: its flags}
        files = [p for p in outs if p.startswith(directory)]
        assert len(files) == 1 and files[0].rsplit("/", 1)[0] == directory, directory  # a directory of its own


def test_metrics_and_plots_are_still_outputs_of_both_front_ends():
    for s in registry.STAGES:
        for name in (*s.metrics, *s.plots):
            assert name in s.outs, (s.name, name)  # the CLI, Snakemake's rule and `rule all` make them
    outputs = registry.final_outputs(yaml.safe_load((REPO / "params/smoke.yaml").read_text()))
    assert "results/metrics/prune-cls/tiny-cls.yaml" in outputs and "results/plots/zoo-loss/tiny-cls.yaml" in outputs


def test_a_stage_rejects_a_metric_that_is_not_an_output_and_a_shared_plot_directory():
    with pytest.raises(ValueError, match="not an output"):
        Stage("x", "", outs={"a": "a.json"}, metrics=("b",))
    plot = Plot("step", ("a", "b"), "t", "x", "y")
    with pytest.raises(ValueError, match="directory of its own"):
        Stage("x", "", outs={"p": "results/plots/x/{m}_curve.yaml"}, wildcard="m", plots={"p": plot})


def test_the_plot_series_are_the_ones_the_runners_write():
    from taskgeom.prune import protocol
    from taskgeom.stages import retrieval, spn, vae

    schema = yaml.safe_load((REPO / "src/taskgeom/params.schema.yaml").read_text())
    assert registry.PRUNE_METHODS == tuple(schema["$defs"]["prune_methods"]["items"]["enum"])
    assert registry.PRUNE_METHODS == protocol.METHODS
    assert registry.RETRIEVAL_VARIANTS == tuple(retrieval.VARIANTS)
    assert registry.VAE_TERMS == vae.TERMS and registry.SPN_SUPERVISION == spn.SUPERVISION


def test_metrics_and_plot_files_record_provenance_and_round_numbers(tmp_path: Path):
    path = tmp_path / "m.yaml"
    metrics.write_metrics(path, {"rho": 0.123456789, "v1": {"q1": 1, "exact": None}}, RECORD)
    assert provenance.read(path) == RECORD
    assert metrics.read(path) == {"rho": 0.123457, "v1": {"q1": 1, "exact": None}}
    plot = tmp_path / "p.yaml"
    metrics.write_plot(plot, [{"step": 1, "loss": 2.0}, {"step": 2, "loss": None}], RECORD)
    assert provenance.read(plot) == RECORD
    assert plot.read_text().splitlines()[1:] == ["- {step: 1, loss: 2.0}", "- {step: 2, loss: null}"]
    with pytest.raises(ValueError, match="same fields"):
        metrics.write_plot(plot, [{"step": 1}, {"loss": 2.0}], RECORD)
    with pytest.raises(ValueError, match=".yaml files"):
        metrics.write_metrics(tmp_path / "m.json", {}, RECORD)
    metrics.write_metrics(None, {"rho": 1.0}, RECORD)  # an output the caller did not ask for


def test_long_rows_become_wide_rows_and_nested_metrics():
    rows = [{"seed": s, "step": t, "m": m, "v": s + t} for s in (0, 1) for t in (10, 20) for m in ("a", "b")]
    assert metrics.wide(rows, "step", "v") == [{"step": 10, "v": 10.5}, {"step": 20, "v": 20.5}]
    assert metrics.wide(rows, "step", "v", "m", ("b", "c")) == [{"step": 10, "b": 10.5, "c": None},
                                                               {"step": 20, "b": 20.5, "c": None}]
    table = [{"method": "tome", "ratio": r, "mean": r * 10} for r in (0.05, 0.125, 0.5)]
    assert metrics.nest(table, ("method", "ratio"), "mean", {"ratio": metrics.eta_key}) == {
        "tome": {"eta5": 0.5, "eta12_5": 1.25, "eta50": 5.0}}


def context(tmp_path: Path, stage: str, params: dict, *outputs: str) -> StageContext:
    return StageContext(stage, {}, {k: tmp_path / f"{k}.yaml" for k in outputs}, params, "x",
                        log=logging.getLogger("test"))


def test_pruning_runners_write_degradation_per_method_and_eta_on_the_base_setting(tmp_path: Path):
    from taskgeom.stages import prune_cls, prune_dense

    rows = [{"metric": metric, "domain": d, "resolution": 64, "ratio": r, "method": m, "mean": r + (d == "sketch"),
             "llf": True, "schedule": "1-stage"}
            for metric in ("cls_degradation", "knn_top1", "add_silog") for d in ("rgb", "sketch") for r in (0.0, 0.2)
            for m in ("random", "importance")]
    ctx = context(tmp_path, "prune-cls", {}, "headline", "degradation_plot")
    prune_cls.write_dvc_files(ctx, rows, "rgb", 64)
    assert metrics.read(ctx.outputs["headline"]) == {"cls_degradation": {"random": {"eta0": 0.0, "eta20": 0.2},
                                                                         "importance": {"eta0": 0.0, "eta20": 0.2}}}
    plot = metrics.read(ctx.outputs["degradation_plot"])
    assert [r["ratio"] for r in plot] == [0.0, 0.2] and plot[1]["random"] == 0.2 and plot[1]["tome"] is None
    assert list(plot[0]) == ["ratio", *registry.PRUNE_METHODS]
    ctx = context(tmp_path / "dense", "prune-dense", {}, "headline", "degradation_plot")
    prune_dense.write_dvc_files(ctx, rows, "rgb", 64, "1-stage")
    assert metrics.read(ctx.outputs["headline"])["add_silog"]["importance"] == {"eta0": 0.0, "eta20": 0.2}


def test_learning_runners_write_their_headline_figures(tmp_path: Path):
    from taskgeom.stages import head, retrieval, spn

    summary = {k: {"mean": v, "std": 0.0} for k, v in (("rho_test", 0.5), ("rho_val", 0.4), ("rho_random_init", 0.1))}
    curves = [{"seed": s, "step": t, "loss": t + s} for s in (0, 1) for t in (1, 2)]
    ctx = context(tmp_path / "head", "head", {}, "headline", "loss_plot")
    head.write_dvc_files(ctx, summary, 0.2, curves)
    assert metrics.read(ctx.outputs["headline"]) == {"rho_test": 0.5, "rho_val": 0.4, "rho_random_init": 0.1,
                                                     "rho_mean_map": 0.2}
    assert metrics.read(ctx.outputs["loss_plot"]) == [{"step": 1, "loss": 1.5}, {"step": 2, "loss": 2.5}]

    ctx = context(tmp_path / "spn", "spn", {"learn": {"targets": {"power_iters": 2}}}, "headline", "loss_plot")
    v1 = {s: {"mean": m} for s, m in (("random-init", 0.1), ("q1", 0.6), ("q2", 0.8))}
    spn.write_dvc_files(ctx, v1, [{"seed": 0, "supervision": s, "step": 5, "loss": 1.0} for s in ("q1", "q2")])
    assert metrics.read(ctx.outputs["headline"]) == {"v1": {"random_init": 0.1, "q1": 0.6, "q": 0.8}}
    assert metrics.read(ctx.outputs["loss_plot"]) == [{"step": 5, "exact": None, "q1": 1.0, "q": 1.0}]

    rows = [{"domain": "rgb", "method": m, "rho_mean": 0.5, "mae": 1.0, "recall@1": 0.25} for m in ("drm", "l2")]
    rows.append({"domain": "rgb", "method": "cosine top-4 → drm", "recall@1": 0.5})
    curves = [{"variant": v, "step": 10, "train_loss": 1.0, "heldout_regression": 2.0} for v in retrieval.VARIANTS]
    ctx = context(tmp_path / "retrieval", "retrieval", {}, "headline", "loss_plot")
    retrieval.write_dvc_files(ctx, rows, curves)
    assert metrics.read(ctx.outputs["headline"]) == {"rgb": {"drm": {"rho": 0.5, "recall@1": 0.25},
                                                             "l2": {"rho": 0.5, "recall@1": 0.25},
                                                             "two_stage": {"recall@1": 0.5}}}
    assert metrics.read(ctx.outputs["loss_plot"]) == [{"step": 10, **dict.fromkeys(retrieval.VARIANTS, 2.0)}]


def test_dvc_tabulates_the_numbers_only_and_finds_the_plot_rows(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    run(["git", "init", "-q"], repo)
    run(["dvc", "init", "-q"], repo)
    metrics.write_metrics(repo / "m/a.yaml", {"rho": 0.5, "v1": {"q1": 0.25, "exact": None}}, RECORD)
    metrics.write_plot(repo / "p/deg/a.yaml", [{"ratio": 0.0, "tome": 0.0, "importance": None},
                                              {"ratio": 0.5, "tome": 2.0, "importance": None}], RECORD)
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"metrics": ["m/a.yaml"], "plots": [
        {"p/deg": {"x": "ratio", "y": ["tome", "importance"], "title": "t", "x_label": "η", "y_label": "d"}}]}))
    shown = json.loads(run(["dvc", "metrics", "show", "--json"], repo).stdout)
    (workspace,) = shown.values()  # keyed "" before the first commit
    assert workspace["data"]["m/a.yaml"]["data"] == {"rho": 0.5, "v1": {"q1": 0.25}}
    plots = json.loads(run(["dvc", "plots", "show", "--json"], repo).stdout)
    (chart,) = plots["data"]["p/deg/a.yaml"]
    values = [(d["field"], d["ratio"], d["dvc_inferred_y_value"]) for d in chart["content"]["data"]["values"]]
    assert ("tome", 0.5, 2.0) in values and len(values) == 4
