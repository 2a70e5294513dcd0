"""The smoke profile end to end through both front ends: the two DAGs agree, runs are
byte-reproducible, bad parameters stop everything, interrupted stages resume cleanly, and every
result records where it came from. Incremental reruns: tests/test_reruns.py; remotes:
tests/test_remotes.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from conftest import SMOKE, WALL_CLOCK, dvc_stages, one_item_per_stage, run, tool_env

import taskgeom
from taskgeom.artifacts import provenance
from taskgeom.artifacts.tables import read_table
from taskgeom.evaluate.findings import CLAIMS, FAILS, HOLDS, MIXED
from taskgeom.pipeline.stage import fill
from taskgeom.stages.zoo import CHECKPOINT_EVERY

pytestmark = pytest.mark.pipeline

TABLES = ("results/findings.csv", "results/zoo_table.csv", "results/data/summary.csv", "results/REPORT.md",
          *(f"results/diagnose/{t}.csv" for t in ("table1", "power_iterations", "output_metric", "accuracy")),
          "results/diagnose/probes/mv-depth-reads.json",
          *(f"results/metric/{t}.csv" for t in ("importance", "head_ablations", "table13", "vae")),
          *(f"results/prune/{t}.csv" for t in ("table2", "resolutions", "schedules", "second_domain", "baselines",
                                               "accuracy")),
          *(f"results/retrieval/{t}.csv" for t in ("table14", "table15", "ablation", "two_stage")))


def test_snakemake_run_leaves_the_tables_and_nothing_to_do(smoke: Path):
    for rel in (*TABLES, "results/zoo_table.md", "results/figures/world_samples.png"):
        assert (smoke / rel).is_file(), rel
    report = (smoke / "results/REPORT.md").read_text()
    assert report.index("## Findings") < report.index("## Data") < report.index("## Model zoo")
    assert "world_samples.png" in report
    findings = read_table(smoke / "results/findings.csv")  # complete, not that its verdicts hold
    assert list(findings["claim"]) == [c.claim for c in CLAIMS] and findings["rule"].str.len().gt(0).all()
    assert set(findings["verdict"]) <= {HOLDS, FAILS, MIXED}  # the smoke profile reaches every claim
    assert "## Table 1: the tractability diagnostic" in report and "kappa_curves.png" in report
    table1 = read_table(smoke / "results/diagnose/table1.csv")
    ours = table1[table1.source == "ours"].set_index("probe")
    assert set(ours.index) == {p.split("@")[1] for p in PROBES}
    assert ours.loc["mv-camera-l7", "regime"] == "rank-bounded"       # M = 2 views × 9 ≤ r
    assert ours["kappa_cap"].between(0, 1).all() and (ours["erank"] >= 1).all()
    assert (table1.source == "paper").sum() == 6
    assert "## Table 13: the SPN from RandNLA vs exact supervision" in report and "importance_maps.png" in report
    heads = read_table(smoke / "results/metric/importance.csv")
    assert set(heads[heads.source == "ours"]["head"]) == {"cls-embed-l4", "dpt-depth-l4", "dpt-block-norm"}
    assert heads["rho"].between(-1, 1).all()
    t13 = read_table(smoke / "results/metric/table13.csv")
    assert set(t13[t13.source == "ours"]["supervision"]) == {"random-init", "exact", "q1", "q2"}
    assert t13["v1"].between(0, 1 + 1e-6).all()
    dry = run(["snakemake", "-n"], smoke)
    assert "Nothing to be done" in dry.stdout + dry.stderr
    # the run recorded itself in dvc.lock (pipeline/sync.py): one state after either front end
    assert json.loads(run(["dvc", "status", "--json"], smoke).stdout) == {}
    for rel in ("logs/fetch.log", "logs/zoo/tiny-cls.log", "logs/benchmarks/zoo/tiny-cls.tsv"):
        assert (smoke / rel).is_file(), rel


def test_dvc_repro_reproduces_snakemake_byte_for_byte_and_is_clean(smoke: Path):
    """Every stage once (its first item), forced alone under DVC, writes the bytes that
    Snakemake's run wrote, and leaves DVC with nothing to do."""
    jobs = one_item_per_stage(SMOKE)
    outs = [fill(t, s, item, SMOKE) for s, item in jobs for t in s.outs.values()]
    before = {rel: (smoke / rel).read_bytes() for rel in outs if not rel.startswith(WALL_CLOCK)}
    # a `dvc` process of its own, as a user's (the suite's other DVC commands share a warm one)
    run(["dvc", "repro", "--force", "--single-item", *(s.address(item) for s, item in jobs)], smoke, fresh=True)
    for rel, content in before.items():
        assert (smoke / rel).read_bytes() == content, f"{rel} differs between two runs with the same seeds"
    status = run(["dvc", "status", "--json"], smoke)
    assert json.loads(status.stdout) == {}


