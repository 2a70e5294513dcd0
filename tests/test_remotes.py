"""Artifacts shared through DVC remotes, a directory and a local S3 server, on the smoke run:
a fresh clone pulls the same bytes and has nothing to rerun in either front end."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from conftest import dvc_stages, run

pytestmark = pytest.mark.pipeline


def test_artifacts_round_trip_through_a_dvc_remote(smoke: Path, tmp_path: Path):
    run(["dvc", "repro"], smoke)  # whatever the tests above left, DVC in step with the outputs
    remote = tmp_path / "remote"
    git = ["git", "-c", "user.email=ci@taskgeom", "-c", "user.name=taskgeom"]
    run(["dvc", "remote", "add", "-d", "team", str(remote)], smoke)
    run(["git", "add", "-A"], smoke)
    run([*git, "commit", "-qm", "results"], smoke)
    run(["dvc", "push"], smoke)
    outs = [o for s in dvc_stages(smoke).values() for o in s["outs"]]
    # a teammate pulls, then looks; another looks first (nothing is there yet), then pulls, looks again
    # and runs: both end with nothing to rerun (pipeline/sync.py)
    clone, looked_first = tmp_path / "clone", tmp_path / "looked-first"
    for repo in (clone, looked_first):
        run(["git", "clone", "-q", str(smoke), str(repo)], tmp_path)
    assert "Nothing to be done" not in run(["snakemake", "-n"], looked_first).stdout
    for repo in (clone, looked_first):
        run(["git", "pull", "-q"], repo)
        run(["dvc", "pull"], repo)
        for rel in outs:
            assert (repo / rel).read_bytes() == (smoke / rel).read_bytes(), rel
        assert json.loads(run(["dvc", "status", "--json"], repo).stdout) == {}
        dry = run(["snakemake", "-n"], repo)  # Snakemake takes DVC's state (pipeline/sync.py)
        assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-4000:]
    done = run(["snakemake", "-c1"], looked_first)
    assert "Nothing to be done" in done.stdout + done.stderr, done.stdout[-4000:]
    assert json.loads(run(["dvc", "status", "--json"], looked_first).stdout) == {}


S3_BUCKET = "taskgeom-artifacts"
S3_KEYS = {"aws_access_key_id": "taskgeom-test", "aws_secret_access_key": "taskgeom-test"}


@pytest.fixture
def s3_endpoint():
    """An S3-compatible server (moto) on loopback with an empty bucket; its URL."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        url = "http://{}:{}".format(*server.get_host_and_port())
        boto3.client("s3", endpoint_url=url, region_name="us-east-1", **S3_KEYS).create_bucket(Bucket=S3_BUCKET)
        yield url
    finally:
        server.stop()


def use_s3_remote(repo: Path, url: str) -> None:
    """The bucket as remote ``s3`` (committed), its keys in .dvc/config.local (never committed)."""
    for args in (["add", "-f", "s3", f"s3://{S3_BUCKET}/smoke"], ["modify", "s3", "endpointurl", url],
                 ["modify", "s3", "region", "us-east-1"],
                 ["modify", "--local", "s3", "access_key_id", S3_KEYS["aws_access_key_id"]],
                 ["modify", "--local", "s3", "secret_access_key", S3_KEYS["aws_secret_access_key"]]):
        run(["dvc", "remote", *args], repo)


def clone_with_s3(origin: Path, dest: Path, url: str) -> Path:
    run(["git", "clone", "-q", str(origin), str(dest)], origin.parent)
    use_s3_remote(dest, url)
    return dest


@pytest.mark.s3
def drop_stale_run_cache(repo: Path) -> None:
    """Remove run-cache entries whose outputs are not the workspace's: a timed stage rerun with the
    same dependencies (``dvc repro --force`` in another test of this repo) leaves a second entry
    under its key, and DVC may restore from either."""
    current = {o["path"]: o.get("md5") for s in yaml.safe_load((repo / "dvc.lock").read_text())["stages"].values()
               for o in s.get("outs", [])}
    for entry in (repo / ".dvc/cache/runs").glob("*/*/*"):
        outs = yaml.safe_load(entry.read_text()).get("outs", [])
        if any(o["path"] in current and o.get("md5") != current[o["path"]] for o in outs):
            entry.unlink()


def test_artifacts_and_run_cache_round_trip_through_an_s3_remote(smoke: Path, s3_endpoint: str, tmp_path: Path):
    run(["dvc", "repro"], smoke)  # DVC's lock and run-cache in step with the outputs
    drop_stale_run_cache(smoke)
    use_s3_remote(smoke, s3_endpoint)
    git = ["git", "-c", "user.email=ci@taskgeom", "-c", "user.name=taskgeom"]
    run(["git", "add", "-A"], smoke)
    run([*git, "commit", "-qm", "results on the s3 remote", "--allow-empty"], smoke)
    assert "access_key_id" not in run(["git", "show", "HEAD:.dvc/config"], smoke).stdout
    timings = {}
    start = time.monotonic()
    run(["dvc", "push", "-r", "s3", "--run-cache"], smoke)
    timings["push"] = time.monotonic() - start
    outs = [o for s in dvc_stages(smoke).values() for o in s["outs"]]

    clone = clone_with_s3(smoke, tmp_path / "clone", s3_endpoint)
    start = time.monotonic()
    run(["dvc", "pull", "-r", "s3"], clone)
    timings["pull"] = time.monotonic() - start
    for rel in outs:
        assert (clone / rel).read_bytes() == (smoke / rel).read_bytes(), rel
    assert json.loads(run(["dvc", "status", "--json"], clone).stdout) == {}

    # A clone without the lock file knows its outputs only through the run-cache.
    bare = clone_with_s3(smoke, tmp_path / "bare", s3_endpoint)
    (bare / "dvc.lock").unlink()
    run(["dvc", "config", "core.remote", "s3"], bare)
    start = time.monotonic()
    log = run(["dvc", "repro", "--pull"], bare).stdout
    timings["repro --pull"] = time.monotonic() - start
    # check-params alone runs: DVC keeps no run-cache entry for a stage whose output persists, and it
    # computes data/identity.yaml from this machine's data
    assert re.findall(r"Running stage '([^']+)'", log) == ["check-params"], log
    assert log.count("skipping run, checking out outputs") == len(dvc_stages(smoke)) - 1, log
    for rel in outs:
        assert (bare / rel).read_bytes() == (smoke / rel).read_bytes(), rel
    assert json.loads(run(["dvc", "status", "--json"], bare).stdout) == {}
    print("\nS3 round trip: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
