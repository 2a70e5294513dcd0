"""A stage instance's outputs put back from DVC's cache where dvc.lock records them as made from
what the instance reads now (``from_lock``): the job's record in a clone that pulled or checked
out what others made.

A job's own record (``made``) exists only where it ran. A clone that ``dvc pull``-ed or
``dvc checkout``-ed its outputs has none, so a front end that reruns the job (Snakemake, after
an upstream file was damaged and made again with the same bytes) would do its work again, where
DVC would compare and stop. dvc.lock, written from the job records of whoever made the outputs
(``job_record``), says the same as a record would: the instance's entry pairs the md5 of every
file it read (its code record among them), the parameter values it read and the md5 of every
output. Where each of those equals what the instance reads now (a folder's files by the listing
DVC cached for it), each output that does not hold its md5 is copied from DVC's cache into place
and checked, and the outputs are recorded as the job's own (``made.record``); anything else, an
output neither in place nor in the cache included, runs the job.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import yaml

from taskgeom.artifacts.atomic import atomic_path
from taskgeom.data.digests import hash_file
from taskgeom.pipeline.made import RERUN, record
from taskgeom.pipeline.publish import KEPT, keep


def md5(path: Path) -> str:
    """The md5 of a file's bytes, as DVC 3 records a file (``hash: md5``)."""
    return hash_file(path, "md5")


def cache_dir(root: Path) -> Path:
    """DVC's cache: ``cache.dir`` of .dvc/config.local or .dvc/config (relative to .dvc), else .dvc/cache."""
    for name in ("config.local", "config"):
        parser = configparser.ConfigParser()
        try:
            parser.read(root / ".dvc" / name)
        except configparser.Error:
            continue
        if parser.has_option("cache", "dir"):
            return (root / ".dvc" / parser.get("cache", "dir")).resolve()
    return root / ".dvc" / "cache"


def cached(cache: Path, digest: str) -> Path:
    """Where DVC 3 keeps the object ``digest`` (a folder's listing ends in ``.dir``)."""
    return cache / "files" / "md5" / digest[:2] / digest[2:]


def holds(entry: dict, path: Path, cache: Path) -> bool:
    """Whether ``path`` holds what a dvc.lock file entry records: a file's md5, or every file a
    folder's cached listing names, by relative path and md5, and no other."""
    digest = entry.get("md5")
    if entry.get("hash") != "md5" or not isinstance(digest, str):
        return False
    if not digest.endswith(".dir"):  # the size first: a file of another size is not read
        return path.is_file() and path.stat().st_size == entry.get("size", -1) and md5(path) == digest
    try:
        listing = {f["relpath"]: f["md5"] for f in json.loads(cached(cache, digest).read_text())}
    except (OSError, ValueError, KeyError, TypeError):
        return False
    files = {p.relative_to(path).as_posix(): p for p in path.rglob("*") if p.is_file()} if path.is_dir() else {}
    return files.keys() == listing.keys() and all(md5(p) == listing[rel] for rel, p in files.items())


def lock_entry(address: str, root: Path) -> dict | None:
    """dvc.lock's entry for ``address``, None without one."""
    try:
        lock = yaml.load((root / "dvc.lock").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        entry = lock["stages"][address]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None
    return entry if isinstance(entry, dict) else None


def from_lock(address: str, made: str, read: Mapping[str, str], values: Mapping[str, dict],
              outputs: Mapping[str, Path], root: Path = Path(".")) -> bool:
    """Put the instance's outputs back from DVC's cache, and record them as its job's, when
    dvc.lock's entry records them as made from the files it reads now and the parameter
    ``values`` it was given (module docstring); whether it did. Never when ``TASKGEOM_RERUN=1``."""
    entry = lock_entry(address, root) if os.environ.get(RERUN) != "1" else None
    if entry is None or (entry.get("params") or {}) != dict(values):
        return False
    cache = cache_dir(root)
    if not all(isinstance(d, dict) and holds(d, root / d.get("path", ""), cache) for d in entry.get("deps") or []):
        return False
    outs = {o.get("path"): o for o in entry.get("outs") or [] if isinstance(o, dict)}
    wanted = [(root / p, outs.get(str(p))) for p in outputs.values()]
    if any(o is None for _, o in wanted):
        return False
    missing = [(path, o) for path, o in wanted if not holds(o, path, cache)]
    if not all(cached(cache, str(o.get("md5"))).is_file() for _, o in missing):
        return False
    for path, out in missing:
        with atomic_path(path) as tmp:
            shutil.copyfile(cached(cache, out["md5"]), tmp)
            os.chmod(tmp, 0o644)
        if not holds(out, path, cache):
            return False
    keep(outputs.values(), root / KEPT, root)
    record(address, made, read, values, outputs)
    return True
