"""Damage in a finished HDF5 store: every chunk read against its checksum before a stage uses the
file (``verify_store``), and a read that fails while a stage uses it told as one error naming the
file and what to do (``reading``). The stores themselves: ``data/hdf5.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py

from taskgeom.data.hdf5 import READ_ERRORS, StoreError, first_damage, open_store, remedy


def verify_store(path: str | Path, kind: str) -> None:
    """Read every chunk of every dataset of a finished file, each checked against its checksum.

    Args:
        path: the file.
        kind: its ``KIND_ATTR``, as ``open_store`` expects.

    Raises:
        StoreError: the file is missing, not of ``kind``, or damaged: naming it, the first damaged
            rows and what to do.
    """
    path = Path(path)
    with open_store(path, kind) as f:
        names: list[str] = []
        try:
            f.visititems(lambda n, obj: names.append(n) if isinstance(obj, h5py.Dataset) else None)
        except READ_ERRORS:
            names.append("/")
        where = "its index of datasets" if names[-1:] == ["/"] else first_damage(f, names)
    if where:
        raise StoreError(f"{path}: damaged ({where} do not pass their checksum or do not decode); {remedy(path, kind)}")


@contextmanager
def reading(path: str | Path, kind: str) -> Iterator[None]:
    """A context for reads of a finished file: a chunk that fails to decode raises StoreError.

    Args:
        path: the file read inside the context.
        kind: its ``KIND_ATTR``, naming the stage that rebuilds it.

    Yields:
        None.

    Raises:
        StoreError: naming the file, the read that failed and what to do.
    """
    try:
        yield
    except (OSError, RuntimeError) as exc:  # h5py's errors of a chunk or index that does not decode
        raise StoreError(f"{path}: damaged, a read failed ({exc}); {remedy(Path(path), kind)}") from None
