"""The stage sampler of ``benchmarks/stage_profile.py``: a ``taskgeom`` process with it on
PYTHONPATH writes its sampled time by category at exit; other processes are left alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from conftest import REPO

HOOK = REPO / "benchmarks" / "stage_profile"
sys.path.insert(0, str(HOOK))
from sitecustomize import _category, _name  # noqa: E402


def test_the_first_matching_category_wins_and_names_come_from_the_log_path():
    assert _category(["taskgeom.stages.targets", "torch._functorch.apis", "torch.nn.modules.conv"]) == \
        "JVP, VJP and backward"
    assert _category(["taskgeom.stages.prune_dense", "torch.nn.modules.conv"]) == "forward"
    assert _category(["taskgeom.stages.zoo", "h5py._hl.dataset", "importlib._bootstrap"]) == "imports"
    assert _category(["taskgeom.stages.findings", "torchvision"]) == "other"
    assert _name(["taskgeom", "prune-dense", "--dense", "x", "--log", "logs/prune-dense/x.log"]) == "prune-dense~x"


def test_a_taskgeom_process_writes_its_samples_and_python_itself_does_not(tmp_path: Path):
    env = {**os.environ, "TASKGEOM_PROFILE": str(tmp_path), "TASKGEOM_PROFILE_INTERVAL": "0.001",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOK), os.environ.get("PYTHONPATH")]))}
    taskgeom = Path(sys.executable).with_name("taskgeom")
    subprocess.run([str(taskgeom), "--help"], env=env, check=True, capture_output=True)
    subprocess.run([sys.executable, "-c", "import taskgeom"], env=env, check=True)
    (written,) = tmp_path.glob("*.json")
    record = json.loads(written.read_text())
    assert written.name.startswith("--help.")
    assert record["argv"][1:] == ["--help"] and record["wall_s"] > 0
    total = sum(record["categories"].values())
    assert 0 < total <= record["wall_s"]
    assert abs(sum(record["frames"].values()) - total) < 1e-9 and abs(sum(record["leaves"].values()) - total) < 1e-9
    assert "imports" in record["categories"]


def test_the_report_gives_the_runs_elapsed_time_and_the_jobs_summed_wall_time_on_lines_of_their_own(
        tmp_path: Path, monkeypatch):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import profile_change
    import stage_profile

    monkeypatch.setenv("TASKGEOM_BENCHMARK_STAMP", "0123456789ab clean")
    run_dir, out = tmp_path / "run", tmp_path / "out"

    def snakemake(command, cwd, env, check):   # two jobs of 12 s and 30 s, as Snakemake and the sampler write them
        assert command[0] == "snakemake" and Path(env["TASKGEOM_PROFILE"]) == cwd / "logs" / "profile"
        for job, seconds in (("fetch", 12.0), ("zoo/tiny", 30.0)):
            tsv = cwd / "logs" / "benchmarks" / f"{job}.tsv"
            tsv.parent.mkdir(parents=True, exist_ok=True)
            tsv.write_text(f"s\th:m:s\tmax_rss\tcpu_time\n{seconds}\t0:00:{seconds:02.0f}\t100\t{seconds}\n")
            sample = cwd / "logs" / "profile" / f"{job.replace('/', '~')}.1.json"
            sample.parent.mkdir(parents=True, exist_ok=True)
            sample.write_text(json.dumps({"wall_s": seconds, "categories": {"forward": seconds},
                                          "frames": {"forward | -": seconds}, "leaves": {"-": seconds}}))

    clock = iter([100.0, 135.0])   # the run's start and end, on the script's own clock
    monkeypatch.setattr(stage_profile.subprocess, "run", snakemake)
    monkeypatch.setattr(stage_profile, "time", SimpleNamespace(
        perf_counter=lambda: next(clock), time=time.time, strftime=time.strftime))
    assert stage_profile.main([str(run_dir), "--run", "--out", str(out)]) == 0
    text = (out / "default_run_profile.md").read_text()
    lines = text.splitlines()
    assert "- Elapsed (wall-clock): the run took 35 s, from start to end of `snakemake --cores 2 --keep-going`." \
        in lines
    assert any(line.startswith("- Summed job wall time: 42 s over 2 jobs, 2 of them sampled;") for line in lines)
    assert profile_change.run_seconds(text) == 35

    # summarised again without --run: the run's record still gives its elapsed time ...
    assert stage_profile.main([str(run_dir), "--out", str(out)]) == 0
    assert profile_change.run_seconds((out / "default_run_profile.md").read_text()) == 35
    # ... until a job has run again since, or when no --run wrote a record
    later = json.loads((run_dir / stage_profile.RUN_RECORD).read_text())["ended"] + 60
    os.utime(run_dir / "logs" / "benchmarks" / "fetch.tsv", (later, later))
    for unrecorded in (False, True):
        if unrecorded:
            (run_dir / stage_profile.RUN_RECORD).unlink()
        assert stage_profile.main([str(run_dir), "--out", str(out)]) == 0
        text = (out / "default_run_profile.md").read_text()
        assert "- Elapsed (wall-clock): not recorded" in text and profile_change.run_seconds(text) is None
        assert "- Summed job wall time: 42 s over 2 jobs" in text
