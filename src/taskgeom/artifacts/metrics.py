"""Headline metrics and plot data: small YAML files beside a stage's full results, in the forms
``dvc metrics show``, ``dvc exp show`` and ``dvc plots`` read.

- Metrics: a mapping of names to numbers, at most a few levels deep (DVC flattens it to
  ``rho.test``-style columns); ``None`` marks a figure not measured, which DVC leaves out.
- Plot data: a list of rows, mappings with the same keys, whose values are numbers or ``None``
  (a series this configuration lacks, e.g. a pruning method not run; DVC draws nothing for it).
  DVC takes a top-level list as the rows.

The stage's provenance record heads each file as a YAML comment, ``# provenance: {...}``, as in
a CSV: DVC's YAML reader skips comments, so its tables show the figures only, and
``taskgeom provenance FILE`` reads the record back. (As a JSON ``"provenance"`` key, each of the
record's fields, every parameter value included, would become a column of ``dvc metrics show``;
and DVC's CSV reader would take a provenance line for the header, so plot data is not CSV.)

Floats keep six significant digits (the tables' format) and the keys their order, so reruns
give identical bytes. A path of None writes nothing: a stage run outside the pipeline (a test, a
notebook) may be given only the outputs it wants; the CLI always gives every declared output and
checks it was written.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import yaml

from taskgeom.artifacts.atomic import write_text

SUFFIX = ".yaml"
SIGNIFICANT = 6
Number = int | float | None


def number(value) -> Number:
    """A plain int, float (six significant digits) or None; bools and numpy scalars included.

    Args:
        value: None, a bool, an integer or anything ``float`` takes.

    Returns:
        None, an int (bools as 0 / 1), or a float rounded to ``SIGNIFICANT`` digits (inf and NaN kept).
    """
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    x = float(value)
    return float(f"{x:.{SIGNIFICANT}g}") if math.isfinite(x) else x


def numbers(tree):
    """``tree`` with every leaf through ``number`` and every key a string.

    Args:
        tree: a number, or a mapping of them, nested.

    Returns:
        The same shape of plain dicts and numbers.
    """
    if isinstance(tree, Mapping):
        return {str(k): numbers(v) for k, v in tree.items()}
    return number(tree)


def _check_suffix(path: str | Path) -> Path:
    path = Path(path)
    if path.suffix != SUFFIX:
        raise ValueError(f"{path}: metrics and plot data are {SUFFIX} files")
    return path


def write_metrics(path: str | Path | None, values: Mapping, provenance: dict) -> None:
    """Write ``values`` (names -> numbers, nested mappings allowed) atomically, headed by ``provenance``.

    Args:
        path: a .yaml file, or None to write nothing.
        values: names -> numbers, nested mappings allowed.
        provenance: the record of the header comment.

    Raises:
        ValueError: the path is not a .yaml file.
    """
    if path is None:
        return
    path = _check_suffix(path)
    text = yaml.safe_dump(numbers(values), sort_keys=False, default_flow_style=False, allow_unicode=True)
    write_text(path, text, provenance)


def write_plot(path: str | Path | None, rows: Sequence[Mapping], provenance: dict) -> None:
    """Write ``rows`` (mappings with the same keys) atomically, one flow mapping a line, headed
    by ``provenance``.

    Args:
        path: a .yaml file, or None to write nothing.
        rows: mappings with the same keys, numbers or None as values.
        provenance: the record of the header comment.

    Raises:
        ValueError: the path is not a .yaml file, or the rows' keys differ.
    """
    if path is None:
        return
    path = _check_suffix(path)
    rows = [numbers(r) for r in rows]
    if any(r.keys() != rows[0].keys() for r in rows):
        raise ValueError(f"{path}: every row of plot data needs the same fields (DVC reads them so)")
    text = yaml.safe_dump(rows, sort_keys=False, default_flow_style=None, width=2**31, allow_unicode=True)
    write_text(path, text, provenance)


def read(path: str | Path):
    """The numbers of a file written here (its provenance comment skipped).

    Args:
        path: the .yaml file.

    Returns:
        Its mapping (metrics) or list of rows (plot data).
    """
    return yaml.safe_load(Path(path).read_text())


def wide(rows: Iterable[Mapping], index: str, value: str, column: str | None = None,
         columns: Sequence[str] | None = None) -> list[dict]:
    """Long rows -> one row per value of ``index`` (in order of first appearance) holding the mean
    of ``value`` over the rows that share it (e.g. seeds): one field named ``value``, or, with
    ``column``, one field per value of ``column`` (``columns`` fixes them; None where a row lacks one).

    Args:
        rows: long rows.
        index: the field that names each output row.
        value: the field averaged.
        column: the field whose values become the output's fields, or None.
        columns: those fields, in order; None for every value seen, in order of first appearance.

    Returns:
        One dict per value of ``index``.
    """
    groups: dict = {}
    for row in rows:
        key = row[column] if column else value
        groups.setdefault(row[index], {}).setdefault(key, []).append(row[value])
    fields = list(columns) if columns is not None else list(dict.fromkeys(k for g in groups.values() for k in g))
    return [{index: i, **{f: float(np.mean(g[f])) if f in g else None for f in fields}} for i, g in groups.items()]


def nest(rows: Iterable[Mapping], keys: Sequence[str], value: str, names: Mapping | None = None) -> dict:
    """Rows -> {row[keys[0]]: {row[keys[1]]: ... row[value]}}; ``names`` maps a key to the function
    that names its values (default ``str``), e.g. ``{"ratio": eta_key}``.

    Args:
        rows: flat rows.
        keys: the fields that name each level, outermost first.
        value: the field at the leaves (a later row overwrites an earlier one with the same keys).
        names: key -> the function that labels its values.

    Returns:
        The nested mapping.
    """
    out: dict = {}
    for row in rows:
        node = out
        labels = [(names or {}).get(k, str)(row[k]) for k in keys]
        for label in labels[:-1]:
            node = node.setdefault(label, {})
        node[labels[-1]] = row[value]
    return out


def eta_key(ratio: float) -> str:
    """A pruning ratio as a metric name, in percent: 0.2 -> 'eta20', 0.125 -> 'eta12_5'.

    Args:
        ratio: η.

    Returns:
        The name.
    """
    return "eta" + f"{100 * ratio:g}".replace(".", "_")
