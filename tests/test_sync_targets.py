"""``commit_targets``: after a Snakemake run, DVC commits what it ran with as few targets as name
it (DVC's cost grows with the targets it resolves): nothing for everything, a foreach group for
all its instances, single instances otherwise; never a stage the run did not bring up to date.
``dvc_in_a_stage``: the commit waits for the live DVC processes inside a stage of this repository."""

from __future__ import annotations

import json
import os
import subprocess

from taskgeom.pipeline.sync import DVC_RWLOCK, commit_targets, dvc_in_a_stage

EVERYTHING = {"fetch", "zoo@a", "zoo@b", "head@x", "head@y", "report"}


def test_a_whole_run_commits_without_targets():
    assert commit_targets(sorted(EVERYTHING), EVERYTHING) == []


def test_complete_groups_collapse_and_partial_ones_stay_single():
    targets = commit_targets(["fetch", "zoo@a", "zoo@b", "head@x"], EVERYTHING)
    assert targets == ["fetch", "zoo", "head@x"]


def test_targets_never_reach_a_stage_outside_the_run():
    ran = ["zoo@a", "head@x", "head@y"]
    targets = commit_targets(ran, EVERYTHING)
    named = {a for a in EVERYTHING for t in targets if a == t or a.split("@")[0] == t}
    assert named == set(ran)


def test_dvc_in_a_stage_reads_live_holders_of_paths_in_this_repository(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = os.getppid()
    inside, outside = str(tmp_path.resolve() / "data/x.h5"), "/elsewhere/data/x.h5"
    (tmp_path / DVC_RWLOCK).parent.mkdir(parents=True)
    assert dvc_in_a_stage(tmp_path) == {}                      # no rwlock file: nobody
    (tmp_path / DVC_RWLOCK).write_text(json.dumps({
        "write": {inside: {"pid": dead.pid, "cmd": "dvc repro"}, outside: {"pid": live, "cmd": "dvc repro b"}},
        "read": {inside: [{"pid": live, "cmd": "dvc repro a"}]}}))
    assert dvc_in_a_stage(tmp_path) == {live: "dvc repro a"}   # the dead and the other repository's left out
