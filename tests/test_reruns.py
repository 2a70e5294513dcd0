"""Incremental runs of the smoke DAG under both front ends: a change under each parameter key, and
an edit of a module's code, reruns exactly the stages that read it, in DVC and in Snakemake alike,
a comment reruns nothing, and a changed model or head hyperparameter reruns only what depends on
it, after which the other front end has nothing to do. (Apart from tests/test_pipeline.py, so that
pytest-xdist can run the two files on two workers.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import SMOKE, copy_run, run, succeeded, tool_env, warm_cli
from warm_cli import WarmCLI, ask_together

from taskgeom.pipeline.registry import instances, stage

pytestmark = pytest.mark.pipeline

PROBES = [f"diagnose@{name}" for name in SMOKE["diagnose"]["probes"]]
MV_PROBES = {f"diagnose@{name}" for name, p in SMOKE["diagnose"]["probes"].items() if p["source"] == "world-mv-test"}
TARGETS = {f"targets@{name}" for name in SMOKE["learn"]["probes"]}
HEADS = {f"head@{name}" for name in SMOKE["learn"]["heads"]}
SPNS = {f"spn@{name}" for name in SMOKE["learn"]["spn"]}
PRUNE_CLS = {f"prune-cls@{name}" for name in SMOKE["prune"]["cls"]}
PRUNE_DENSE = {f"prune-dense@{name}" for name in SMOKE["prune"]["dense"]}
PRUNE_SPEED = {f"prune-speed@{name}" for name in SMOKE["prune"]["dense"]}
RETRIEVAL = {f"retrieval@{name}" for name in SMOKE["retrieval"]}
TABLES_OPENING_SOURCES = ("metric-tables", "prune-tables", "retrieval-tables")  # they read params' sources
EDITED_MODULE = "src/taskgeom/prune/tome.py"  # imported by the pruning stages, not by diagnose
CODE_EDIT = b"\nEDITED = 1  # a module-level constant: new code, which may change a result\n"
COMMENTED_MODULE = "src/taskgeom/metric/head_fit.py"  # imported by head, whose outputs most stages read
PERTURB = {  # one change under each params key a stage declares, and the stages that read it
    "world": (lambda p: p["world"].update(seed=p["world"]["seed"] + 1), {"fetch"}),
    "sources.world-mv-test": (lambda p: p["sources"]["world-mv-test"].update(range=[0, 6]),
                              {"sources@world-mv-test", "zoo@tiny-mv", *MV_PROBES, "vae@mv-depth",
                               "targets@mv-depth-latent", *TABLES_OPENING_SOURCES}),
    # findings and report read the zoo's kinds (which hosts are multi-view); report reads the probes'
    # hosts (diagnose.probes, learn.probes, vae) and the regime rule (diagnose.estimator, .regimes)
    "zoo.tiny-cls": (lambda p: p["zoo"]["tiny-cls"].update(lr=p["zoo"]["tiny-cls"]["lr"] * 2),
                     {"zoo@tiny-cls", "findings", "report"}),
    "zoo.tiny-mv": (lambda p: p["zoo"]["tiny-mv"].update(steps=p["zoo"]["tiny-mv"]["steps"] + 1),
                    {"zoo@tiny-mv", "findings", "report"}),
    "device": (lambda p: p.update(device="auto"), {"zoo@tiny-cls", "zoo@tiny-dpt", "zoo@tiny-mv", *PROBES,
                                                  "vae@mv-depth", *TARGETS, *HEADS, *SPNS, *PRUNE_CLS, *PRUNE_DENSE,
                                                  *PRUNE_SPEED, *RETRIEVAL}),
    "profile": (lambda p: p.update(profile="default"), {"report"}),
    "diagnose.probes.dpt-depth-l4": (lambda p: p["diagnose"]["probes"]["dpt-depth-l4"].update(layers=[3]),
                                     {"diagnose@dpt-depth-l4", "diagnose-tables", "report"}),
    "diagnose.images": (lambda p: p["diagnose"].update(images=1), set(PROBES)),
    "diagnose.estimator": (lambda p: p["diagnose"]["estimator"].update(seed=1),
                           {*PROBES, "diagnose-tables", "vae@mv-depth", "findings", "report"}),
    "diagnose.dense": (lambda p: p["diagnose"]["dense"].update(images=0), set(PROBES)),
    "diagnose.power_table": (lambda p: p["diagnose"]["power_table"].update(q=[0, 2]), set(PROBES)),
    "diagnose.bootstrap": (lambda p: p["diagnose"]["bootstrap"].update(seed=1), {*PROBES, "diagnose-tables"}),
    "diagnose.regimes": (lambda p: p["diagnose"]["regimes"].update(cv_high=2.0),
                         {*PROBES, "diagnose-tables", "findings", "report"}),
    "vae.mv-depth": (lambda p: p["vae"]["mv-depth"].update(beta=0.1), {"vae@mv-depth", "report"}),
    "learn.r": (lambda p: p["learn"].update(r=6), TARGETS),
    "learn.targets": (lambda p: p["learn"]["targets"].update(block=2), TARGETS),
    "learn.targets.power_iters": (lambda p: p["learn"]["targets"].update(power_iters=3),
                                  {*TARGETS, *HEADS, *SPNS, *PRUNE_DENSE, *RETRIEVAL}),
    "learn.probes.cls-embed-l4": (lambda p: p["learn"]["probes"]["cls-embed-l4"].update(layers=[3]),
                                  {"targets@cls-embed-l4", *PRUNE_DENSE, "metric-tables", "report"}),
    "learn.bootstrap": (lambda p: p["learn"]["bootstrap"].update(seed=1),
                        {"vae@mv-depth", *HEADS, *SPNS, *PRUNE_CLS, *PRUNE_DENSE, *RETRIEVAL}),
    "learn.spn.mv-depth-latent": (lambda p: p["learn"]["spn"]["mv-depth-latent"].update(steps=11),
                                  {"spn@mv-depth-latent"}),
    "learn.head_defaults": (lambda p: p["learn"]["head_defaults"].update(lr=0.001), HEADS),
    "learn.heads.dpt-block-norm": (lambda p: p["learn"]["heads"]["dpt-block-norm"].update(w_rank=1.0),
                                   {"head@dpt-block-norm"}),
    "prune.ratios": (lambda p: p["prune"].update(ratios=[0.0, 0.3]), {*PRUNE_CLS, *PRUNE_DENSE, *PRUNE_SPEED}),
    "prune.images": (lambda p: p["prune"].update(images=3), {*PRUNE_CLS, *PRUNE_DENSE}),
    "prune.knn": (lambda p: p["prune"]["knn"].update(k=2), PRUNE_CLS),
    "prune.speed": (lambda p: p["prune"]["speed"].update(repeats=2), PRUNE_SPEED),
    "prune.cls.tiny-cls": (lambda p: p["prune"]["cls"]["tiny-cls"].update(layer=3), {"prune-cls@tiny-cls"}),
    "prune.dense.tiny-dpt": (lambda p: p["prune"]["dense"]["tiny-dpt"].update(schedules=[[2]]),
                             {"prune-dense@tiny-dpt", "prune-speed@tiny-dpt"}),
    "retrieval.tiny-dpt": (lambda p: p["retrieval"]["tiny-dpt"].update(rank=3), RETRIEVAL),
}


def planned(dry_run: str) -> dict[str, str]:
    """DVC's name of each job of Snakemake's dry run, with the reason it gives."""
    jobs = {}
    for block in re.split(r"\n(?=(?:local)?rule )", dry_run):
        lines = block.strip().splitlines()
        rule = next((l.split()[1].rstrip(":") for l in lines if l.startswith(("rule ", "localrule "))), None)
        if rule is None:
            continue
        wildcard = [l.split("=", 1)[1] for l in lines if l.startswith("    wildcards: ")]
        jobs[rule.replace("_", "-") + "".join(f"@{w}" for w in wildcard)] = next(
            (l for l in lines if l.startswith("    reason: ")), "")
    return jobs


def stages_reading_changed_params(dvc: WarmCLI, snakemake: WarmCLI) -> tuple[set[str], set[str], set[str]]:
    """(DVC's, Snakemake's) stages whose parameters changed, in DVC's stage names, and the
    Snakemake jobs that rerun because an input is newer: Snakemake names only that reason for
    them, even when their own parameters changed too. ``dvc status --json`` and ``snakemake -n``,
    asked side by side."""
    status, dry_run = ask_together([(dvc, ["status", "--json"]), (snakemake, ["-n"])])
    succeeded(status)
    succeeded(dry_run)
    dvc = {s.split(":")[-1] for s in json.loads(status.stdout)}
    smk: set[str] = set()
    downstream: set[str] = set()
    for name, reason in planned(dry_run.stdout).items():
        if "Params have changed" in reason:
            smk.add(name)
        elif "Input files updated by another job" in reason or "Updated input files" in reason:
            downstream.add(name)  # (the latter: an input DVC rewrote with the same bytes, newer mtime)
    return dvc, smk, downstream


def test_each_parameter_key_reruns_the_same_stages_in_both_front_ends(smoke: Path):
    """Each front end asked once per key, by a process that imported it once (tests/warm_cli.py)."""
    params_path = smoke / "params.yaml"
    original = params_path.read_text()
    try:
        with WarmCLI("dvc", smoke, tool_env()) as dvc_cli, WarmCLI("snakemake", smoke, tool_env()) as snakemake_cli:
            for key, (mutate, expected) in PERTURB.items():
                params = yaml.safe_load(original)
                mutate(params)
                params_path.write_text(yaml.safe_dump(params, sort_keys=False))
                # DVC's check-params reruns on any edit of params.yaml, by design; its output never changes
                dvc, smk, downstream = stages_reading_changed_params(dvc_cli, snakemake_cli)
                assert dvc - {"check-params"} == expected, f"dvc, {key}"
                assert smk | (expected & downstream) == expected and smk <= expected, f"snakemake, {key}"
    finally:
        params_path.write_text(original)


def test_editing_a_module_reruns_exactly_the_stages_that_import_it_in_both_front_ends(smoke: Path):
    """A stage's code is one dependency, its record (pipeline/code_records.py), which each front
    end rewrites before it decides: DVC finds the record changed, Snakemake the record newer."""
    module = smoke / EDITED_MODULE
    original = module.read_bytes()
    expected = {s.address(v) for s, v in instances(SMOKE) if EDITED_MODULE in s.code}
    assert expected and not expected >= {s.address(v) for s, v in instances(SMOKE) if s.name == "diagnose"}
    try:
        module.write_bytes(original + CODE_EDIT)
        status, dry_run = ask_together([(warm_cli("dvc"), ["status", "--json"]), (warm_cli("snakemake"), ["-n"])],
                                       smoke)
    finally:
        module.write_bytes(original)
    succeeded(status)
    succeeded(dry_run)
    changed = {name.split(":")[-1]: why for name, why in json.loads(status.stdout).items()}
    assert set(changed) - {"check-params"} == expected
    assert all(why == [{"changed deps": {stage(a.split("@")[0]).code_record: "modified"}}]
               for a, why in changed.items() if a in expected), changed
    jobs = planned(dry_run.stdout)  # a job downstream of another is planned for that reason alone
    direct = {name for name, reason in jobs.items() if "data/code/" in reason}
    assert direct <= expected <= set(jobs), (direct, set(jobs))
    assert all("Input files updated by another job" in jobs[name] for name in set(jobs) - direct), jobs


def test_a_comment_in_a_module_reruns_nothing_in_either_front_end(smoke_run: Path, tmp_path: Path):
    """The code digest leaves comments out (pipeline/code_digest.py): a comment appended to a
    module leaves every stage's record as it was, so neither front end plans any stage (the
    comment once reran the module's importer and, through the code version in its outputs' bytes,
    every stage downstream)."""
    repo = copy_run(smoke_run, tmp_path / "repo")
    records = {p: p.read_bytes() for p in (repo / "data/code").glob("*.txt")}
    module = repo / COMMENTED_MODULE
    assert any(COMMENTED_MODULE in s.code for s, _ in instances(SMOKE))
    module.write_bytes(module.read_bytes() + b"\n# a comment that changes no behaviour\n")
    status, dry_run = ask_together([(warm_cli("dvc"), ["status", "--json"]), (warm_cli("snakemake"), ["-n"])], repo)
    succeeded(status)
    succeeded(dry_run)
    assert json.loads(status.stdout) == {}
    assert planned(dry_run.stdout) == {}, dry_run.stdout[-4000:]
    assert {p: p.read_bytes() for p in (repo / "data/code").glob("*.txt")} == records


def test_changing_one_model_reruns_only_it_and_its_dependents(smoke_run: Path, tmp_path: Path):
    repo = copy_run(smoke_run, tmp_path / "repo")
    stamp = {p: p.stat().st_mtime_ns for p in [repo / "data/world/train.h5", repo / "results/zoo/tiny-dpt.json"]}
    edit_params(repo, lambda p: p["zoo"]["tiny-cls"].update(steps=p["zoo"]["tiny-cls"]["steps"] + 2))
    out = run(["dvc", "repro"], repo).stdout
    assert "Running stage 'zoo@tiny-cls'" in out and "Running stage 'fetch'" not in out
    assert all(p.stat().st_mtime_ns == t for p, t in stamp.items())
    assert json.loads(run(["dvc", "status", "--json"], repo).stdout) == {}


def test_a_head_hyperparameter_reruns_just_its_dependents_under_dvc_then_snakemake_has_nothing_to_do(
        smoke_run: Path, tmp_path: Path):
    repo = copy_run(smoke_run, tmp_path / "repo")
    edit_params(repo, lambda p: p["learn"]["heads"]["dpt-block-norm"].update(width=8))
    out = run(["dvc", "repro"], repo).stdout
    ran = set(re.findall(r"Running stage '([^']+)'", out))
    assert ran == {"check-params", "head@dpt-block-norm", "metric-tables", "findings", "report"}, ran
    assert json.loads(run(["dvc", "status", "--json"], repo).stdout) == {}
    dry = run(["snakemake", "-n"], repo)  # Snakemake takes DVC's state (pipeline/sync.py)
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-4000:]


def edit_params(repo: Path, change) -> None:
    """Apply ``change`` to the parsed params.yaml of ``repo`` and write it back."""
    params = yaml.safe_load((repo / "params.yaml").read_text())
    change(params)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
