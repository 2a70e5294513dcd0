"""Hostile input to the front ends: a params.yaml whose aliases stand for billions of nodes, one
that is not UTF-8, a symbolic link loop where the stages write, an empty or self-containing
``taskgeom data link`` path. Each is refused at once in one line naming the file, key or path and
what to do, and the command a line prints does what it says (docs/failures.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, SMOKE, copy_repo, output_digests, run

from taskgeom.data.hdf5 import remedy
from taskgeom.pipeline import cli, config
from taskgeom.pipeline.external import EXTERNAL, WRITTEN, link
from taskgeom.pipeline.identity import IDENTITY
from taskgeom.pipeline.registry import STAGES, instances

FAST = 60  # s: each refusal takes about a second; expanding the aliases took minutes and gigabytes


def alias_bomb(text: str, levels: int = 9, width: int = 9) -> str:
    """``text`` with its ``prune.ratios`` list made of nested aliases: ``width ** levels`` numbers
    once expanded, in a few hundred bytes."""
    rows = [f"&l0 [{', '.join(['0.1'] * width)}]"]
    rows += [f"&l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return re.sub(r"(?m)^(  ratios:).*$", lambda m: f"{m.group(1)} [{', '.join(rows)}]", text, count=1)


SMOKE_TEXT = (REPO / "params/smoke.yaml").read_text()
HOSTILE = {  # name -> (params.yaml's bytes, what the one line must say)
    "alias-bomb": (alias_bomb(SMOKE_TEXT).encode(), f"nodes, more than the {config.MAX_REPEATED_NODES} allowed; "
                                                    "write the values out instead of repeating anchors"),
    "latin-1": (SMOKE_TEXT.encode() + "# café\n".encode("latin-1"),
                f"not UTF-8 text (byte 0xe9 at offset {len(SMOKE_TEXT.encode()) + 5}); save it as UTF-8"),
}


def one_line(proc: subprocess.CompletedProcess, *said: str) -> None:
    """Refused, with exactly one ``taskgeom: error:`` line holding each of ``said``, and no traceback."""
    text = proc.stdout + proc.stderr
    lines = [x for x in text.splitlines() if x.startswith("taskgeom: error:")]
    assert proc.returncode != 0 and len(lines) == 1 and "Traceback" not in text, (proc.args, text[-3000:])
    assert all(s in lines[0] for s in said), (lines[0], said)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone of the repository on the smoke profile; each test puts back what it changes."""
    return copy_repo(tmp_path_factory.mktemp("hostile") / "repo")


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_params_check_refuses_an_unreadable_params_file_in_one_line_at_once(name: str, tmp_path: Path):
    hostile, said = HOSTILE[name]
    (tmp_path / "params.yaml").write_bytes(hostile)
    proc = subprocess.run([Path(sys.executable).with_name("taskgeom"), "params", "check"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=FAST)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
    assert proc.stderr.startswith("taskgeom: error: params.yaml: ") and said in proc.stderr


def test_an_alias_inside_its_own_anchor_is_refused_by_line(tmp_path: Path):
    path = tmp_path / "params.yaml"
    path.write_text(SMOKE_TEXT.replace("  ratios: [0.0, 0.2, 0.5]", "  ratios: &r [0.0, *r]"))
    line = SMOKE_TEXT.splitlines().index("  ratios: [0.0, 0.2, 0.5]") + 1
    with pytest.raises(config.ParamsError, match=rf"{path}: a YAML alias .* at line {line}, repeats it without end"):
        config.read(path)


def test_aliases_within_the_limit_read_as_safe_load_reads_them(tmp_path: Path):
    for path in sorted((REPO / "params").glob("*.yaml")):   # paper-mini's and default's repeat a few
        assert config.read(path) == yaml.safe_load(path.read_text()), path
    path = tmp_path / "p.yaml"
    path.write_text(alias_bomb("prune:\n  ratios: []\n", levels=3, width=40))   # 40**3 nodes repeated
    assert len(config.read(path)["prune"]["ratios"][2]) == 40
    # 4 levels: the list holds 1 + 41 + 1641 + 65641 + 2625641 nodes expanded, 45 written (the first
    # level's 40 numbers and the four lists); with the mapping's 4 nodes, 2692969 against 49
    path.write_text(alias_bomb("prune:\n  ratios: []\n", levels=4, width=40))
    with pytest.raises(config.ParamsError, match=r"repeat 2692920 nodes, more than the 100000 allowed"):
        config.read(path)


def test_yaml_errors_are_one_line_with_the_line_and_column(tmp_path: Path):
    path = tmp_path / "params.yaml"
    path.write_text("world: 1\n  seed: [unclosed\n")
    with pytest.raises(config.ParamsError) as refused:
        config.load(path)
    assert "\n" not in str(refused.value) and "(line 2, column 7)" in str(refused.value)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_snakemake_and_dvc_refuse_an_unreadable_params_yaml_in_one_line(name: str, clone: Path):
    hostile, said = HOSTILE[name]
    path, before = clone / "params.yaml", (clone / "params.yaml").read_bytes()
    written = output_digests(clone)
    path.write_bytes(hostile)
    try:
        for cmd in (["snakemake", "-n"], ["dvc", "status"], ["dvc", "repro"], ["dvc", "repro", "--dry"]):
            one_line(run(cmd, clone, check=False, timeout=FAST, warm=False), "taskgeom: error: params.yaml: ", said)
    finally:
        path.write_bytes(before)
    assert output_digests(clone) == written   # dvc repro ran nothing


@pytest.mark.slow
def test_both_front_ends_name_a_symlink_loop_and_what_to_do(clone: Path):
    loop = clone / "data/world/val.h5"
    loop.parent.mkdir(parents=True, exist_ok=True)
    loop.symlink_to("val.h5")
    said = "data/world/val.h5: a symbolic link loop (it leads back to itself); remove it (`rm data/world/val.h5`), " \
           "then restore it with `dvc checkout --force data/world/val.h5`"
    try:
        for cmd in (["snakemake", "-n"], ["dvc", "status"], ["dvc", "repro", "--dry"]):
            one_line(run(cmd, clone, check=False, timeout=FAST, warm=False), said)
    finally:
        loop.unlink()


def test_the_snakemake_sync_names_a_symlink_loop_among_its_files(tmp_path: Path):
    from taskgeom.pipeline.sync import workspace_state

    (tmp_path / "dvc.lock").write_text("schema: '2.0'\n")
    (tmp_path / "data/world").mkdir(parents=True)
    (tmp_path / "data/world/val.h5").symlink_to("val.h5")
    with pytest.raises(SystemExit, match=r"^taskgeom: error: data/world/val.h5: a symbolic link loop .*`dvc "
                                         r"checkout --force data/world/val.h5`$"):
        workspace_state(tmp_path, ["data/world/train.h5", "data/world/val.h5"])


def test_every_stage_writes_under_the_folders_searched_for_loops():
    outside = [(s.name, p) for s in STAGES for p in s.outs.values() if Path(p).parts[0] not in WRITTEN]
    assert not outside


@pytest.mark.slow
def test_dvc_repro_dry_on_a_fresh_clone_shows_the_plan(clone: Path):
    before = output_digests(clone)
    proc = run(["dvc", "repro", "--dry"], clone, timeout=FAST * 5, warm=False)
    planned = set(re.findall(r"Running stage '([^'@]+)", proc.stdout))
    assert planned == {"check-params"} | {s.name for s, _ in instances(SMOKE)}, proc.stdout[-3000:]
    made = set(output_digests(clone).items()) - set(before.items())
    # what the launcher brings up to date, and no output
    assert {path for path, _ in made} <= {IDENTITY} | {s.code_record for s in STAGES}


def dvc(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The environment's ``dvc ARGS`` in ``root``, never asking on a terminal."""
    return run(["dvc", *args], root, check=check, timeout=FAST, warm=False, stdin=subprocess.DEVNULL)


def tiny_dvc_repo(root: Path) -> Path:
    """A DVC repository whose one stage copies ``source.bin`` to ``data/out.h5``, run and recorded."""
    root.mkdir()
    dvc(root, "init", "--no-scm", "-q")
    (root / "source.bin").write_bytes(bytes(range(256)) * 64)
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"copy": {
        "cmd": "mkdir -p data && cp source.bin data/out.h5", "deps": ["source.bin"], "outs": ["data/out.h5"]}}}))
    dvc(root, "repro", "-q")
    return root


