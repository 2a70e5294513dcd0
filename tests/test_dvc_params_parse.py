"""DVC's reads of a parameters file parse each distinct text once and give the values DVC's own
read gives (``pipeline/dvc_params_parse.py``)."""

from __future__ import annotations

from pathlib import Path

from dvc.dependency import param
from dvc.fs import LocalFileSystem
from dvc.utils.serialize import _yaml

from taskgeom.pipeline.dvc_params_parse import params_parsed_once

PARAMS = "world: {seed: 0, range: [-4, null]}\nlearn: {r: 8, label: 'κ_cap(r)'}\n"


def test_each_text_is_parsed_once_and_every_caller_gets_dvcs_values(tmp_path: Path, monkeypatch):
    real, parses = _yaml.parse_yaml, []

    def counting(text: str, path: str, typ: str = "safe"):
        parses.append(str(path))
        return real(text, path, typ)

    monkeypatch.setattr(_yaml, "parse_yaml", counting)
    path = tmp_path / "params.yaml"
    path.write_text(PARAMS, encoding="utf-8")
    fs = LocalFileSystem()
    load = params_parsed_once(param.load_path)
    first = load(str(path), fs)
    assert first == {"world": {"seed": 0, "range": [-4, None]}, "learn": {"r": 8, "label": "κ_cap(r)"}}
    assert first == param.load_path(str(path), fs)  # DVC's own read
    first["world"]["seed"] = 99  # a caller's copy is its own
    assert load(str(path), fs)["world"]["seed"] == 0
    assert parses == [str(path)] * 2  # once for all the cached reads, once in DVC's own
    path.write_text(PARAMS.replace("r: 8", "r: 6"), encoding="utf-8")
    assert load(str(path), fs)["learn"]["r"] == 6  # another text, parsed anew
    assert len(parses) == 3


def test_other_files_go_to_dvcs_own_read(tmp_path: Path):
    calls = []
    load = params_parsed_once(lambda fs_path, fs, **kw: calls.append(fs_path) or {"from": "dvc"})
    (tmp_path / "params.json").write_text('{"a": 1}')
    assert load(str(tmp_path / "params.json"), LocalFileSystem()) == {"from": "dvc"}
    assert load(str(tmp_path / "missing.yaml"), LocalFileSystem()) == {"from": "dvc"}  # DVC raises its error
    assert calls == [str(tmp_path / "params.json"), str(tmp_path / "missing.yaml")]
