"""The recorder of ``benchmarks/suite_cost.py``: a test that starts a command is charged the
command's CPU, and the summary ranks tests by CPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from suite_cost import record, summarise  # noqa: E402

BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < {}: pass\n"


def test_each_test_is_charged_the_cpu_of_the_commands_it_waited_for(tmp_path: Path):
    (tmp_path / "test_busy.py").write_text(
        "import subprocess, sys\n"
        f"def test_busy():\n    subprocess.run([sys.executable, '-c', {BUSY.format(0.6)!r}], check=True)\n"
        "def test_idle():\n    pass\n")
    records = tmp_path / "records.jsonl"
    command = f"{sys.executable} -m pytest -q -p no:cacheprovider -p no:hydra_pytest {tmp_path / 'test_busy.py'}"
    totals = record(command, records)
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert [r["test"].split("::")[1] for r in lines] == ["test_busy", "test_idle"]
    busy, idle = lines
    assert busy["cpu_children_s"] >= 0.6 and idle["cpu_children_s"] < 0.1
    assert busy["cpu_children_s"] <= totals["cpu_s"] < busy["cpu_children_s"] + 30  # this run's only
    assert totals["wall_s"] >= busy["wall_s"]
    assert totals["returncode"] == 0
    tests = summarise(records, totals, tmp_path / "out", command)
    assert tests.iloc[0]["test"].endswith("test_busy")
    assert "test_busy.py" in (tmp_path / "out/suite_cost.md").read_text()
