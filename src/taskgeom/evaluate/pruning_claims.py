"""The judges of the claims on using the metric: token reduction against ToMe (paper Table 2,
App. E.1, Tables 4–5), ToMe's own merging against every hard reduction (a finding of ours), and
the Decoder Retrieval Metric against feature distances (Tables 14–15).

Each pruning judge picks its rows with a selector of its own, which its reason rule
(``evaluate.reasons``) reads too; a check counts a success where the paired test by image gives
p < ``ALPHA`` in the claim's direction. Where the tables carry ToMe's merging (``MERGING``) in
the same setting, a check names it as the reference it is, never as Table 2's ToMe.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from taskgeom.evaluate.claim import ALPHA, MERGING, TOME, Checks, Judged, Tables, rows_of
from taskgeom.prune.methods import METHODS

SETTING = ("part", "model", "domain", "resolution", "schedule", "llf", "ratio", "metric")  # a row's setting
HARD = tuple(m.name for m in METHODS.values() if m.score is not None)  # by scores: what ToMe merging is judged against


def _same_setting(table: pd.DataFrame, row) -> pd.DataFrame:
    keys = [k for k in SETTING if k in table.columns]
    return table[pd.concat([table[k].astype(str) == str(getattr(row, k)) for k in keys], axis=1).all(axis=1)]


def reference(table: pd.DataFrame, row) -> str:
    """" (soft ToMe merging, a reference: m)" for ``row``'s setting, "" where the table has none."""
    merging = _same_setting(table, row)
    merging = merging[merging["method"] == MERGING]
    return f" (soft ToMe merging, a reference: {merging['mean'].iloc[0]:.3g})" if len(merging) else ""


def beats(table: pd.DataFrame, rows: pd.DataFrame, label: Callable) -> Checks:
    """Importance against a baseline's ``rows`` (with importance_minus_method and p_vs_importance):
    a success where importance's error is the lower one and the paired test gives p < ALPHA."""
    return [(f"{label(r)}: importance {r.importance_mean:.3g} vs ToMe score {r.mean:.3g}{reference(table, r)} "
             f"(p {r.p_vs_importance:.2g})",
             bool(r.importance_minus_method < 0 and r.p_vs_importance < ALPHA)) for r in rows.itertuples()]


def cls_rows(t: Tables) -> pd.DataFrame:
    """ToMe's score rows of Table 2's CLS half at η > 0."""
    mine = rows_of(t["prune_table2"], "ours")
    return mine[(mine["part"] == "cls") & (mine["method"] == TOME) & (mine["ratio"] > 0)]


def cls_merging(t: Tables, _) -> Judged:
    """Importance against ToMe's score on CLS decoders, per model and η > 0 (Table 2).

    Args:
        t: the run's tables by name.

    Returns:
        The paper's figure and the checks: ``beats`` per model and η.
    """
    theirs = rows_of(t["prune_table2"], "paper")
    theirs = theirs[(theirs["part"] == "cls") & theirs["method"].isin([TOME, "importance"])]
    return ("; ".join(f"{r.model} {r.method} η {r.ratio:g}: {r.mean:g}" for r in theirs.itertuples()),
            beats(t["prune_table2"], cls_rows(t), lambda r: f"{r.model} η {r.ratio:g}"))


DENSE_PAPER = "geometric ahead of ToMe only at η ≥ 0.20"


def base_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Rows of added SILog at the first domain and the base resolution, LLF on."""
    rows = table[(table["llf"].astype(str) == "True") & (table["metric"] == "add_silog")]
    return rows[(rows["resolution"] == table["resolution"].min()) & (rows["domain"] == table["domain"].iloc[0])]


def dense_rows(t: Tables) -> pd.DataFrame:
    """ToMe's score rows, 2-stage with LLF, η ≥ 0.2, first domain, base resolution."""
    rows = base_rows(t["prune_schedules"])
    return rows[(rows["schedule"] == "2-stage") & (rows["method"] == TOME) & (rows["ratio"] >= 0.2)]


