"""Tables as CSV (the source of truth) plus Markdown and LaTeX renderings."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from taskgeom.artifacts.atomic import write_text
from taskgeom.artifacts.provenance import split_header

FLOAT_FORMAT = "%.6g"


def write_table(df: pd.DataFrame, csv: str | Path, md: str | Path | None = None, tex: str | Path | None = None,
                caption: str = "", *, provenance: dict) -> None:
    """Write ``df`` atomically, each file headed by its provenance line; floats in a fixed
    format so identical runs give identical bytes."""
    write_text(csv, df.to_csv(index=False, float_format=FLOAT_FORMAT, lineterminator="\n"), provenance)
    if md is not None:
        body = df.to_markdown(index=False, floatfmt=".4g")
        write_text(md, (f"{caption}\n\n" if caption else "") + body + "\n", provenance)
    if tex is not None:
        latex = df.to_latex(index=False, float_format=lambda x: f"{x:.4g}", caption=caption or None, escape=True)
        write_text(tex, latex, provenance)


def read_table(path: str | Path) -> pd.DataFrame:
    """A CSV written by ``write_table`` (its provenance line skipped)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: table not found (run the stage that makes it first)")
    _, body = split_header(path.read_text(), ".csv")
    return pd.read_csv(io.StringIO(body))
