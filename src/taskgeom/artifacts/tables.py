"""Tables as CSV (the source of truth) plus Markdown and LaTeX renderings."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd

from taskgeom.artifacts.atomic import write_text
from taskgeom.artifacts.provenance import split_header

FLOAT_FORMAT = "%.6g"


def write_table(df: pd.DataFrame, csv: str | Path, md: str | Path | None = None, tex: str | Path | None = None,
                caption: str = "", *, provenance: dict) -> None:
    """Write ``df`` atomically, each file headed by its provenance line; floats in a fixed
    format so identical runs give identical bytes.

    Args:
        df: the table.
        csv: the CSV file (floats as ``FLOAT_FORMAT``).
        md: the Markdown rendering (four significant digits), or None.
        tex: the LaTeX rendering (four significant digits), or None.
        caption: heads the Markdown and captions the LaTeX.
        provenance: the record of each file's first line.
    """
    write_text(csv, df.to_csv(index=False, float_format=FLOAT_FORMAT, lineterminator="\n"), provenance)
    if md is not None:
        body = df.to_markdown(index=False, floatfmt=".4g")
        write_text(md, (f"{caption}\n\n" if caption else "") + body + "\n", provenance)
    if tex is not None:
        latex = df.to_latex(index=False, float_format=lambda x: f"{x:.4g}", caption=caption or None, escape=True)
        write_text(tex, latex, provenance)


def read_table(path: str | Path) -> pd.DataFrame:
    """A CSV written by ``write_table`` (its provenance line skipped).

    Args:
        path: the CSV file.

    Returns:
        The table (empty for a file of no rows or columns).

    Raises:
        FileNotFoundError: the file is missing.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: table not found (run the stage that makes it first)")
    _, body = split_header(path.read_text(), ".csv")
    return pd.read_csv(io.StringIO(body)) if body.strip() else pd.DataFrame()  # a table of no rows or columns



ALPHA = 0.05


def verdict(difference: float, p: float, *, subject: str = "importance", lower_is_better: bool = True,
            alpha: float = ALPHA) -> str:
    """Which side of a paired comparison wins, in words: ``difference`` is subject − other (its
    sign picks the side), ``p`` the paired test's p-value (NaN: every pair tied, or untested).

    Args:
        difference: subject − other.
        p: the paired test's p-value.
        subject: names the subject in the verdict.
        lower_is_better: whether a lower value wins (errors).
        alpha: the significance level.

    Returns:
        "<subject> better" or "<subject> worse", or why there is no verdict.
    """
    if math.isnan(p):
        return "no difference (every image tied)" if difference == 0 else "not tested"
    if p >= alpha:
        return f"no difference at p ≥ {alpha:g}"
    if math.isnan(difference) or difference == 0:
        return "no difference in the mean"
    return f"{subject} {'better' if (difference < 0) == lower_is_better else 'worse'}"


def add_effects(df: pd.DataFrame, keys: list[str], *, method: str = "method", reference: str = "importance",
                value: str = "mean", p: str = "p_vs_importance", lower_is_better: bool = True,
                alpha: float = ALPHA) -> pd.DataFrame:
    """``df`` (one row per method and group ``keys``) with, on every row compared with ``reference``
    (it carries the ``p`` column, or ties it exactly): ``reference``'s value in its group
    (``<reference>_<value>``), the signed effect ``<reference>_minus_method`` (reference − row),
    ``<reference>_over_method`` (reference / row) and the ``verdict``. Both values are means over
    the same images and seeds, so the difference of the means is the mean paired difference.

    Args:
        df: one row per method and group.
        keys: the columns that make a group.
        method: the column naming the method.
        reference: the method every other is compared with.
        value: the compared column.
        p: the column of the paired test's p-value.
        lower_is_better: whether a lower value wins.
        alpha: the significance level.

    Returns:
        ``df`` with the new columns (NaN / "" on rows not compared); ``df`` itself when it is empty
        or lacks the ``p`` or ``method`` column.
    """
    if df.empty or p not in df or method not in df:
        return df
    ref_col = f"{reference}_{value}"
    ref = df[df[method] == reference][[*keys, value]].rename(columns={value: ref_col})
    out = df.merge(ref, on=keys, how="left", validate="many_to_one")
    compared = (out[method] != reference) & out[ref_col].notna() & out[value].notna()
    compared &= out[p].notna() | (out[value] == out[ref_col])
    out[ref_col] = out[ref_col].where(compared)
    out[f"{reference}_minus_method"] = out[ref_col] - out[value].where(compared)
    out[f"{reference}_over_method"] = out[ref_col] / out[value].where(compared & (out[value] != 0))
    out["verdict"] = [verdict(d, q, subject=reference, lower_is_better=lower_is_better, alpha=alpha) if c else ""
                      for d, q, c in zip(out[f"{reference}_minus_method"], out[p], compared)]
    return out


def comparison(df: pd.DataFrame, index: list[str], *, method: str = "method", reference: str = "importance",
               value: str = "mean", p: str = "p_vs_importance") -> pd.DataFrame:
    """The compared rows of ``add_effects(df, ...)`` as a readable table: ``index``, the baseline,
    η, both values, the signed difference and the ratio, the p-value and the verdict.

    Args:
        df: the output of ``add_effects``.
        index: the columns that name each comparison.
        method: the column naming the method.
        reference: the method compared with.
        value: the compared column.
        p: the column of the paired test's p-value.

    Returns:
        The table of formatted strings, one row per compared row.
    """
    rows = df[df["verdict"].fillna("").astype(str) != ""] if "verdict" in df else df.iloc[:0]
    fmt = lambda x, spec: "" if pd.isna(x) else format(x, spec)
    return pd.DataFrame({
        **{k: rows[k] for k in index},
        "baseline": rows[method],
        **({"η": rows["ratio"].map(lambda x: f"{x:g}")} if "ratio" in df else {}),
        reference: rows.get(f"{reference}_{value}", pd.Series(dtype=float)).map(lambda x: fmt(x, ".4g")),
        "baseline value": rows[value].map(lambda x: fmt(x, ".4g")),
        f"{reference} − baseline": rows.get(f"{reference}_minus_method", pd.Series(dtype=float)).map(signed),
        f"{reference} / baseline": rows.get(f"{reference}_over_method", pd.Series(dtype=float))
        .map(lambda x: fmt(x, ".3g")),
        "Wilcoxon p": rows[p].map(lambda x: "–" if pd.isna(x) else f"{x:.2g}") if p in rows else "",
        "verdict": rows.get("verdict", pd.Series(dtype=str)),
    }).reset_index(drop=True)


def signed(x: float) -> str:
    """A signed number for a table: +0.0123, −4.56 (a true minus sign), 0; empty for NaN.

    Args:
        x: the number.

    Returns:
        Three significant digits with a sign.
    """
    if pd.isna(x):
        return ""
    if x == 0:
        return "0"
    text = f"{x:+.3g}"
    return "−" + text[1:] if text.startswith("-") else text
