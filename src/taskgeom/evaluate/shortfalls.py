"""The zoo's shortfalls, stated beside the report's rows they affect.

Two marks on a table's probe names, each explained by one footnote line under the table:
- ``MULTIVIEW_MARK``: the probe reads a multi-view model that has not learned relative pose, i.e.
  whose relative rotation error (the zoo table's ``POSE_METRIC``) is at least
  ``POSE_LEARNED_BELOW`` times the trivial prediction's (the training set's mean pose);
- ``SCALE_MARK``: a Table 1 row in its counterpart's regime whose token CV or effective rank is
  at least ``SCALE`` times, or at most 1/``SCALE`` of, the counterpart's (an order of magnitude:
  the same regime reached on other figures, as the depth probes' CV against Depth-Anything-V2's);
- ``REGIME_MARK``: a Table 1 row whose regime differs from its counterpart's in the paper
  (``evaluate.claim.PAPER_PROBE``), with its κ_cap(r), CV, erank and r_0.90 against the
  thresholds the run gave ``diagnostics.regime`` (``diagnose.regimes``: kappa_high, cv_high,
  erank_rich; the schema requires them, so the report reads the rule the table was made with).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from taskgeom.evaluate.claim import PAPER_PROBE, is_multiview

MULTIVIEW_MARK = "†"
REGIME_MARK = "‡"
SCALE_MARK = "§"
SCALE = 10.0
SCALE_AXES = (("cv", "token CV"), ("erank", "erank"))
POSE_METRIC = "rot_err_deg"
POSE_LEARNED_BELOW = 0.5   # rotation error below this share of the trivial prediction's: relative pose learned
NAME_COLUMNS = ("probe", "probes", "vae")   # the column that names a row's probe, first present
REGIME_COLUMNS = {"source", "probe", "model", "decoder", "metric", "regime", "kappa_cap", "cv", "erank"}


@dataclass(frozen=True)
class Shortfalls:
    """What the marks need to know of a run.

    Attributes:
        hosts: probe, VAE and model name -> the zoo model it reads.
        multiview: the multi-view zoo models.
        pose: multi-view model -> (its rotation error, the trivial prediction's), in degrees, for
            those that have not learned relative pose.
        thresholds: ``diagnostics.regime``'s keyword thresholds as the run set them.
        r: the rank budget of the regime rule.
    """

    hosts: dict[str, str]
    multiview: frozenset[str]
    pose: dict[str, tuple[float, float]]
    thresholds: dict[str, float]
    r: int


def hosts(params: dict) -> dict[str, str]:
    """Every probe (``diagnose.probes``, ``learn.probes``), VAE (``vae``) and zoo model of
    ``params`` -> the zoo model it reads (a learned probe's host ``zoo/<model>`` or ``vae/<name>``)."""
    vae = {name: spec["model"] for name, spec in (params.get("vae") or {}).items()}
    out = {model: model for model in params.get("zoo") or {}}
    out |= vae
    out |= {name: spec["model"] for name, spec in (params.get("diagnose", {}).get("probes") or {}).items()}
    for name, spec in (params.get("learn", {}).get("probes") or {}).items():
        kind, _, host = spec["host"].partition("/")
        out[name] = vae.get(host, host) if kind == "vae" else host
    return out


def unlearned_pose(zoo_table: pd.DataFrame, models: frozenset[str]) -> dict[str, tuple[float, float]]:
    """``models`` whose ``POSE_METRIC`` in the zoo table is at least ``POSE_LEARNED_BELOW`` times
    the trivial baseline's -> (value, baseline)."""
    if zoo_table.empty or "metric" not in zoo_table:
        return {}
    rows = zoo_table[(zoo_table["metric"] == POSE_METRIC) & zoo_table["model"].isin(models)]
    return {r.model: (float(r.value), float(r.trivial_baseline)) for r in rows.itertuples()
            if r.value >= POSE_LEARNED_BELOW * r.trivial_baseline}


def shortfalls(params: dict, zoo_table: pd.DataFrame) -> Shortfalls:
    """The run's ``Shortfalls`` from its params (``zoo``, ``vae``, ``diagnose.probes``,
    ``diagnose.regimes``, ``diagnose.estimator``, ``learn.probes``) and its zoo table."""
    multiview = frozenset(m for m, spec in (params.get("zoo") or {}).items() if is_multiview(spec))
    diagnose = params.get("diagnose", {})
    return Shortfalls(hosts(params), multiview, unlearned_pose(zoo_table, multiview),
                      dict(diagnose["regimes"]), int(diagnose["estimator"]["r"]))


def ours(table: pd.DataFrame) -> pd.Series:
    """Which rows are this run's (not the paper's): (rows,) bool."""
    return table["source"] != "paper" if "source" in table else pd.Series(True, index=table.index)


def pose_note(model: str, value: float, baseline: float) -> str:
    """The footnote of ``MULTIVIEW_MARK`` for ``model``: its rotation error and the trivial one (degrees)."""
    return (f"{MULTIVIEW_MARK} read from {model}, whose relative rotation error is {value:.1f}° against "
            f"{baseline:.1f}° for the trivial prediction (zoo table): it has not learned relative pose; "
            "`benchmarks/mv_pose_difficulty.py` measures why.")


def multiview_rows(table: pd.DataFrame, column: str, s: Shortfalls) -> tuple[list[bool], list[str]]:
    """Which of our rows read a model of ``s.pose`` (by the name in ``column``; "a vs b" reads
    what either side reads), and a note per such model."""
    read = [{s.hosts.get(p.strip()) for p in str(name).split(" vs ")} & set(s.pose) if mine else set()
            for name, mine in zip(table[column], ours(table))]
    return [bool(m) for m in read], [pose_note(m, *s.pose[m]) for m in sorted(set().union(set(), *read))]


def paper_regimes(table: pd.DataFrame) -> dict[str, str]:
    """The paper's Table 1 regime by decoder (without the "(our rule: …)" remark)."""
    paper = table[~ours(table)]
    return {r.decoder: str(r.regime).split(" (")[0] for r in paper.itertuples()}


def compare(value: float, threshold: float, strict_above: bool = False) -> str:
    """The relation of ``value`` to ``threshold`` as the regime rule reads it."""
    if strict_above:
        return ">" if value > threshold else "≤"
    return "≥" if value >= threshold else "<"


def regime_note(row, theirs: str, counterpart: str, s: Shortfalls) -> str:
    """The footnote of ``REGIME_MARK`` for a Table 1 row (a namedtuple of its columns) whose regime
    is not the paper's ``counterpart`` probe's regime ``theirs``."""
    t, r = s.thresholds, s.r
    rich = t["erank_rich"] * r
    r90 = getattr(row, "r90", float("nan"))
    r90 = "" if pd.isna(r90) else f", r_0.90 {r90:.3g} {compare(r90, rich, True)} {rich:g}"
    return (f"{REGIME_MARK} {row.probe}: {row.regime}, the paper's {counterpart} probe {theirs}. κ_cap({r}) "
            f"{row.kappa_cap:.3g} {compare(row.kappa_cap, t['kappa_high'])} kappa_high {t['kappa_high']:g}, CV "
            f"{row.cv:.3g} {compare(row.cv, t['cv_high'])} cv_high {t['cv_high']:g}, erank {row.erank:.3g} "
            f"{compare(row.erank, rich, True)} erank_rich·r = {rich:g}{r90} (`taskgeom.diagnostics.regime`).")


def regime_rows(table: pd.DataFrame, s: Shortfalls) -> tuple[list[bool], list[str]]:
    """Which of our Euclidean-output Table 1 rows have a regime other than their counterpart's in
    the paper, and a note per such row naming its figures against the thresholds."""
    if not REGIME_COLUMNS <= set(table):
        return [False] * len(table), []
    theirs, rows, notes = paper_regimes(table), [], []
    for row in table.itertuples():
        counterpart = PAPER_PROBE.get((row.model in s.multiview, row.decoder))
        differs = (row.source != "paper" and row.metric == "euclidean" and counterpart in theirs
                   and str(row.regime) != theirs[counterpart])
        rows.append(differs)
        if differs:
            notes.append(regime_note(row, theirs[counterpart], counterpart, s))
    return rows, notes


def scale_rows(table: pd.DataFrame, s: Shortfalls) -> tuple[list[bool], list[str]]:
    """Which of our Euclidean-output Table 1 rows share their counterpart's regime with a
    ``SCALE_AXES`` figure an order of magnitude from the counterpart's, and a note per such row."""
    if not REGIME_COLUMNS <= set(table):
        return [False] * len(table), []
    paper = {r.decoder: r for r in table[~ours(table)].itertuples()}
    rows, notes = [], []
    for row in table.itertuples():
        theirs = paper.get(PAPER_PROBE.get((row.model in s.multiview, row.decoder)))
        far = [] if (row.source == "paper" or row.metric != "euclidean" or theirs is None
                     or str(row.regime) != str(theirs.regime).split(" (")[0]) else [
            (label, getattr(row, col), getattr(theirs, col)) for col, label in SCALE_AXES
            if getattr(theirs, col) > 0 and not 1 / SCALE < getattr(row, col) / getattr(theirs, col) < SCALE]
        rows.append(bool(far))
        if far:
            notes.append(f"{SCALE_MARK} {row.probe}: " + ", ".join(
                f"{label} {mine:.3g}, {mine / other:.2g}× the paper's {theirs.decoder} {other:.3g}"
                for label, mine, other in far) + f", in the same regime ({row.regime}).")
    return rows, notes


def annotate(table: pd.DataFrame, s: Shortfalls) -> tuple[pd.DataFrame, list[str]]:
    """``table`` with ``REGIME_MARK``, ``SCALE_MARK`` and ``MULTIVIEW_MARK`` after the probe names
    they apply to (the first of ``NAME_COLUMNS`` present), and the footnote lines: regime notes,
    scale notes, then the multi-view models' notes."""
    column = next((c for c in NAME_COLUMNS if c in table), None)
    if column is None or table.empty:
        return table, []
    regimes, regime_notes = regime_rows(table, s)
    scales, scale_notes = scale_rows(table, s)
    views, pose_notes = multiview_rows(table, column, s)
    names = [" ".join([str(name), *([REGIME_MARK] if g else []), *([SCALE_MARK] if c else []),
                       *([MULTIVIEW_MARK] if v else [])])
             for name, g, c, v in zip(table[column], regimes, scales, views)]
    return table.assign(**{column: names}), [*regime_notes, *scale_notes, *pose_notes]