PROBES = [f"diagnose@{name}" for name in SMOKE["diagnose"]["probes"]]


def test_invalid_params_fail_before_any_work_and_keep_outputs_and_logs(smoke: Path):
    params_path = smoke / "params.yaml"
    original = params_path.read_text()
    kept = lambda: {p: p.read_bytes() for d in ("results", "logs") for p in (smoke / d).rglob("*") if p.is_file()}
    snapshot = kept()
    try:
        params_path.write_text(original.replace("  resolution: 64", "  resolution: 64\n  sede: 1"))
        for cmd in (["snakemake", "--cores", "2", "--forceall"], ["dvc", "repro", "--force"],
                    ["taskgeom", "fetch", "--log", "logs/fetch.log"]):
            proc = run(cmd, smoke, check=False)
            assert proc.returncode != 0, cmd
            assert "unknown key world.sede" in proc.stdout + proc.stderr, cmd
        params_path.write_text(original.replace("lr: 0.002", "lr: -1.0", 1))
        proc = run(["taskgeom", "zoo", "--model", "tiny-cls", "--log", "logs/zoo/tiny-cls.log"], smoke, check=False)
        assert proc.returncode == 2 and "zoo.tiny-cls.lr" in proc.stderr
        evil = "x;touch PWNED;#"  # a name that reaches a command line; `dvc repro -s` skips check-params
        params = yaml.safe_load(original)
        params["zoo"][evil] = params["zoo"]["tiny-cls"]
        params_path.write_text(yaml.safe_dump(params, sort_keys=False))
        for cmd in (["dvc", "repro", "-s", f"zoo@{evil}"],
                    ["snakemake", "--cores", "1", f"data/zoo/{evil}/config.json"]):
            proc = run(cmd, smoke, check=False)
            assert proc.returncode != 0 and not (smoke / "PWNED").exists(), (cmd, proc.stderr[-2000:])
    finally:
        params_path.write_text(original)
    assert kept() == snapshot  # a refused call leaves every output and every earlier log as it was


def test_every_result_file_records_where_it_came_from(smoke: Path):
    for stage in dvc_stages(smoke).values():
        name = stage["name"].split("@")[0]
        if name == "check-params":  # its output is the parameter guard, not a result
            continue
        for rel in stage["outs"]:
            record = provenance.read(smoke / rel)
            assert record["stage"].split("[")[0] == name, rel
            assert record["code_version"].startswith(taskgeom.__version__), rel
            assert record["device"] in {"cpu", "cuda"} | {f"cuda:{i}" for i in range(8)}, rel
            # a source's index describes files, the same bytes on any machine holding them (docs/sharing.md)
            assert ("machine" not in record) if name == "sources" else record["machine"], rel
            assert record["params"].keys() == {k.split(".")[0] for k in stage["params"]}, rel


