"""The tools whose internals the code patches, imitates or calls are held to the versions the tests
ran (taskgeom.pipeline.tools): pyproject.toml pins them exactly, as the lock does; each name the
code replaces or calls still exists with the signature it was written against; and loading DVC or
Snakemake through the pipeline stops with one line on any other version."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from importlib import metadata

import pytest
import tomllib
from conftest import REPO

from taskgeom.pipeline import tools

# distribution -> why its version is pinned exactly
EXACT = {
    "dvc": "pipeline/dvc_atomic.py, dvc_lock_parse.py and dvc_commit.py replace or call its internals",
    "snakemake": "pipeline/sync.py writes its private .snakemake/metadata records",
    "timm": "models/vit.py and models/adapters/timm_any.py call VisionTransformer._pos_embed and Eva._pos_embed",
    "transformers": "models/adapters/depth_anything.py sets config._attn_implementation on older releases",
}

# "module:qualified name" -> the signature the code wraps or calls, recorded at the pinned versions
SIGNATURES = {
    "dvc.rwlock:_edit_rwlock": "(lock_dir, fs, hardlink)",
    "dvc.stage.cache:_can_hash": "(stage)",
    "dvc.utils.serialize._common:_dump_data":
        "(path, data: Any, dumper: dvc.utils.serialize._common.DumpersFn, "
        "fs: Optional[ForwardRef('FileSystem')] = None, **dumper_args)",
    "dvc.utils.serialize._yaml:_dump_data":
        "(path, data: Any, dumper: dvc.utils.serialize._common.DumpersFn, "
        "fs: Optional[ForwardRef('FileSystem')] = None, **dumper_args)",
    "dvc.utils.serialize._yaml:parse_yaml_for_update": "(text, path)",
    "dvc.utils.serialize._yaml:parse_yaml": "(text, path, typ='safe')",
    "dvc.utils.strictyaml:parse_yaml": "(text, path, typ='safe')",
    "dvc.repo:Repo.__init__":
        "(self, root_dir: Optional[str] = None, fs: Optional[ForwardRef('FileSystem')] = None, "
        "rev: Optional[str] = None, subrepos: bool = False, uninitialized: bool = False, "
        "config: Optional[ForwardRef('DictStrAny')] = None, url: Optional[str] = None, "
        "repo_factory: Optional[Callable] = None, scm: Union[ForwardRef('Git'), ForwardRef('NoSCM'), NoneType] = None, "
        "remote: Optional[str] = None, remote_config: Optional[ForwardRef('DictStrAny')] = None, "
        "_wait_for_lock: bool = False)",
    "dvc.repo:locked": "(f)",
    # what pipeline/dvc_commit.py calls to commit as Repo.commit does
    "dvc.repo.stage:StageLoad.collect_granular":
        "(self, target: Optional[str] = None, with_deps: bool = False, recursive: bool = False, "
        "graph: Optional[ForwardRef('DiGraph')] = None) -> list[dvc.repo.stage.StageInfo]",
    "dvc.stage:Stage.save": "(self, allow_missing: bool = False, run_cache: bool = True)",
    "dvc.stage:Stage.commit": "(self, allow_missing=False, filter_info=None, **kwargs) -> None",
    "dvc.dvcfile:ProjectFile.dump_stages": "(self, stages, update_pipeline=True, update_lock=True, **kwargs)",
    "timm.models.vision_transformer:VisionTransformer._pos_embed": "(self, x: torch.Tensor) -> torch.Tensor",
    "timm.models.eva:Eva._pos_embed": "(self, x) -> Tuple[torch.Tensor, Optional[torch.Tensor]]",
    "transformers:PreTrainedModel.set_attn_implementation":
        "(self, attn_implementation: str | dict, allow_all_kernels: bool = False)",
}


def locked_versions() -> dict[str, str]:
    lines = (REPO / "envs/requirements.lock").read_text().splitlines()
    return dict(line.split(" ")[0].split("==") for line in lines if "==" in line and not line.startswith("#"))


def test_pyproject_pins_exactly_what_the_lock_holds_and_the_check_expects():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {}
    for req in [*project["dependencies"], *project["optional-dependencies"]["pipeline"]]:
        name, _, version = req.partition("==")
        declared[name] = version
    locked = locked_versions()
    assert {name: declared.get(name) for name in EXACT} == {name: locked[name] for name in EXACT}
    assert tools.TESTED == {name: locked[name] for name in tools.TESTED}


@pytest.mark.parametrize("name", sorted(tools.TESTED))
def test_the_installed_tool_is_the_tested_version(name):
    assert tools.mismatch(name) is None


def lookup(address: str) -> object:
    module, qualname = address.split(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("address", sorted(SIGNATURES))
def test_each_internal_still_has_the_signature_wrapped(address):
    """inspect.signature follows ``__wrapped__``, so a name already patched here reports the original's."""
    assert str(inspect.signature(lookup(address))) == SIGNATURES[address]


def test_the_record_snakemake_reads_has_the_fields_and_format_sync_writes():
    from snakemake.persistence import RECORD_FORMAT_VERSION, MetadataRecord
    from snakemake.settings.types import DAGSettings

    from taskgeom.pipeline import sync

    assert sync.RECORD_FORMAT_VERSION == RECORD_FORMAT_VERSION
    assert sync.CHECKSUM_MAX_BYTES == DAGSettings.__dataclass_fields__["max_checksum_file_size"].default
    source = inspect.getsource(sync.write_record)
    assert all(f'"{field}":' in source for field in MetadataRecord.model_fields)


def another(name: str, version: str):
    real = metadata.version
    return lambda dist: version if dist == name else real(dist)


def test_patching_dvc_stops_on_another_version_with_one_line(monkeypatch):
    monkeypatch.setattr(metadata, "version", another("dvc", "3.68.0"))
    from taskgeom.pipeline import dvc_atomic

    with pytest.raises(SystemExit) as stop:
        dvc_atomic.patch_dvc()
    line = str(stop.value)
    assert "\n" not in line
    assert "dvc 3.68.0 is installed" in line and "dvc==3.67.1" in line


@pytest.mark.parametrize("entry, name", [("from taskgeom.pipeline.dvc_atomic import main; main(['version'])", "dvc"),
                                         ("import taskgeom.pipeline.sync", "snakemake")])
def test_the_dvc_launcher_and_the_snakefile_sync_refuse_another_version(entry, name):
    """As the ``dvc`` launcher starts and as the Snakefile loads the sync: exit status 1, one line."""
    fake = "from importlib import metadata; real = metadata.version; " \
           f"metadata.version = lambda d: '0.0.1' if d == {name!r} else real(d)\n"
    done = subprocess.run([sys.executable, "-c", fake + entry], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"taskgeom: {name} 0.0.1 is installed, but taskgeom {tools.USE[name]} tested with "
        f"{name}=={tools.TESTED[name]} only: install {name}=={tools.TESTED[name]} (`bash envs/setup-venv.sh` "
        "installs the lock)"]
