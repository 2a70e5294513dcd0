"""A stage command that is refused (bad parameters, an item params.yaml does not list, a missing
input) writes nothing: its log file from an earlier run keeps its bytes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from taskgeom.pipeline.cli import main


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    """A stage run through main() sets torch's pool to its declared threads; the rest of the
    session keeps its own."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("case", ["invalid params", "unlisted item", "missing input"])
def test_a_refused_stage_leaves_its_earlier_log(tmp_path: Path, monkeypatch, case: str):
    monkeypatch.chdir(tmp_path)
    params = tmp_path / "params.yaml"
    shutil.copyfile(ROOT / "params/smoke.yaml", params)
    if case == "invalid params":
        params.write_text(params.read_text().replace("lr: 0.002", "lr: -1.0", 1))
    log = tmp_path / "logs/zoo/tiny-cls.log"
    log.parent.mkdir(parents=True)
    log.write_text("the earlier run's log\n")
    model = "tiny-xl" if case == "unlisted item" else "tiny-cls"  # no world, no sources: inputs are missing
    assert main(["zoo", "--model", model, "--params", str(params), "--log", str(log)]) == 2
    assert log.read_text() == "the earlier run's log\n"
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "logs", "logs/zoo", "logs/zoo/tiny-cls.log", "params.yaml"]


def test_a_stage_runs_on_its_declared_threads_although_torch_is_loaded_first():
    """Whatever loaded torch before a stage's thread count is known, use_threads must still set
    torch's pool, so DVC (which exports no OMP_NUM_THREADS) trains on the threads Snakemake gives
    the job."""
    code = ("import torch, taskgeom.pipeline.cli\n"
            "from taskgeom.pipeline.runtime import use_threads\n"
            "use_threads(1); print(torch.get_num_threads())")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


def test_commands_and_stages_that_need_no_torch_do_not_load_it():
    """Loading torch costs seconds per process: the CLI's utilities and the stages whose runners
    need no torch (their provenance included) run without it."""
    code = ("import sys\n"
            "from taskgeom.pipeline.cli import main\n"
            f"assert main(['params', 'check', {str(ROOT / 'params/smoke.yaml')!r}]) == 0\n"
            "from taskgeom.pipeline.runtime import machine\n"
            "import taskgeom.stages.check_params, taskgeom.stages.fetch, taskgeom.stages.findings\n"
            "import taskgeom.stages.report, taskgeom.stages.zoo_table\n"
            "machine('cpu')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_only_the_errors_a_user_fixes_are_told_as_one_line():
    from taskgeom.artifacts.checkpoints import CheckpointError
    from taskgeom.data.hdf5 import StoreError
    from taskgeom.data.sources import SourceError
    from taskgeom.finite import NonFiniteError
    from taskgeom.pipeline.cli import user_error
    from taskgeom.pipeline.config import ParamsError

    for exc in (CheckpointError("c"), StoreError("s"), SourceError("s"), NonFiniteError("n"), ParamsError("p"),
                FileNotFoundError()):
        assert user_error(exc)
    assert not user_error(ValueError("a bug")) and not user_error(KeyError("a bug"))


def tiny_world(params: Path, seed: int) -> None:
    import yaml

    p = yaml.safe_load((ROOT / "params/smoke.yaml").read_text())
    p["world"] |= {"seed": seed, "eval_resolutions": [], "splits": {"train": 16, "val": 4, "test": 12},
                   "multiview": {"views": 2, "train": 8, "test": 4}, "chunk": 4}
    p["prune"]["resolutions"] = [64]
    params.write_text(yaml.safe_dump(p, sort_keys=False))


@pytest.mark.slow  # fetch writes a whole tiny world twice
def test_a_stage_that_fails_leaves_the_last_published_set_untouched(tmp_path: Path, monkeypatch):
    from taskgeom.stages import fetch

    monkeypatch.chdir(tmp_path)
    params = tmp_path / "params.yaml"
    Path("data").mkdir()
    Path("data/params.ok").touch()
    tiny_world(params, seed=0)
    assert main(["fetch", "--params", str(params), "--log", "logs/fetch.log"]) == 0
    files = lambda: {p: p.read_bytes() for d in ("data/world", "results") for p in Path(d).rglob("*")
                     if p.is_file() and ".partial" not in p.parts}   # .partial/: resumable state, not outputs
    published = files()
    assert len(published) == 9   # five splits, the summary's csv and md, the samples' png and pdf

    def fails(ctx):
        raise RuntimeError("the figure failed")
    monkeypatch.setattr(fetch, "draw_samples", fails)   # after the splits and the summary are written
    tiny_world(params, seed=1)
    with pytest.raises(RuntimeError, match="the figure failed"):
        main(["fetch", "--params", str(params), "--log", "logs/fetch.log"])
    assert files() == published


@pytest.mark.parametrize("error", ["a bad input", "a bug"])
def test_the_stage_log_says_why_the_stage_failed(tmp_path: Path, monkeypatch, error: str):
    """Snakemake points to the stage's log; under SLURM the command's stderr is another file."""
    from taskgeom.data.hdf5 import StoreError
    from taskgeom.stages import check_params

    monkeypatch.chdir(tmp_path)
    shutil.copyfile(ROOT / "params/smoke.yaml", "params.yaml")
    Path("src/taskgeom").mkdir(parents=True)
    shutil.copyfile(ROOT / "src/taskgeom/params.schema.yaml", "src/taskgeom/params.schema.yaml")

    def fails(ctx):
        if error == "a bad input":
            raise StoreError("data/x.h5: not a readable HDF5 file")
        raise KeyError("a bug")
    monkeypatch.setattr(check_params, "run", fails)
    argv = ["check-params", "--log", "logs/check-params.log"]
    if error == "a bad input":
        assert main(argv) == 2
    else:
        with pytest.raises(KeyError):
            main(argv)
    log = Path("logs/check-params.log").read_text()
    if error == "a bad input":
        assert "ERROR taskgeom: error: data/x.h5: not a readable HDF5 file\n" in log and "Traceback" not in log
    else:
        assert "ERROR taskgeom: error: 'a bug'\nTraceback" in log and "KeyError: 'a bug'" in log


@pytest.mark.parametrize("argv, names", [
    (["diagnose", "--probe", "nope"], "(listed: cls-embed-l4, dpt-depth-l4, "),
    (["params", "use", "smok"], "smok: not a profile of params/ (profiles: default, paper, paper-mini, smoke)"),
    (["params", "use", "../params"], "../params: not a profile of params/ (profiles: default, paper, "),
])
def test_a_name_that_is_not_listed_is_refused_in_one_line_listing_the_valid_ones(tmp_path: Path, monkeypatch, capsys,
                                                                                 argv: list[str], names: str):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(ROOT / "params", tmp_path / "params")
    shutil.copyfile(ROOT / "params/smoke.yaml", tmp_path / "params.yaml")
    before = (tmp_path / "params.yaml").read_bytes()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("taskgeom: error: ") and names in err and len(err.splitlines()) == 1, err
    assert (tmp_path / "params.yaml").read_bytes() == before