def kill_when(proc: subprocess.Popen, ready, timeout: float = 120) -> bool:
    """SIGKILL ``proc`` once ``ready()`` holds; False if it finished first."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if ready():
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.05)
    proc.wait()
    return False


def interrupt_and_resume(repo: Path) -> None:
    """Kill fetch and zoo@tiny-dpt mid-write in ``repo``; each rerun resumes from what was left."""
    partial = repo / "data/world/.partial/.staged.train.h5"   # fetch writes train.h5 staged (pipeline/publish.py)
    fetch = subprocess.Popen(["taskgeom", "fetch"], cwd=repo, env=tool_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert kill_when(fetch, lambda: partial.exists() and partial.stat().st_size > 200_000)
    assert not (repo / "data/world/train.h5").exists()
    log = run(["taskgeom", "fetch"], repo).stderr
    # HDF5 keeps no journal: a kill can also leave the partial file damaged, and then it starts over
    assert "train: resuming at scene" in log or "train.h5: the partial file is damaged" in log, log

    for source in ("world-train", "world-test"):  # what the zoo model reads
        run(["taskgeom", "sources", "--source", source], repo)
    state = repo / "data/zoo/tiny-dpt/.partial/train_state.safetensors"
    zoo = subprocess.Popen(["taskgeom", "zoo", "--model", "tiny-dpt"], cwd=repo, env=tool_env(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert kill_when(zoo, state.exists)
    assert not (repo / "data/zoo/tiny-dpt/model.safetensors").exists()
    log = run(["taskgeom", "zoo", "--model", "tiny-dpt"], repo).stderr
    assert "resuming at step" in log


def test_killed_stages_leave_no_half_written_file_and_resume_to_the_same_result(repo_copy: Path, tmp_path: Path):
    params = yaml.safe_load((repo_copy / "params.yaml").read_text())
    # fetch is killed once its staged train split passes 200 kB (its first chunks of 8 scenes, of the
    # smoke profile's 64), with most of its work still to do; the zoo model at its first checkpoint,
    # 10 steps before its end (small batches: the steps before the checkpoint are the cost, and
    # nothing here is judged by them)
    assert params["world"]["splits"]["train"] >= 64
    params["world"]["chunk"] = 8
    params["zoo"]["tiny-dpt"].update(steps=CHECKPOINT_EVERY + 10, batch_size=2)
    (repo_copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    reference = tmp_path / "reference"
    shutil.copytree(repo_copy, reference)
    # the uninterrupted run, on the other core while this one is killed and resumed
    with open(tmp_path / "uninterrupted.log", "w") as err:
        uninterrupted = subprocess.Popen("taskgeom fetch && taskgeom sources --source world-train && "
                                         "taskgeom sources --source world-test && taskgeom zoo --model tiny-dpt",
                                         shell=True,
                                         cwd=reference, env=tool_env(), stdout=subprocess.DEVNULL, stderr=err,
                                         start_new_session=True)
    try:
        interrupt_and_resume(repo_copy)
        assert uninterrupted.wait(timeout=600) == 0, (tmp_path / "uninterrupted.log").read_text()[-4000:]
    finally:
        if uninterrupted.poll() is None:  # a failure above: stop the shell and the stage it runs
            os.killpg(uninterrupted.pid, signal.SIGKILL)
            uninterrupted.wait()
    for split in ("train", "test", "mv_train"):
        with h5py.File(reference / f"data/world/{split}.h5") as a, h5py.File(repo_copy / f"data/world/{split}.h5") as b:
            np.testing.assert_array_equal(a["r64/rgb"][:], b["r64/rgb"][:])
            np.testing.assert_array_equal(a["r64/depth"][:], b["r64/depth"][:])
        world = f"data/world/{split}.h5"
        assert (reference / world).read_bytes() == (repo_copy / world).read_bytes()
    for rel in ("data/zoo/tiny-dpt/model.safetensors", "results/zoo/tiny-dpt.json", "results/zoo/tiny-dpt_curve.csv"):
        assert (reference / rel).read_bytes() == (repo_copy / rel).read_bytes(), rel
