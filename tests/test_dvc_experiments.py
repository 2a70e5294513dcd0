"""DVC on the smoke run: `dvc metrics show` tabulates every experiment stage's headline figures
(numbers only), `dvc plots show` draws every declared plot, and an experiment that changes one
importance head's ranking weight reruns only its stages and lines up its parameter against its
metrics in `dvc exp show` and `dvc metrics diff` (queued sweeps: docs/dvc.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import SMOKE, copy_run, run

from taskgeom.pipeline.config import get
from taskgeom.pipeline.registry import STAGES
from taskgeom.pipeline.stage import fill

pytestmark = pytest.mark.pipeline

HEAD = "dpt-block-norm"  # its head feeds only metric-tables and report: a cheap experiment
HEAD_METRICS = f"results/metrics/head/{HEAD}.yaml"


def declared_metrics() -> set[str]:
    """Every metrics file of the smoke profile."""
    return {fill(s.outs[name], s, value, SMOKE) for s in STAGES for name in s.metrics
            for value in get(SMOKE, s.foreach)}


def leaves(tree):
    for value in tree.values():
        yield from leaves(value) if isinstance(value, dict) else [value]


def test_dvc_metrics_show_tabulates_every_items_headline_figures(smoke: Path):
    (shown,) = json.loads(run(["dvc", "metrics", "show", "--json"], smoke).stdout).values()
    files = shown["data"]
    assert set(files) == declared_metrics()
    for path, content in files.items():
        data = content["data"]
        assert data and "provenance" not in data, path  # the record is a comment DVC skips
        assert all(isinstance(v, (int, float)) for v in leaves(data)), path
    assert -1 <= files[HEAD_METRICS]["data"]["rho_test"] <= 1


def test_dvc_plots_show_draws_every_declared_plot_with_its_axes(smoke: Path, tmp_path: Path):
    run(["dvc", "plots", "show", "-o", str(tmp_path / "plots")], smoke)
    html = (tmp_path / "plots" / "index.html").read_text()
    plots = json.loads(run(["dvc", "plots", "show", "--json"], smoke).stdout)
    how = {fill(s.outs[name], s, value, SMOKE): plot for s in STAGES for name, plot in s.plots.items()
           for value in get(SMOKE, s.foreach)}
    assert not plots.get("errors") and set(plots["data"]) == set(how)
    assert html.count("vegaEmbed(") == len(how), "the HTML draws every declared plot"
    for path, (chart,) in plots["data"].items():
        content, plot = chart["content"], how[path]
        fields = {d.get("field", plot.y[0]) for d in content["data"]["values"]}
        assert fields == set(plot.y) and plot.title in content["title"]["text"], path
        spec = json.dumps(content)
        assert all(f'"title": {json.dumps(label)}' in spec for label in (plot.x_label, plot.y_label)), path


def test_an_experiment_on_one_key_changes_only_its_stages_metrics(smoke_run: Path, tmp_path: Path):
    repo = copy_run(smoke_run, tmp_path / "repo", ignore=shutil.ignore_patterns(".snakemake"))
    git = ["git", "-c", "user.email=ci@taskgeom", "-c", "user.name=taskgeom"]
    run(["git", "add", "-A"], repo)
    run([*git, "commit", "-qm", "baseline"], repo)  # dvc.lock: the Snakemake run, recorded by its onsuccess
    log = run(["dvc", "exp", "run", "-n", "wrank-2", "-S", f"++learn.heads.{HEAD}.w_rank=2.0"], repo).stdout
    ran = {line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage")}
    assert ran <= {"check-params", f"head@{HEAD}", "metric-tables", "findings", "report"} and f"head@{HEAD}" in ran, log

    rows = json.loads(run(["dvc", "exp", "show", "--json"], repo).stdout)
    (exp,) = [e for row in rows for e in row.get("experiments") or [] if e["name"] == "wrank-2"]
    data = exp["revs"][0]["data"]
    assert data["params"]["params.yaml"]["data"]["learn"]["heads"][HEAD]["w_rank"] == 2.0
    assert -1 <= data["metrics"][HEAD_METRICS]["data"]["rho_test"] <= 1
    diff = json.loads(run(["dvc", "metrics", "diff", "--json", "HEAD", "wrank-2"], repo).stdout)
    assert set(diff) == {HEAD_METRICS}, diff  # its head's figures change, no other stage's
