"""What a failed or refused run leaves on the smoke run (docs/failures.md): the last published
outputs, or the one command that puts them back, a stage log that says why, and both front ends
agreeing on what to rerun once the input is fixed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SMOKE, run

from taskgeom.pipeline.registry import stage
from taskgeom.pipeline.stage import resolve

pytestmark = pytest.mark.pipeline

HEAD = "dpt-depth-l4"
PROBE = SMOKE["learn"]["heads"][HEAD]["probe"]


def nothing_to_do(repo: Path) -> None:
    assert json.loads(run(["dvc", "status", "--json"], repo).stdout) == {}
    dry = run(["snakemake", "-n"], repo)
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-4000:]


def planned(repo: Path) -> tuple[set[str], str]:
    """(DVC's stale stages, Snakemake's dry run)."""
    status = {name.split(":")[-1] for name in json.loads(run(["dvc", "status", "--json"], repo).stdout)}
    return status, run(["snakemake", "-n"], repo).stdout


def test_a_failed_stage_keeps_its_outputs_or_dvc_checkout_puts_them_back(smoke: Path):
    run(["dvc", "repro"], smoke)   # whatever an earlier test left, both front ends in step
    run(["snakemake", "-n"], smoke)
    outputs = [smoke / p for p in resolve(stage("head"), SMOKE, HEAD)[1].values()]
    published = {p: p.read_bytes() for p in outputs}
    source = smoke / f"data/targets/{PROBE}/train.h5"
    with source.open("r+b") as f:
        f.truncate(100_000)
    log = smoke / f"logs/head/{HEAD}.log"
    try:
        # Snakemake, the head's rule alone (both front ends would first rerun `targets`, whose output
        # differs from dvc.lock): refused in one line naming the file and what to do, in the stage
        # log too; it removes a failed job's outputs, and `dvc checkout` puts back the last recorded ones
        proc = run(["snakemake", "-c1", "--allowed-rules", "head", str(outputs[0].relative_to(smoke))], smoke,
                   check=False)
        said = f"taskgeom: error: {source.relative_to(smoke)}: not a readable HDF5 file"
        assert proc.returncode != 0 and said in proc.stdout + proc.stderr, proc.stderr[-3000:]
        assert said in log.read_text() and "dvc checkout" in log.read_text()   # what to do, too
        assert "Traceback" not in log.read_text() + proc.stderr
        assert not any(p.exists() for p in outputs)
        run(["dvc", "checkout", f"head@{HEAD}"], smoke)
        assert {p: p.read_bytes() for p in outputs} == published
        # with the input still broken, both front ends plan to rerun the head
        dvc, dry = planned(smoke)
        assert f"head@{HEAD}" in dvc and f"wildcards: head={HEAD}" in dry, dry[-4000:]
        # DVC deletes a stage's outputs before it reruns it: the stage puts them back, and they stay
        proc = run(["dvc", "repro", "-s", f"head@{HEAD}"], smoke, check=False)
        assert proc.returncode != 0 and said in proc.stdout + proc.stderr
        assert {p: p.read_bytes() for p in outputs} == published and said in log.read_text()
    finally:
        run(["dvc", "checkout", "--force", f"targets@{PROBE}"], smoke)
    nothing_to_do(smoke)


def test_a_rejected_params_yaml_leaves_both_front_ends_up_to_date_once_restored(smoke: Path):
    run(["dvc", "repro"], smoke)
    params = smoke / "params.yaml"
    original = params.read_text()
    params.write_text(original + "no_such_key: 1\n")
    try:
        proc = run(["dvc", "repro"], smoke, check=False)
        assert proc.returncode != 0 and "unknown key no_such_key" in proc.stdout + proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr
    finally:
        params.write_text(original)
    nothing_to_do(smoke)
    dry = run(["dvc", "repro", "--dry"], smoke).stdout
    assert "Running stage" not in dry, dry[-3000:]
