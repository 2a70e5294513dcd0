"""``commit_targets``: after a Snakemake run, DVC commits what it ran with as few targets as name
it (DVC's cost grows with the targets it resolves): nothing for everything, a foreach group for
all its instances, single instances otherwise; never a stage the run did not bring up to date."""

from __future__ import annotations

from taskgeom.pipeline.sync import commit_targets

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
