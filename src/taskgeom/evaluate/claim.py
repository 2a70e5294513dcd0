"""What a claim of the paper is to the findings, and the vocabulary its judges share.

A ``Claim`` names the tables it is judged from (name -> DataFrame, with the paper's rows where a
table carries them), its rule, a judge that returns the paper's figure and our checks (one per item
the claim applies to: a probe, a model, a ratio η; each a success or not), and the reason rule that
says why a claim that does not hold did not (``evaluate.reasons``). The verdict is

- ``holds``: every check succeeds;
- ``does not hold``: none does;
- ``mixed``: some do;
- ``not tested``: the run made none of the tables' rows the claim applies to.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

HOLDS, FAILS, MIXED, UNTESTED = "holds", "does not hold", "mixed", "not tested"
ALPHA = 0.05
Tables = dict[str, pd.DataFrame]
Checks = list[tuple[str, bool]]  # (what was compared, whether the rule's condition held)
Judged = tuple[str, Checks]      # (the paper's figure, our checks)
TOME = "tome_score"  # ToMe's key-similarity score in the same reduction: the paper's Table 2 ToMe column
MERGING = "tome"     # ToMe's own soft merging: a reference line, never Table 2's ToMe

# Our probes' counterparts among the paper's Table 1 rows, by (multi-view host, decoder).
PAPER_PROBE = {(False, "cls"): "cls", (False, "depth"): "dpt-depth", (True, "camera"): "camera",
               (True, "pointmap"): "pointcloud", (True, "depth"): "depth"}


@dataclass(frozen=True)
class Claim:
    """One claim of the paper, the tables it is judged from, and its rule.

    Attributes:
        claim: the claim, in words.
        where: the paper's table or section.
        tables: the tables it reads.
        rule: the rule its checks apply, in words.
        judge: (tables, multiview) -> (the paper's figure, our checks).
        counted: what each check counts, for the one-phrase summary "k of n <counted>".
        headline: tables -> the paper's headline figure in one phrase (``evaluate.headlines``),
            "" where the tables hold none; None: the paper's figure is one phrase already.
        reason: (tables, multiview) -> why the claim does not hold here (``evaluate.reasons``),
            asked only of a claim whose verdict is not ``holds``.
    """
    claim: str
    where: str                                            # the paper's table or section
    tables: tuple[str, ...]                               # the tables it reads
    rule: str
    judge: Callable[[Tables, Callable[[str], bool]], Judged]
    counted: str = "items meet the rule"
    headline: Callable[[Tables], str] | None = None
    reason: Callable | None = None


def verdict(outcomes: list[bool]) -> str:
    """The verdict of a claim's checks (module docstring).

    Args:
        outcomes: whether each check succeeded.

    Returns:
        ``UNTESTED`` without checks, else ``HOLDS``, ``FAILS`` or ``MIXED``.
    """
    if not outcomes:
        return UNTESTED
    return HOLDS if all(outcomes) else FAILS if not any(outcomes) else MIXED


def interval(text: object) -> tuple[float, float]:
    """A table's "[low, high]" cell as floats (NaNs when empty).

    Args:
        text: the cell, a JSON list or anything else (missing).

    Returns:
        (low, high).
    """
    values = json.loads(text) if isinstance(text, str) and text.startswith("[") else [np.nan, np.nan]
    return float(values[0]), float(values[1])


def rows_of(df: pd.DataFrame, who: str, column: str = "source") -> pd.DataFrame:
    """``who``'s rows ("ours" or "paper") of a table that holds both.

    Args:
        df: the table.
        who: "ours" or "paper".
        column: the column that tells them apart.

    Returns:
        Those rows.
    """
    return df[df[column] == who]


def is_multiview(spec: dict) -> bool:
    """Whether a zoo entry reads view groups (the tiny multi-view model, or VGGT).

    Args:
        spec: the entry's parameters (``zoo.<model>``).

    Returns:
        Whether it is a multi-view host.
    """
    return spec.get("kind") == "multiview" or spec.get("adapter") == "vggt"
