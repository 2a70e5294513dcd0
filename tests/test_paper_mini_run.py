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
from conftest import copy_repo, copy_run, dvc_stages, run, snakemake_jobs

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

def relocated(mini: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the finished run whose paper-mini files are a byte-for-byte copy in another folder,
    linked there (as a teammate who keeps them elsewhere would)."""
    repo = copy_run(mini, tmp_path / "repo")
    files = shutil.copytree((mini / "data/external/paper-mini").resolve(), tmp_path / "elsewhere/paper-mini")
    run(["taskgeom", "data", "link", "paper-mini", str(files)], repo)
    return repo, files


def planned(repo: Path) -> set[str]:
    """The shell commands of the jobs ``snakemake -n`` plans."""
    out = run(["snakemake", "-n", "--printshellcmds"], repo).stdout
    return {line.removeprefix("Shell command: ") for line in out.splitlines() if line.startswith("Shell command: ")}


def downstream(repo: Path, stage: str) -> set[str]:
    """Stage instance ``stage`` and every job that reads what it writes, directly or not, by command."""
    jobs = snakemake_jobs(repo)
    chosen = {next(cmd for cmd in jobs if dvc_name(cmd) == stage)}
    while grown := {c for c, job in jobs.items() if c not in chosen
                    and job["inputs"] & set().union(*(jobs[d]["outputs"] for d in chosen))}:
        chosen |= grown
    return chosen


def dvc_name(command: str) -> str:
    """``taskgeom zoo --model 'clip-b16' --log ...`` -> ``zoo@clip-b16``."""
    words = command.split()
    return f"{words[1]}@{words[3].strip(chr(39))}" if words[2].startswith("--") and words[2] != "--log" else words[1]


def dvc_changed(repo: Path) -> set[str]:
    return set(json.loads(run(["dvc", "status", "--json"], repo).stdout or "{}"))


def rerun_and_readers(repo: Path, stage: str) -> tuple[set[str], set[str]]:
    """Run ``check-params`` and ``stage`` alone with DVC; (its outputs whose bytes changed, the DVC
    stages that read one of them, directly or through a collected directory)."""
    stages = dvc_stages(repo)
    outs = next(s["outs"] for s in stages.values() if s["name"] == stage)
    before = {o: output_digests_of(repo / o) for o in outs}
    run(["dvc", "repro", "-s", "check-params", stage], repo)
    changed = {o for o in outs if output_digests_of(repo / o) != before[o]}
    readers = {s["name"] for s in stages.values()
               if any(d == o or o.startswith(d + "/") for d in s["deps"] for o in changed)}
    return changed, readers


def output_digests_of(path: Path) -> dict[str, str]:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def test_the_same_files_in_another_folder_rerun_nothing(mini: Path, tmp_path: Path):
    repo, files = relocated(mini, tmp_path)
    identity = (repo / "data/identity.yaml").read_bytes()
    moved = shutil.move(files / "models/clip-b16", tmp_path / "checkpoints/clip-b16")  # one checkpoint apart
    (files / "models/clip-b16").symlink_to(moved, target_is_directory=True)
    assert "Nothing to be done" in run(["snakemake", "-n"], repo).stdout
    assert "up to date" in run(["dvc", "status"], repo).stdout
    assert "Running stage" not in run(["dvc", "repro"], repo).stdout
    assert (repo / "data/identity.yaml").read_bytes() == identity
    index = json.loads((repo / "data/sources/imagenet-val.json").read_text())
    assert all(not Path(k).is_absolute() and "/" in k for k in index["keys"])  # <wnid>/ILSVRC2012_val_...


def test_one_changed_byte_reruns_its_source_and_what_reads_it_only(mini: Path, tmp_path: Path):
    repo, files = relocated(mini, tmp_path)
    key = json.loads((repo / "data/sources/imagenet-val.json").read_text())["keys"][0]
    image = files / "imagenet-val" / key
    data = bytearray(image.read_bytes())
    assert data[6:11] == b"JFIF\0"
    data[15] ^= 1  # the JFIF header's horizontal density: other bytes, the same pixels
    image.write_bytes(bytes(data))
    assert planned(repo) == downstream(repo, "sources@imagenet-val")  # its readers: imagenet-val-* are disjoint
    assert dvc_changed(repo) == {"check-params", "sources@imagenet-val"}
    changed, readers = rerun_and_readers(repo, "sources@imagenet-val")
    index = json.loads((repo / "data/sources/imagenet-val.json").read_text())
    assert changed == {"data/sources/imagenet-val.json"}
    assert index["files"][key] == hashlib.sha256(bytes(data)).hexdigest()
    assert dvc_changed(repo) == readers and "zoo@dinov2-b14" in readers


def test_other_weights_rerun_their_zoo_entry_and_what_reads_it_only(mini: Path, tmp_path: Path):
    from safetensors import safe_open
    from safetensors.torch import save_file

    repo, files = relocated(mini, tmp_path)
    weights = files / "models/clip-b16/model.safetensors"
    with safe_open(weights, "pt") as f:
        tensors, metadata = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    name = next(k for k in sorted(tensors) if tensors[k].ndim >= 2 and tensors[k].is_floating_point())
    tensors[name] = tensors[name] * 1.5
    save_file(tensors, weights, metadata)
    assert planned(repo) == downstream(repo, "zoo@clip-b16")
    assert dvc_changed(repo) == {"check-params", "zoo@clip-b16"}
    changed, readers = rerun_and_readers(repo, "zoo@clip-b16")
    assert "data/zoo/clip-b16/model.safetensors" in changed
    assert dvc_changed(repo) == readers and "diagnose@clip-cls-l10" in readers
