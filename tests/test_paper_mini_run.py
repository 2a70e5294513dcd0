"""The paper profile end to end, in miniature: ``taskgeom fixtures paper-mini`` writes the paper's
data sets and models in their real formats, ``taskgeom params use paper-mini && snakemake -c2``
runs every stage of the paper profile on them, and the report holds every table of the paper that
the profile produces, filled from that run, beside the paper's figures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import copy_repo, run

from taskgeom.artifacts.tables import read_table
from taskgeom.stages.report import NO_ROWS

pytestmark = pytest.mark.pipeline

# report section title -> the CSV behind it; each must hold rows from this run
PAPER_TABLES = {
    "Table 1: the tractability diagnostic": "diagnose/table1.csv",
    "Power-iteration convergence (App. C.3)": "diagnose/power_iterations.csv",
    "Table 13: the SPN from RandNLA vs exact supervision": "metric/table13.csv",
    "Table 2: token merging (CLS) and pruning (dense)": "prune/table2.csv",
    "Tables 4–5: pruning at higher resolutions": "prune/resolutions.csv",
    "Pruning schedules and Last-Layer Fusion (App. E.1)": "prune/schedules.csv",
    "Table 12: every baseline": "prune/baselines.csv",
    "Table 14: task-induced retrieval, in-distribution (App. K)": "retrieval/table14.csv",
    "Table 15: task-induced retrieval, cross-domain": "retrieval/table15.csv",
}


@pytest.fixture(scope="module")
def mini(paper_mini_files: tuple[Path, dict], tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = copy_repo(tmp_path_factory.mktemp("paper-mini") / "repo", profile="paper-mini")
    shutil.copytree(paper_mini_files[0], repo / "data/paper-mini")  # `taskgeom fixtures paper-mini data/paper-mini`
    run(["taskgeom", "params", "use", "paper-mini"], repo)
    run(["snakemake", "--profile", "profiles/local", "--cores", "2"], repo)
    return repo


def test_every_paper_table_is_filled_from_the_run(mini: Path):
    report = (mini / "results/REPORT.md").read_text()
    assert "Profile `paper-mini`" in report
    for title, csv in PAPER_TABLES.items():
        section = report.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
        assert NO_ROWS not in section, title
        table = read_table(mini / "results" / csv)
        ours = table[table["model"] != "paper"] if "model" in table else table
        assert len(ours), f"{csv}: no rows of this run"
    table2 = read_table(mini / "results/prune/table2.csv")
    assert {"dinov2-b14", "clip-b16", "dpt-imagenet", "dpt-nyu"} <= set(table2["model"])  # Table 10: CLIP's rows


def test_each_stage_read_the_papers_data_sets_through_each_hosts_preprocessing(mini: Path):
    cls = json.loads((mini / "results/prune/cls/clip-b16.json").read_text())["provenance"]["input"]
    assert cls["rgb@112"]["source"]["kind"] == "imagenet_val"
    assert cls["sketch@112"]["source"]["kind"] == "imagenet_sketch"
    nyu = json.loads((mini / "results/prune/dense/dpt-nyu.json").read_text())["provenance"]["input"]
    assert nyu["rgb@112"]["source"]["kind"] == "nyu_depth_v2"
    retrieval = json.loads((mini / "results/retrieval/runs/dpt-depth.json").read_text())["provenance"]["input"]
    assert retrieval["sketch"]["source"]["name"] == "nyu-test"
    assert retrieval["rgb"]["preprocess"]["mode"] == "lower_bound"      # Depth-Anything-V2's own resize
    diag = json.loads((mini / "results/diagnose/probes/dinov2-cls-l10.json").read_text())["provenance"]["input"]
    assert diag["preprocess"]["mode"] == "timm"
    zoo = {m: json.loads((mini / f"results/zoo/{m}.json").read_text())["provenance"]["input"]
           for m in ("dinov2-b14", "depth-anything-v2")}
    assert zoo["dinov2-b14"]["source"]["name"] == "imagenet-val" and zoo["dinov2-b14"]["preprocess"]["mode"] == "timm"
    assert zoo["depth-anything-v2"]["source"]["kind"] == "nyu_depth_v2"


def test_dvc_agrees_that_the_run_is_up_to_date(mini: Path):
    assert "up to date" in run(["dvc", "status"], mini).stdout
