"""DVC's updates of dvc.lock parse it with the safe loader and write the bytes DVC's round trip
writes (``pipeline/dvc_lock_parse.py``); dvc.yaml keeps the round trip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dvc.utils.serialize import _yaml

from taskgeom.pipeline.dvc_lock_parse import lock_parsed_safely

# Stages whose lock entries hold what a YAML dumper may quote, fold or wrap: a command past 80
# characters with quoted arguments, strings that read as numbers, booleans or null, a null and
# a list with one, and text outside ASCII.
DVC_YAML = """\
# a comment that the round trip keeps
stages:
  write:
    cmd: >-
      python -c "import json, pathlib; pathlib.Path('out.json').write_text(json.dumps({'κ': 0.5}))"
      && echo 'a long tail of arguments past the eightieth column' > tail.txt
    params: [world, label, none, version, switch]
    outs: [out.json, tail.txt]
  copy:
    cmd: cp out.json copy.json
    deps: [out.json]
    params: [world.range]
    outs: [copy.json]
"""
PARAMS = """\
world: {seed: 0, range: [-4, null], layers: null}
label: "κ_cap(r) — 0.9"
none: "null"
version: "2.0"
switch: "yes"
"""


def dvc(root: Path, *args: str, patched: bool) -> None:
    """``dvc ARGS`` in ``root`` with the project's patches, or with DVC's own parse of dvc.lock."""
    prelude = "" if patched else "import taskgeom.pipeline.dvc_atomic as a; a.patch_lock_parse = lambda: None\n"
    code = prelude + "import sys; from taskgeom.pipeline.dvc_atomic import main; sys.exit(main(sys.argv[1:]))"
    subprocess.run([sys.executable, "-c", code, *args], cwd=root, check=True, capture_output=True)


def repository(root: Path) -> Path:
    root.mkdir()
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "--quiet"], cwd=root, check=True)
    (root / "dvc.yaml").write_text(DVC_YAML)
    (root / "params.yaml").write_text(PARAMS)
    return root


def test_dvc_lock_updated_from_the_safe_parse_has_the_bytes_of_dvcs_round_trip(tmp_path: Path):
    locks = {}
    for patched in (False, True):
        root = repository(tmp_path / f"patched-{patched}")
        dvc(root, "repro", patched=patched)  # the first stage writes dvc.lock, the second parses it and updates it
        locks[patched] = (root / "dvc.lock").read_bytes()
        assert (root / "dvc.yaml").read_text() == DVC_YAML
    assert "κ_cap(r)" in locks[True].decode()
    assert locks[True] == locks[False]


def test_only_dvc_lock_is_read_with_the_safe_loader():
    parse = lock_parsed_safely(_yaml.parse_yaml_for_update)
    lock = parse("schema: '2.0'\nstages: {}\n", "some/dir/dvc.lock")
    project = parse(DVC_YAML, "some/dir/dvc.yaml")
    assert type(lock) is dict                                         # the safe loader's plain dict
    assert type(project) is type(_yaml.parse_yaml_for_update(DVC_YAML, "dvc.yaml"))  # ruamel's CommentedMap
    assert "a comment that the round trip keeps" in _yaml.dumps_yaml(project)