def dense_pruning(t: Tables, _) -> Judged:
    """Importance against ToMe's score, 2-stage with LLF, η ≥ 0.2, on dense depth.

    Args:
        t: the run's tables by name.

    Returns:
        The paper's figure and the checks: ``beats`` per model and η.
    """
    return DENSE_PAPER, beats(t["prune_schedules"], dense_rows(t), lambda r: f"{r.model} η {r.ratio:g}")


def resolution_rows(t: Tables) -> pd.DataFrame:
    """ToMe's score rows with LLF, η > 0, above the base resolution."""
    table = t["prune_resolutions"]
    return table[(table["method"] == TOME) & (table["ratio"] > 0) & (table["llf"].astype(str) == "True")
                 & (table["resolution"] > table["resolution"].min())]


def resolution_transfer(t: Tables, _) -> Judged:
    """Importance against ToMe's score above the base resolution (Tables 4–5).

    Args:
        t: the run's tables by name.

    Returns:
        The paper's figure and the checks: ``beats`` per model, resolution, schedule with LLF, and η > 0.
    """
    return ("the paper's Tables 4–5 rank geometric pruning against ToMe at 336 and 448 px",
            beats(t["prune_resolutions"], resolution_rows(t),
                  lambda r: f"{r.model} {r.resolution}px {r.schedule} η {r.ratio:g}"))


def hard_rows(t: Tables) -> pd.DataFrame:
    """The hard reductions' rows (``HARD``, with p_vs_tome) of every schedule with LLF, η > 0,
    first domain, base resolution, where the same setting has a ToMe-merging row."""
    rows = base_rows(t["prune_schedules"])
    rows = rows[rows["ratio"] > 0]
    merged = rows[rows["method"] == MERGING]
    keys = ["model", "schedule", "ratio"]
    hard = rows[rows["method"].isin(HARD)]
    return hard.merge(merged[keys + ["mean"]].rename(columns={"mean": "merging_mean"}), on=keys)


def soft_merging(t: Tables, _) -> Judged:
    """ToMe's soft merging against every hard reduction on dense depth, per model, schedule and η.

    Args:
        t: the run's tables by name.

    Returns:
        No paper figure (the paper does not state it) and the checks: per (model, schedule, η),
        whether merging's added SILog lies below each hard method's with p < ALPHA.
    """
    checks = []
    for (model, schedule, ratio), rows in hard_rows(t).groupby(["model", "schedule", "ratio"], sort=False):
        ahead = (rows["merging_mean"] < rows["mean"]) & (rows["p_vs_tome"] < ALPHA)
        best = rows.loc[rows["mean"].idxmin()]
        checks.append((f"{model} {schedule} η {ratio:g}: merging {rows['merging_mean'].iloc[0]:.3g} vs the best "
                       f"hard method ({best['method']}) {best['mean']:.3g} (p {best['p_vs_tome']:.2g})",
                       bool(ahead.all())))
    return "not stated by the paper", checks


def _rho(r) -> str:
    return f"{r.method} {r.rho_mean:.3g} [{r.rho_low:.3g}, {r.rho_high:.3g}]"


def drm_against(name: str, baselines: tuple[str, ...]) -> Callable[[Tables, object], Judged]:
    """A judge of the DRM against ``baselines`` in the retrieval table ``name``.

    Args:
        name: the table, e.g. "retrieval_table14".
        baselines: the methods the DRM must beat, e.g. ("l2", "cosine").

    Returns:
        The judge: per model, domain and baseline, whether the DRM's ρ interval lies above the
        baseline's; the paper's figure is its rows' ρ.
    """
    def judge(t: Tables, _) -> Judged:
        table = t[name]
        checks = []
        for (model, domain), rows in table[table["model"] != "paper"].groupby(["model", "domain"], sort=False):
            checks += [(f"{model} {domain}: {_rho(d)} vs {_rho(o)}", d.rho_low > o.rho_high)
                       for d in rows[rows["method"] == "drm"].itertuples()
                       for o in rows[rows["method"].isin(baselines)].itertuples()]
        return "; ".join(f"{r.method} ρ {r.rho_mean:g}" for r in table[table["model"] == "paper"].itertuples()), checks
    return judge
