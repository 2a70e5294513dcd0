"""Per-image values as a tidy, gzipped CSV: the numbers behind a table's means, intervals and tests.

One row per value, one column per key (model, setting, method, seed, image, ...) and the value in
``value``. Floats are written with every digit (``repr``), float32 values first widened to
float64, so reading the file back gives exactly the values the stage aggregated. The file starts
with the provenance line of a CSV (``# provenance: {...}``, ``artifacts.provenance``) and is
compressed without a timestamp, so identical runs give identical bytes. Read it with
``pandas.read_csv(path, skiprows=1)`` or ``read_values``.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
import pandas as pd

from taskgeom.artifacts.atomic import atomic_path
from taskgeom.artifacts.provenance import header_line, split_header

SUFFIX = ".csv.gz"


def write_values(df: pd.DataFrame, path: str | Path, *, provenance: dict) -> None:
    """Write the tidy table ``df`` to ``path`` (``.csv.gz``) atomically, headed by its provenance line.

    Args:
        df: the table; float32 columns are widened to float64 (exactly) before writing.
        path: the file, ending in ``SUFFIX``.
        provenance: the record of the first line.

    Raises:
        ValueError: ``path`` does not end in ``SUFFIX``.
    """
    path = Path(path)
    if not path.name.endswith(SUFFIX):
        raise ValueError(f"{path}: a per-image values file ends in {SUFFIX}")
    wide = df.astype({c: np.float64 for c in df.columns if df[c].dtype == np.float32})
    text = header_line(provenance, ".csv") + wide.to_csv(index=False, lineterminator="\n")
    with atomic_path(path) as tmp:
        tmp.write_bytes(gzip.compress(text.encode(), compresslevel=6, mtime=0))


def read_text(path: str | Path) -> str:
    """The text of a file written by ``write_values``, provenance line included.

    Args:
        path: the ``.csv.gz`` file.

    Returns:
        Its decompressed text.

    Raises:
        FileNotFoundError: the file is missing.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: per-image values not found (run the stage that makes them first)")
    return gzip.decompress(path.read_bytes()).decode()


def read_values(path: str | Path) -> pd.DataFrame:
    """A file written by ``write_values``, its provenance line skipped.

    Args:
        path: the ``.csv.gz`` file.

    Returns:
        The tidy table (float64 values).
    """
    _, body = split_header(read_text(path), ".csv")
    return pd.read_csv(io.StringIO(body))
