"""The per-image values the stages publish recompute, with pandas and scipy alone, the p-values
and intervals of their tables and of the findings (docs/results.md), on the smoke run: a CLS and
a dense item of the findings, a retrieval interval over queries, a head's intervals."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from taskgeom.evaluate.findings import TOME

pytestmark = pytest.mark.pipeline


def per_image(rows: pd.DataFrame, method: str) -> np.ndarray:
    """Each image's value of ``method``: the mean over seeds in float32, as the stage takes it."""
    rows = rows[rows["method"] == method]
    return rows["value"].to_numpy(np.float32).reshape(rows["seed"].nunique(), -1).mean(axis=0).astype(np.float64)


def recomputed(path: Path, setting: dict) -> tuple[float, float, float, list[float]]:
    """(p of importance against ToMe's score, importance's interval low and high, its image values)
    of ``setting`` from a per-image file, as docs/results.md does it."""
    with gzip.open(path, "rt") as f:
        boot = json.loads(f.readline().removeprefix("# provenance: "))["params"]["learn"]["bootstrap"]
    values = pd.read_csv(path, skiprows=1)
    rows = values[np.logical_and.reduce([values[k] == v for k, v in setting.items()])]
    importance, tome = per_image(rows, "importance"), per_image(rows, TOME)
    p = stats.wilcoxon(importance, tome, zero_method="wilcox").pvalue
    ci = stats.bootstrap((importance,), np.mean, n_resamples=boot["resamples"], confidence_level=boot["level"],
                         method="percentile", random_state=np.random.default_rng(boot["seed"]),
                         vectorized=True).confidence_interval
    return float(p), float(ci.low), float(ci.high), importance.tolist()


def table_row(path: Path, setting: dict, method: str) -> pd.Series:
    table = pd.read_csv(path, skiprows=1)
    keep = np.logical_and.reduce([table[k] == v for k, v in {**setting, "method": method}.items()])
    assert keep.sum() == 1, (path, setting, method)
    return table[keep].iloc[0]


def check_item(smoke: Path, part: str, model: str, setting: dict, claim: str, label: str) -> None:
    """The setting's p and interval recomputed from the per-image file equal the stage's table's,
    and the findings' item ``label`` of ``claim`` reports that p."""
    p, low, high, importance = recomputed(smoke / f"results/prune/{part}/{model}_per_image.csv.gz", setting)
    table = smoke / f"results/prune/{part}/{model}.csv"
    tome, mine = table_row(table, setting, TOME), table_row(table, setting, "importance")
    assert math.isclose(p, tome["p_vs_importance"], rel_tol=1e-5), (p, tome["p_vs_importance"])
    assert math.isclose(low, mine["ci_low"], rel_tol=1e-5, abs_tol=1e-9), (low, mine["ci_low"])
    assert math.isclose(high, mine["ci_high"], rel_tol=1e-5, abs_tol=1e-9), (high, mine["ci_high"])
    assert math.isclose(float(np.mean(importance)), mine["mean"], rel_tol=1e-5) and len(importance) == mine["images"]
    findings = pd.read_csv(smoke / "results/findings.csv", skiprows=1).set_index("claim")
    items = dict(item.split(": ", 1) for item in findings.loc[claim, "ours"].split("; "))
    assert items[label].endswith(f"(p {p:.2g})"), (label, items[label], p)


def base_setting(smoke: Path) -> tuple[str, int]:
    """The first domain and resolution of the smoke run's pruning: the findings' base setting."""
    prune = yaml.safe_load((smoke / "params.yaml").read_text())["prune"]
    return prune["domains"][0], prune["resolutions"][0]


def test_a_cls_and_a_dense_finding_recompute_from_the_per_image_values(smoke_run: Path):
    domain, res = base_setting(smoke_run)
    ratio = 0.5
    check_item(smoke_run, "cls", "tiny-cls",
               {"domain": domain, "resolution": res, "ratio": ratio, "metric": "cls_degradation"},
               "Geometric merging beats ToMe on CLS decoders at every η", f"tiny-cls η {ratio:g}")
    check_item(smoke_run, "dense", "tiny-dpt",
               {"domain": domain, "resolution": res, "schedule": "2-stage", "llf": True, "ratio": ratio,
                "metric": "add_silog"},
               "2-stage pruning with LLF beats ToMe on dense depth from η = 0.2", f"tiny-dpt η {ratio:g}")


def bootstrap(values: np.ndarray, boot: dict) -> tuple[float, float]:
    ci = stats.bootstrap((values,), np.mean, n_resamples=boot["resamples"], confidence_level=boot["level"],
                         method="percentile", random_state=np.random.default_rng(boot["seed"]),
                         vectorized=True).confidence_interval
    return float(ci.low), float(ci.high)


def test_retrieval_and_head_intervals_recompute_from_their_values(smoke_run: Path):
    boot = yaml.safe_load((smoke_run / "params.yaml").read_text())["learn"]["bootstrap"]
    queries = pd.read_csv(smoke_run / "results/retrieval/runs/tiny-dpt_per_query.csv.gz", skiprows=1)
    table14 = pd.read_csv(smoke_run / "results/retrieval/table14.csv", skiprows=1)
    row = table14[(table14["model"] == "tiny-dpt") & (table14["method"] == "drm")].iloc[0]
    rho = queries.query(f"domain == '{row['domain']}' and method == 'drm' and metric == 'rho'")["value"].to_numpy()
    assert len(rho) == row["rho_n"]
    assert np.allclose(bootstrap(rho, boot), (row["rho_low"], row["rho_high"]), rtol=1e-5)

    head = "cls-embed-l4"
    images = pd.read_csv(smoke_run / f"results/heads/{head}_per_image.csv.gz", skiprows=1)
    summary = json.loads((smoke_run / f"results/heads/{head}.json").read_text())
    test = images[images["quantity"] == "rho_test"]
    seed_means = test["value"].to_numpy().reshape(test["seed"].nunique(), -1).mean(axis=1)  # over seeds: the table's
    ours = summary["summary"]["rho_test"]
    assert np.allclose(bootstrap(seed_means, boot), (ours["low"], ours["high"]), rtol=1e-12)
    floor = images.loc[images["quantity"] == "rho_position_only", "value"].to_numpy()  # over images
    assert np.allclose(bootstrap(floor, boot), (summary["rho_mean_map"]["low"], summary["rho_mean_map"]["high"]),
                       rtol=1e-12)
