"""The recorder of ``benchmarks/suite_cost.py``: a test that starts a command is charged the
command's CPU, and the summary ranks tests by CPU; every Python process records its own CPU."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from suite_cost import hook_path, process_kind, processes_table, record, summarise  # noqa: E402

BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < {}: pass\n"
# a process that outlives its test (as the stage server does), after waiting for a busy child
LIVES_ON = ("import os, sys, time\npid = os.fork()\nif pid == 0:\n    " + BUSY.format(0.6).replace("\n", "\n    ")
            + "os._exit(0)\nos.waitpid(pid, 0)\nprint('done', flush=True)\ntime.sleep(120)\n")


def test_each_test_is_charged_the_cpu_of_the_commands_it_waited_for(tmp_path: Path):
    (tmp_path / "test_busy.py").write_text(
        "import subprocess, sys\n"
        f"def test_busy():\n    subprocess.run([sys.executable, '-c', {BUSY.format(0.6)!r}], check=True)\n"
        "def test_idle():\n    pass\n"
        "def test_lives_on():\n    import atexit\n"
        f"    p = subprocess.Popen([sys.executable, '-c', {LIVES_ON!r}], stdout=subprocess.PIPE)\n"
        "    atexit.register(p.kill)\n    p.stdout.readline()\n")
    records = tmp_path / "records.jsonl"
    command = f"{sys.executable} -m pytest -q -p no:cacheprovider -p no:hydra_pytest {tmp_path / 'test_busy.py'}"
    totals = record(command, records)
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert [r["test"].split("::")[1] for r in lines] == ["test_busy", "test_idle", "test_lives_on"]
    busy, idle, lives_on = lines  # (a live process's times come in clock ticks: a margin)
    assert busy["cpu_children_s"] >= 0.6 and idle["cpu_children_s"] < 0.1 and lives_on["cpu_children_s"] >= 0.5
    assert busy["cpu_children_s"] <= totals["cpu_s"] < busy["cpu_children_s"] + 30  # this run's only
    assert totals["wall_s"] >= busy["wall_s"]
    assert totals["returncode"] == 0
    tests = summarise(records, totals, tmp_path / "out", command)
    assert tests.iloc[0]["test"].endswith("test_busy")
    assert "test_busy.py" in (tmp_path / "out/suite_cost.md").read_text()


def test_each_python_process_records_its_own_cpu_and_the_hook_is_removed(tmp_path: Path):
    child = BUSY.format(0.4).replace("\n", "\n    ")
    code = ("import os, sys\npid = os.fork()\nif pid == 0:\n    " + child + "sys.exit(0)\n"
            + BUSY.format(0.4) + "os.waitpid(pid, 0)\n")
    folder = tmp_path / "processes"
    folder.mkdir()
    totals = record(f"{sys.executable} -c {shlex.quote(code)}", tmp_path / "records.jsonl", folder)
    assert totals["returncode"] == 0
    table = processes_table(folder)
    assert list(table.index) == ["python -c"] and table.loc["python -c", "processes"] == 2  # the fork too
    assert 0.8 <= table.loc["python -c", "cpu_s"] <= totals["cpu_s"]  # each its own, none twice
    assert not hook_path().exists()


def test_a_process_is_named_by_its_tool_and_subcommand():
    venv = "/x/.venv/lib/python3.11/site-packages"
    assert process_kind([f"{venv}/snakemake/__main__.py", "--snakefile", "S", "--target-jobs", "j"]) == \
        "snakemake (SLURM job)"
    assert process_kind([f"{venv}/snakemake/__main__.py", "-n"]) == "snakemake"
    assert process_kind(["/r/src/taskgeom/pipeline/dvc_atomic.py", "--wait-for-lock", "status"]) == "dvc status"
    assert process_kind(["taskgeom", "targets", "--probe", "p"]) == "taskgeom targets"
    assert process_kind(["-c"]) == "python -c"
