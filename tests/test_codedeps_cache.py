"""What a source file imports is kept between processes by the module and the hash of its
bytes (``pipeline/codedeps.py``): an entry is used while the file is unchanged, an edit is
parsed again, and a cache that cannot be read is ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taskgeom.pipeline import codedeps


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "taskgeom" / "codedeps.json"


def test_an_entry_serves_the_unchanged_file_and_an_edit_is_parsed_again(tmp_path: Path, cache_home: Path):
    source = tmp_path / "stage.py"
    source.write_text("from taskgeom.models import vit\n\ndef run():\n    import taskgeom.prune.tome\n")
    first = codedeps.ScanCache()
    assert first.lookup("taskgeom.stages.stage", source) == ["taskgeom.models", "taskgeom.models.vit",
                                                             "taskgeom.prune.tome"]
    first.save()
    (key,) = json.loads(cache_home.read_text())
    cache_home.write_text(json.dumps({key: ["taskgeom.marker"]}))  # what a later process finds is what it uses
    assert codedeps.ScanCache().lookup("taskgeom.stages.stage", source) == ["taskgeom.marker"]
    source.write_text("from .. import linalg\n")
    assert codedeps.ScanCache().lookup("taskgeom.stages.stage", source) == ["taskgeom", "taskgeom.linalg"]


def test_a_cache_that_cannot_be_read_is_ignored_and_replaced(tmp_path: Path, cache_home: Path):
    cache_home.parent.mkdir(parents=True)
    cache_home.write_text("{not json")
    source = tmp_path / "mod.py"
    source.write_text("import taskgeom.data.world\n")
    scans = codedeps.ScanCache()
    assert scans.lookup("taskgeom.mod", source) == ["taskgeom.data.world"]
    scans.save()
    assert list(json.loads(cache_home.read_text()).values()) == [["taskgeom.data.world"]]


def test_the_package_scanned_through_the_cache_names_what_a_fresh_parse_names(cache_home: Path):
    for module in ("taskgeom.stages.prune_dense", "taskgeom.pipeline.sync", "taskgeom.linalg"):
        path = codedeps.module_file(module)
        fresh = codedeps.named_imports(path.read_bytes(), module, path.name == "__init__.py", str(path))
        scans = codedeps.ScanCache()
        scans.lookup(module, path)
        scans.save()
        assert codedeps.ScanCache().lookup(module, path) == fresh


def test_a_module_and_a_package_of_the_same_text_are_cached_apart(tmp_path: Path, cache_home: Path):
    module, package = tmp_path / "mod.py", tmp_path / "mod" / "__init__.py"
    package.parent.mkdir()
    for path in (module, package):
        path.write_text("from . import tables\n")
    scans = codedeps.ScanCache()
    assert scans.lookup("taskgeom.stages.mod", module) == ["taskgeom.stages", "taskgeom.stages.tables"]
    assert scans.lookup("taskgeom.stages.mod", package) == ["taskgeom.stages.mod", "taskgeom.stages.mod.tables"]
