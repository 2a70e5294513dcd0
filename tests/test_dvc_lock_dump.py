"""dvc.lock rendered one stage entry at a time has the bytes of DVC's whole render, anchors and
aliases included, and renders only the entries that changed (``pipeline/dvc_lock_dump.py``)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

from dvc.utils.serialize import _yaml

from taskgeom.pipeline.dvc_lock_dump import LockRenderer, rendered

SPLITS = {"train": "world-train", "test": "world-test"}


def lock_data() -> dict:
    """A lock file's data with what a dumper may quote, fold or alias: a command past 80
    characters, strings that read as numbers, booleans or null, text outside ASCII, a null, and
    one object held twice inside an entry (a YAML alias in params.yaml)."""
    shared, pair = dict(SPLITS), [1, 2]
    return {"schema": "2.0", "stages": {
        "fetch": {"cmd": "taskgeom sources --source 'world-train' --log 'logs/sources/world-train.log' --again",
                  "params": {"params.yaml": {"world": {"seed": 0, "range": [-4, None], "label": "κ_cap(r)"}}},
                  "outs": [{"path": "data/world.h5", "hash": "md5", "md5": "0" * 32, "size": 12}]},
        "heads": {"cmd": "taskgeom head", "params": {"params.yaml": {"learn.probes": {
            "a": {"sources": shared}, "b": {"sources": shared}}, "version": "2.0", "switch": "yes", "none": "null"}}},
        "tables": {"cmd": "taskgeom tables", "params": {"params.yaml": {"x": {"p": pair, "q": pair}}}},
    }}


def counting(calls: list[str]):
    """DVC's dumper, recording the top-level stage names of each render."""
    def dump(data, stream):
        calls.append(",".join(data.get("stages", {})))
        return _yaml._dump(data, stream)
    return dump


def test_each_entry_is_rendered_once_and_the_text_is_dvcs():
    data, calls = lock_data(), []
    render = LockRenderer(counting(calls))
    whole = rendered(data, _yaml._dump)
    assert "&id001" in whole and "*id002" in whole  # two entries with aliases: the second's renumbered
    assert render(data) == whole
    calls.clear()
    changed = copy.deepcopy(data)
    changed["stages"]["fetch"]["outs"][0]["size"] = 13
    more = {"k": 1}  # held twice: an alias before the others, whose anchors shift
    changed["stages"]["fetch"]["params"]["params.yaml"].update(more=more, again=more)
    assert render(changed) == rendered(changed, _yaml._dump)
    assert calls == ["fetch", ""]  # the one changed entry, and the schema line
    del changed["stages"]["heads"]
    assert render(changed) == rendered(changed, _yaml._dump)


def test_what_cannot_be_split_is_rendered_whole():
    data = lock_data()
    data["stages"]["tables"]["params"]["params.yaml"]["y"] = data["stages"]["heads"]["params"]  # across entries
    for other in (data, {"schema": "2.0", "stages": {}}, {"schema": "2.0", "stages": {"a": {}}, "extra": 1}):
        calls = []
        assert LockRenderer(counting(calls))(other) == rendered(other, _yaml._dump)
        assert calls[-1] == ",".join(other["stages"])  # the whole document, in one render


DVC_YAML = """\
stages:
  first:
    cmd: echo first > first.txt
    params: [world]
    outs: [first.txt]
  second:
    cmd: cp first.txt second.txt
    deps: [first.txt]
    params: [world, learn]
    outs: [second.txt]
"""
PARAMS = "world: {seed: 0, splits: &splits {train: a, test: b}, again: *splits}\nlearn: {r: 8, sources: *splits}\n"


def test_a_dvc_repro_writes_the_lock_dvc_writes(tmp_path: Path):
    locks = {}
    for entrywise in (False, True):
        root = tmp_path / f"entrywise-{entrywise}"
        root.mkdir()
        subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "--quiet"], cwd=root, check=True)
        (root / "dvc.yaml").write_text(DVC_YAML)
        (root / "params.yaml").write_text(PARAMS)
        prelude = "" if entrywise else ("import taskgeom.pipeline.dvc_atomic as a\n"
                                        "from taskgeom.pipeline.dvc_lock_dump import rendered\n"
                                        "a.lock_text = rendered\n")
        code = prelude + "import sys; from taskgeom.pipeline.dvc_atomic import main; sys.exit(main(sys.argv[1:]))"
        subprocess.run([sys.executable, "-c", code, "repro"], cwd=root, check=True, capture_output=True)
        locks[entrywise] = (root / "dvc.lock").read_text()
    assert "&id001" in locks[True] and "*id002" in locks[True]
    assert locks[True] == locks[False]