def said_commands(line: str) -> list[str]:
    """The commands a line of advice names, in order (each between backticks)."""
    return re.findall(r"`([^`]+)`", line)


@pytest.mark.slow
def test_the_commands_the_error_lines_print_restore_the_file(tmp_path: Path):
    root = tiny_dvc_repo(tmp_path / "repo")
    out, published = root / "data/out.h5", (root / "data/out.h5").read_bytes()
    out.chmod(0o644)
    out.write_bytes(published[:100])   # damaged in place: the stage's reader says restore it thus
    checkout = said_commands(remedy(Path("data/out.h5"), "world"))[-1]
    assert checkout == "dvc checkout --force data/out.h5"
    plain = dvc(root, "checkout", "data/out.h5", check=False)
    assert plain.returncode != 0 and "Use `--force`" in plain.stderr   # what the line used to print
    dvc(root, *checkout.split()[1:])
    assert out.read_bytes() == published

    out.unlink()
    out.symlink_to("out.h5")
    status = dvc(root, "status", check=False)
    one_line(status, "data/out.h5: a symbolic link loop")
    remove, restore = said_commands(status.stderr)
    run(remove.split(), root, warm=False)
    dvc(root, *restore.split()[1:])
    assert out.read_bytes() == published and not out.is_symlink()


@pytest.mark.parametrize("path", ["", ".", "data", "..", "/"])
def test_data_link_refuses_an_empty_path_and_one_that_holds_the_link(path: str, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    assert cli.main(["data", "link", "mine", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("taskgeom: error: ")
    assert ("PATH is empty" if not path else "holds data/external/mine itself") in err
    assert not (tmp_path / EXTERNAL / "mine").is_symlink()
    with pytest.raises(ValueError):
        link("mine", path, tmp_path)


def test_data_link_still_links_a_folder_beside_the_repository(tmp_path: Path):
    (tmp_path / "repo").mkdir()
    beside = tmp_path / "data-set"
    beside.mkdir()
    assert link("data-set", beside, tmp_path / "repo").resolve() == beside
