"""The paper profile end to end, in miniature: ``taskgeom fixtures paper-mini`` writes the paper's
data sets and models in their real formats, ``taskgeom params use paper-mini && snakemake -c2``
runs every stage of the paper profile on them, and the report holds every table of the paper that
the profile produces, filled from that run, beside the paper's figures. Its files lie outside the
repository, linked at data/external/paper-mini: a copy of them elsewhere reruns nothing, a changed
byte or other weights rerun exactly what reads them (the run's copies, running single stages)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import copy_repo, copy_run, jobs, plans, run

from taskgeom.artifacts.tables import read_table
from taskgeom.stages.report import NO_ROWS

pytestmark = [pytest.mark.pipeline, pytest.mark.long]

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
    base = tmp_path_factory.mktemp("paper-mini")
    repo = copy_repo(base / "repo", profile="paper-mini")
    files = shutil.copytree(paper_mini_files[0], base / "files")  # where this machine keeps them
    run(["taskgeom", "data", "link", "paper-mini", str(files)], repo)
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


# --- where the data lie is machine-local; what they hold is what counts (docs/sharing.md) ---

def downstream(every: dict, names: set[str]) -> set[str]:
    """The commands of the instances ``names`` and of every instance reading what they write, directly or not."""
    chosen = {cmd for cmd, (name, _, _) in every.items() if name in names}
    while grown := {cmd for cmd, (_, inputs, _) in every.items() if cmd not in chosen
                    and inputs & set().union(*(every[c][2] for c in chosen))}:
        chosen |= grown
    return chosen


def readers(every: dict, files: set[str]) -> set[str]:
    return {name for name, inputs, _ in every.values() if inputs & files}


def test_data_elsewhere_rerun_nothing_and_changed_content_reruns_exactly_its_readers(mini: Path, tmp_path: Path):
    """On a copy of the run: the same files in another folder (and one checkpoint in a third) plan
    nothing in either front end; one changed byte of one image and other weights in one checkpoint
    plan exactly their entries' stages and everything downstream of them, nothing else."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    repo = copy_run(mini, tmp_path / "repo")
    files = shutil.copytree((mini / "data/external/paper-mini").resolve(), tmp_path / "elsewhere/paper-mini")
    run(["taskgeom", "data", "link", "paper-mini", str(files)], repo)
    moved = shutil.move(files / "models/clip-b16", tmp_path / "checkpoints/clip-b16")  # one checkpoint apart
    (files / "models/clip-b16").symlink_to(moved, target_is_directory=True)
    identity = (repo / "data/identity.yaml").read_bytes()
    assert plans(repo) == (set(), set())
    assert "Running stage" not in run(["dvc", "repro"], repo).stdout
    assert (repo / "data/identity.yaml").read_bytes() == identity
    index = json.loads((repo / "data/sources/imagenet-val.json").read_text())
    assert all(not Path(k).is_absolute() and "/" in k for k in index["keys"])  # <wnid>/ILSVRC2012_val_...

    image = files / "imagenet-val" / index["keys"][0]  # in imagenet-val only: the imagenet-val-* are disjoint
    data = bytearray(image.read_bytes())
    assert data[6:11] == b"JFIF\0"
    data[15] ^= 1  # the JFIF header's horizontal density: other bytes, the same pixels
    image.write_bytes(bytes(data))
    weights = moved / "model.safetensors"
    with safe_open(weights, "pt") as f:
        tensors, metadata = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    name = next(k for k in sorted(tensors) if tensors[k].ndim >= 2 and tensors[k].is_floating_point())
    save_file(tensors | {name: tensors[name] * 1.5}, weights, metadata)
    every, changed = jobs(repo), {"sources@imagenet-val", "zoo@clip-b16"}
    assert plans(repo) == (downstream(every, changed), {"check-params", *changed})
    run(["dvc", "repro", "-s", "check-params", "sources@imagenet-val"], repo)  # only the affected source
    index = json.loads((repo / "data/sources/imagenet-val.json").read_text())
    assert index["files"][index["keys"][0]] == hashlib.sha256(bytes(data)).hexdigest()
    stale = set(json.loads(run(["dvc", "status", "--json"], repo).stdout))
    assert stale == readers(every, {"data/sources/imagenet-val.json"}) | {"zoo@clip-b16"}


def test_a_teammate_who_pulls_the_paper_profile_has_nothing_to_rerun(mini: Path, tmp_path: Path):
    """The paper profile's DAG shape (no VAE: a collection that holds nothing, whose empty folder
    neither git nor DVC carries) shared through a DVC remote, params.yaml and dvc.lock committed: a
    teammate's clone with the data at a third path pulls, before or after a first look, and has
    nothing to rerun under either front end (pipeline/sync.py, dag.empty_collections)."""
    origin = copy_run(mini, tmp_path / "origin")
    git = ["git", "-c", "user.email=ci@taskgeom", "-c", "user.name=taskgeom"]
    run(["dvc", "remote", "add", "-d", "team", str(tmp_path / "remote")], origin)
    run(["git", "add", "-A"], origin)
    run([*git, "commit", "-qm", "results"], origin)
    run(["dvc", "push"], origin)
    files = shutil.copytree((mini / "data/external/paper-mini").resolve(), tmp_path / "third/paper-mini")
    for order in ("pull-first", "look-first"):
        clone = tmp_path / order
        run(["git", "clone", "-q", str(origin), str(clone)], tmp_path)
        run(["taskgeom", "data", "link", "paper-mini", str(files)], clone)
        if order == "look-first":
            run(["snakemake", "-n"], clone)
        run(["dvc", "pull"], clone)
        assert plans(clone) == (set(), set()), order
