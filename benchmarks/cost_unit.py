"""A cost given in units of another timing (``diagnose`` in forward-equivalents): how the unit and
the total are sampled, and when their ratio is withheld.

The unit is timed at least ``MIN_UNIT_SAMPLES`` times, in batches interleaved with the runs of the
work it normalises (a batch before each run and one after the last, ``unit_batch`` each), so a
machine whose speed drifts drifts under both alike; each is reported as its median with its min
and max. A row whose unit or total spreads by more than ``UNSTABLE_SPREAD`` (max / min) was timed
on a machine whose speed changed under it: it gives no ratio, and says so (``stability``) where
the ratio would be (``shown``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

MIN_UNIT_SAMPLES = 15  # timings of the unit per row, at least
UNSTABLE_SPREAD = 2.0  # max / min of a row's unit or total timings beyond which it gives no ratio
STABLE = "stable"


def unit_batch(runs: int) -> int:
    """Unit timings per batch, with a batch before each of ``runs`` runs and one after the last."""
    return max(5, math.ceil(MIN_UNIT_SAMPLES / (runs + 1)))


def spread(times: Sequence[float]) -> float:
    """max / min of repeated timings of one thing: 1 when they agree."""
    return float(max(times) / min(times))


def stability(unit: Sequence[float], total: Sequence[float], limit: float = UNSTABLE_SPREAD) -> str:
    """``STABLE``, or why a row's ratios are withheld: the spread of its unit's timings or of its
    total's above ``limit``, e.g. "unstable: unit spread 3.1×"."""
    spreads = [f"{what} spread {spread(times):.1f}×" for what, times in (("unit", unit), ("total", total))
               if spread(times) > limit]
    return "unstable: " + ", ".join(spreads) if spreads else STABLE


def described(runs: int, unit: str, work: str) -> str:
    """The method in words, for a table's title: ``runs`` runs of ``work`` between ``unit`` batches."""
    return (f"unit: median of {(runs + 1) * unit_batch(runs)} {unit} in {runs + 1} batches between {runs} "
            f"{work}, the run of median time kept; a row whose {unit} or runs spread by more than "
            f"{UNSTABLE_SPREAD:g}× (max / min) gives no ratio")


def group_stability(rows: pd.Series) -> str:
    """The ``stability`` of a row summarising ``rows``: ``STABLE`` when all of them are."""
    unstable = int(rows.ne(STABLE).sum())
    return f"unstable: {unstable} of {len(rows)} rows" if unstable else STABLE


def shown(df: pd.DataFrame, ratios: Sequence[str]) -> pd.DataFrame:
    """``df`` for Markdown: in a row whose ``stability`` is not ``STABLE``, the first of its
    ``ratios`` columns holds the reason in place of a figure and the others "unstable"; any other
    empty ratio reads "—", and the rest are figures to four significant digits."""
    out, columns = df.copy(), [c for c in ratios if c in df]
    why = df["stability"] if "stability" in df else pd.Series(STABLE, index=df.index)
    for i, col in enumerate(columns):
        out[col] = [(reason if i == 0 else "unstable") if reason != STABLE else "—" if pd.isna(v) else f"{v:.4g}"
                    for v, reason in zip(df[col], why)]
    return out
