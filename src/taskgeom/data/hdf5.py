"""HDF5 storage: one chunk per item, compressed, attributes recording what made the file,
written resumably and published atomically.

A file is built under ``<dir>/.partial/<name>`` and published only when complete,
so a reader never sees a half-written file. An interrupted build resumes from its
last flushed item block if the partial file was made with the same attributes;
otherwise (other parameters, or a partial file HDF5 cannot open or read back) it starts over.
Publishing rewrites the data into a fresh file in a fixed order, so the published
bytes do not depend on whether, or where, the build was interrupted.

Every dataset is chunked one item per chunk, gzip-compressed, and checksummed (HDF5's Fletcher-32
filter over each stored chunk): a chunk damaged after writing fails to read instead of returning
other values. ``data.damage.verify_store`` reads every chunk of a file, so damage anywhere is found
before a stage publishes anything derived from it; every read error names the file and what to do.

A stage that writes several files (one per split) resumes at the first unpublished one:
publishing also hard-links the file as ``<dir>/.partial/<name>.published``, which survives a
rerun (Snakemake and DVC delete a rerun job's declared outputs first, and the stage command its
staged ones: ``pipeline/publish.py``). A new build with the same attributes restores the file from that link instead
of rebuilding it; the stage calls ``forget_published`` once all its files are out.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

DONE_ATTR = "items_done"
KIND_ATTR = "taskgeom_kind"


# what writes each kind of file: the stage a damaged one is rebuilt by
WRITERS = {"world": "fetch", "targets": "targets"}


class StoreError(ValueError):
    """An HDF5 input is missing, truncated, damaged, or not the kind of file expected; the message names it."""


def remedy(path: Path, kind: str) -> str:
    """What to do about a damaged or truncated file.

    Args:
        path: the file.
        kind: its ``KIND_ATTR`` ("world", "targets", ...), naming the stage that writes it.

    Returns:
        "rerun <stage> (e.g. `snakemake -c2 --force <path>`), or restore the file with `dvc
        checkout --force <path>`": each command runs as printed (tests/test_recovery_commands.py).
        Snakemake's ``--force <path>`` reruns the one job that writes the file (whatever its
        stage); a run needs its cores named, which no profile read by default does
        (profiles/default/config.yaml). DVC replaces a file that differs from its record only with
        ``--force``.
    """
    stage = WRITERS.get(kind, "the stage that writes it")
    return (f"rerun {stage} (e.g. `snakemake -c2 --force {path}`), "
            f"or restore the file with `dvc checkout --force {path}`")


def encode_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Nested values are stored as JSON strings so any params dict fits in an attribute.

    Args:
        attrs: attribute name -> value.

    Returns:
        The same names; strings and numbers kept, anything else as sorted-key JSON.
    """
    return {k: v if isinstance(v, (str, int, float, np.integer, np.floating)) else json.dumps(v, sort_keys=True)
            for k, v in attrs.items()}


class ResumableH5:
    """Fill fixed-size datasets block by block; ``finish()`` publishes the file.

    Attributes:
        path: the published file.
        partial: the partial file under ``<dir>/.partial``.
        num_items: rows of every dataset.
        attrs: the root attributes written (encoded, with the kind and ``num_items``).
        file: the open partial file (None when restored).
        restored: whether the file was put back from its published link (nothing to write).
    """

    def __init__(self, path: str | Path, layout: Mapping[str, tuple[tuple[int, ...], str]], num_items: int,
                 attrs: Mapping[str, Any], kind: str, log: logging.Logger | None = None):
        """Restore the published file, resume the partial one, or start a new one, in that order.

        Args:
            path: the file to publish.
            layout: dataset path -> (per-item shape, dtype); every dataset has ``num_items`` rows.
            num_items: rows of every dataset.
            attrs: root attributes; a partial file is resumed only if they match exactly.
            kind: the file's kind (``open_store`` checks it).
            log: where to say why a partial file was discarded.
        """
        self.path = Path(path)
        self.log = log or logging.getLogger(__name__)
        self.partial = self.path.parent / ".partial" / self.path.name
        self.partial.parent.mkdir(parents=True, exist_ok=True)
        self.num_items = num_items
        self.attrs = {**encode_attrs(attrs), KIND_ATTR: kind, "num_items": num_items}
        self.file: h5py.File | None = None
        self.restored = self.restore()
        if not self.restored:
            self.file = self.reopen(layout) or self.create(layout)

    def restore(self) -> bool:
        """Put back this file as a run of the stage published it before the stage was rerun,
        if it was made with the same attributes (``published_link``); a link with other
        attributes is removed.

        Returns:
            Whether the file was restored.
        """
        link = published_link(self.path)
        if not link.is_file():
            return False
        try:
            with h5py.File(link, "r") as f:
                same = DONE_ATTR not in f.attrs and all(k in f.attrs and f.attrs[k] == v for k, v in self.attrs.items())
        except OSError:
            same = False
        if not same:
            link.unlink()
            return False
        if not (self.path.exists() and os.path.samefile(link, self.path)):
            fresh = self.partial.with_suffix(".publish")
            fresh.unlink(missing_ok=True)
            os.link(link, fresh)
            os.replace(fresh, self.path)
        self.log.info("%s: restored as published by an earlier run of this stage", self.path.name)
        return True

    def reopen(self, layout) -> h5py.File | None:
        """The partial file opened for appending, if it exists, has the same attributes and datasets,
        and reads back; otherwise it is discarded (``discard``).

        Args:
            layout: dataset path -> (per-item shape, dtype).

        Returns:
            The open file, or None.
        """
        if not self.partial.exists():
            return None
        try:
            f = h5py.File(self.partial, "r+")
        except OSError:
            return self.discard(None, "cannot be opened (its build was killed mid-write)")
        if not (all(k in f.attrs and f.attrs[k] == v for k, v in self.attrs.items()) and all(n in f for n in layout)):
            return self.discard(f, "was made with other parameters")
        if not readable(f, layout):
            return self.discard(f, "is damaged (its build was killed mid-write)")
        return f

    def discard(self, f: h5py.File | None, why: str) -> None:
        """Close and delete the partial file, logging why.

        Args:
            f: the partial file if open.
            why: the reason, completing "the partial file …".
        """
        if f is not None:
            f.close()
        self.partial.unlink()
        self.log.warning("%s: the partial file %s; starting over", self.path.name, why)

    def create(self, layout) -> h5py.File:
        """A new partial file with no item done.

        Args:
            layout: dataset path -> (per-item shape, dtype).

        Returns:
            The open file.
        """
        f = new_file(self.partial, self.attrs, layout, self.num_items)
        f.attrs[DONE_ATTR] = 0
        f.flush()
        return f

    @property
    def done(self) -> int:
        """Items written so far (all of them when restored)."""
        return self.num_items if self.restored else int(self.file.attrs[DONE_ATTR])

    def write(self, start: int, arrays: Mapping[str, np.ndarray]) -> None:
        """Write items start..start+k of every dataset in ``arrays`` and mark them done.

        Args:
            start: the first item; must equal ``done``.
            arrays: dataset path -> (k, *shape) values.

        Raises:
            ValueError: blocks out of order.
        """
        if start != self.done:
            raise ValueError(f"{self.partial}: blocks must be written in order (next is {self.done}, got {start})")
        count = len(next(iter(arrays.values())))
        for name, values in arrays.items():
            self.file[name][start:start + count] = values
        self.file.attrs[DONE_ATTR] = start + count
        self.file.flush()

    def finish(self, block: int = 256) -> Path:
        """Copy the complete partial file into a fresh one, link it as published and rename it into place.

        Args:
            block: items copied at a time.

        Returns:
            The published path.

        Raises:
            ValueError: not every item was written.
        """
        if self.restored:
            return self.path
        if self.done != self.num_items:
            raise ValueError(f"{self.partial}: only {self.done} of {self.num_items} items written")
        layout = {name: (self.file[name].shape[1:], self.file[name].dtype) for name in self.layout_names()}
        fresh = self.partial.with_suffix(".publish")
        with new_file(fresh, self.attrs, layout, self.num_items) as out:
            for name in layout:
                for start in range(0, self.num_items, block):
                    out[name][start:start + block] = self.file[name][start:start + block]
        self.file.close()
        link = published_link(self.path)
        link.unlink(missing_ok=True)
        os.link(fresh, link)
        os.replace(fresh, self.path)
        self.partial.unlink()
        return self.path

    def layout_names(self) -> list[str]:
        """The paths of every dataset of the partial file.

        Returns:
            Dataset paths, in the file's order.
        """
        names: list[str] = []
        self.file.visititems(lambda n, obj: names.append(n) if isinstance(obj, h5py.Dataset) else None)
        return names

    def close(self) -> None:
        """Close the partial file if it is open (nothing is published)."""
        if self.file is not None and self.file.id.valid:
            self.file.close()


def published_link(path: Path) -> Path:
    """Where ``ResumableH5`` keeps a second link to ``path`` once it is published.

    Args:
        path: the published file.

    Returns:
        ``<dir>/.partial/<name>.published``.
    """
    return path.parent / ".partial" / f"{path.name}.published"


def forget_published(paths) -> None:
    """Drop the published links of ``paths`` (a stage's files), once the stage has written all of them.

    Args:
        paths: the stage's published files.
    """
    for path in paths:
        published_link(Path(path)).unlink(missing_ok=True)


READ_ERRORS = (OSError, RuntimeError, ValueError, KeyError)  # what h5py raises on a damaged file


def first_damage(f: h5py.File, names, block: int = 256) -> str | None:
    """Where the first rows of datasets ``names`` that do not decode are.

    Args:
        f: the open file.
        names: dataset paths in ``f``, each read in blocks of rows.
        block: rows per read.

    Returns:
        "<name> rows a-b" (or the dataset's name if its shape does not read), or None.
    """
    for name in names:
        try:
            rows = f[name].shape[0]
        except READ_ERRORS:
            return name
        for start in range(0, rows, block):
            try:
                f[name][start:start + block]
            except READ_ERRORS:
                return f"{name} rows {start}-{min(start + block, rows) - 1}"
    return None


def readable(f: h5py.File, names, block: int = 256) -> bool:
    """Every row of every dataset ``names`` decodes. A kill mid-write can leave a file that
    opens but whose chunk index or written chunks are damaged (HDF5 keeps no journal).

    Args:
        f: the open file.
        names: dataset paths in ``f``, each read in blocks of rows (``first_damage``).
        block: rows per read.

    Returns:
        True when every dataset and block of rows reads; False at the first that does not.
    """
    return first_damage(f, names, block) is None


def new_file(path: Path, attrs: Mapping[str, Any], layout: Mapping[str, tuple[tuple[int, ...], Any]],
             num_items: int) -> h5py.File:
    """An HDF5 file with ``attrs`` and one chunked, compressed dataset per layout entry, created in order.

    Args:
        path: the file, overwritten.
        attrs: root attributes.
        layout: dataset path -> (per-item shape, dtype).
        num_items: rows of every dataset (one chunk per row, gzip level 4 with shuffle).

    Returns:
        The file, open for writing.
    """
    f = h5py.File(path, "w", libver=("earliest", "v110"), track_order=True)
    for k, v in attrs.items():
        f.attrs[k] = v
    for name, (shape, dtype) in layout.items():
        f.create_dataset(name, shape=(num_items, *shape), dtype=dtype, chunks=(1, *shape), compression="gzip",
                         compression_opts=4, shuffle=True, fletcher32=True, track_times=False)
    return f


def open_store(path: str | Path, kind: str) -> h5py.File:
    """Open a finished taskgeom HDF5 file for reading, or raise StoreError naming it.

    Args:
        path: the file.
        kind: the kind it must be (e.g. "world", "targets").

    Returns:
        The file, open read-only.

    Raises:
        StoreError: the file is missing, unreadable, of another kind, or incomplete.
    """
    path = Path(path)
    if not path.is_file():
        raise StoreError(f"{path}: no such file (run the stage that makes it first)")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise StoreError(f"{path}: not a readable HDF5 file (truncated or damaged: {exc}); "
                         f"{remedy(path, kind)}") from None
    found = f.attrs.get(KIND_ATTR)
    if found != kind:
        f.close()
        raise StoreError(f"{path}: expected a taskgeom {kind!r} file, found {found!r}")
    if DONE_ATTR in f.attrs:
        f.close()
        raise StoreError(f"{path}: incomplete file (its build was interrupted)")
    return f


def read_attr_json(f: h5py.File, key: str) -> Any:
    """A root attribute, decoded from JSON when ``encode_attrs`` stored it so.

    Args:
        f: the open file.
        key: the attribute.

    Returns:
        The value (a list or dict if it was one).
    """
    value = f.attrs[key]
    return json.loads(value) if isinstance(value, str) and value[:1] in "[{" else value
