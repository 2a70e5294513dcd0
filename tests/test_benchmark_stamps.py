"""Every measurement committed under results/benchmarks/ says which code made it: the commit, and
that the tree it ran from was clean (benchmarks/stamp.py)."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import stamp  # noqa: E402


def committed() -> list[str]:
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "--", stamp.OUTPUTS], capture_output=True, text=True,
                         check=True).stdout
    return out.split()


def file_stamp(path: str) -> tuple[str, str] | None:
    """(commit, tree) that the file records, None without one (or with several in a CSV)."""
    if path.endswith(".md"):
        found = stamp.STAMP.findall((REPO / path).read_text())
        return found[-1] if found else None
    if path.endswith(".csv"):
        table = pd.read_csv(REPO / path, dtype=str, keep_default_na=False)
        if not {"commit", "tree"} <= set(table.columns) or table.empty:
            return None
        pairs = set(zip(table["commit"], table["tree"]))
        return pairs.pop() if len(pairs) == 1 else None
    return None


def test_every_committed_benchmark_file_carries_a_clean_stamp():
    files = committed()
    stamps = {path: file_stamp(path) for path in files}
    assert [p for p, s in stamps.items() if s is None] == [], "without a stamp (Markdown line or CSV columns)"
    assert [p for p, s in stamps.items() if s[1] != "clean" or len(s[0]) != 12] == [], "not from a clean tree"
    for path in files:  # a table's CSV and Markdown come from the same run
        twin = path[:-3] + "csv" if path.endswith(".md") else None
        if twin in stamps:
            assert stamps[path] == stamps[twin], path


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A repository of one commit, with benchmarks/stamp.py looking at it."""
    git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / stamp.OUTPUTS).mkdir(parents=True)
    (tmp_path / stamp.OUTPUTS / "old.md").write_text("old\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    monkeypatch.setattr(stamp, "REPO", tmp_path)
    monkeypatch.delenv(stamp.ENV, raising=False)
    return tmp_path


def test_the_stamp_is_dirty_with_a_changed_or_new_file_and_not_for_benchmark_outputs(tree):
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    stamp.write_stamped(tree / stamp.OUTPUTS, "old", pd.DataFrame({"a": [1, 2]}), "# old")
    assert stamp.code_stamp() == (head, "clean")
    (tree / "dvc.lock").write_text("schema: '2.0'\n")  # the measured run's record of its outputs
    assert stamp.code_stamp() == (head, "clean")
    (tree / "new.py").write_text("")
    assert stamp.code_stamp() == (head, "dirty")
    (tree / "new.py").unlink()
    (tree / "code.py").write_text("x = 2\n")
    assert stamp.code_stamp() == (head, "dirty")


def test_written_files_carry_the_stamp_the_check_reads(tree, monkeypatch):
    monkeypatch.setenv(stamp.ENV, "0123456789ab clean")
    out = tree / stamp.OUTPUTS
    stamp.write_stamped(out, "t", pd.DataFrame({"a": [1, 2]}), "# t\n\n| a |\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tree)
    assert file_stamp(f"{stamp.OUTPUTS}/t.md") == file_stamp(f"{stamp.OUTPUTS}/t.csv") == ("0123456789ab", "clean")
    assert (out / "t.md").read_text().endswith("| a |\n\nCode: commit 0123456789ab, clean tree.\n")
