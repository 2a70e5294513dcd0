"""The iso-FLOP view of a ``compare`` table: each method's Pareto fronts and the best setting of
each method within a FLOP budget (docs/patch.md, "At a FLOP budget").

Inputs: the table (``run.table``; one row per setting with ``method``, ``ratio``,
``flops_vs_unpatched``, ``speedup_call`` and the primary measure's ``<m>_mean``, ``_low`` and
``_high``; the unpatched row is left out here), the tidy per-image values (method, ratio, image,
measure, value) and each setting's seconds per timed round, keyed by (method, ratio).

Definitions (the score s is the primary mean to ``DIGITS`` significant digits, negated where higher
is better: lower s is better):

- FLOPs front of a method: its settings that no other setting of the same method dominates; A
  dominates B when flops_A ≤ flops_B and s_A ≤ s_B, one of the two strictly (equal settings both
  stay).
- throughput front of a method: among its settings whose speedup is called
  (``timing.CALLED``), those no other such setting dominates; A dominates B when s_A ≤ s_B and A
  ran faster than B in every timed round (``timing.faster_in_every_round``). A setting whose
  speedup is not called is not ranked by throughput (None), neither on the front nor off it.
- choice of a method at budget b: among its settings with flops_vs_unpatched ≤ b, the lowest s
  (ties: the fewer FLOPs, then the smaller η); none when no setting is within b.
- verdict at budget b: the methods' choices ranked by s; the first leads the second when its s is
  strictly lower (equal means: a tie, no winner), and the lead is significant when the two-sided
  paired Wilcoxon p over the images between the two choices (``evaluate.stats.wilcoxon_p``) is
  below ``ALPHA``, one test per budget, uncorrected.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from taskgeom.artifacts.tables import ALPHA
from taskgeom.comparing.run import UNPATCHED
from taskgeom.comparing.timing import CALLED, faster_in_every_round
from taskgeom.evaluate.stats import wilcoxon_p

BUDGETS = (0.5, 0.6, 0.7, 0.8, 0.9)  # fractions of the unpatched model's FLOPs per image
DIGITS = 12                          # significant digits of a mean when settings are ranked
Seconds = Mapping[tuple[str, float], Sequence[float]]


def patched(table: pd.DataFrame) -> pd.DataFrame:
    """The table's settings, the unpatched model's row left out, index reset."""
    return table[table["method"] != UNPATCHED].reset_index(drop=True)


def score(table: pd.DataFrame, primary: str, lower_is_better: bool = True) -> pd.Series:
    """s per row: the primary mean to ``DIGITS`` significant digits (means of the same values summed
    in another order compare equal), negated where higher is better (lower s is better)."""
    mean = table[f"{primary}_mean"].astype(float).map(lambda x: float(f"{x:.{DIGITS}g}"))
    return mean if lower_is_better else -mean


def flops_front(table: pd.DataFrame, primary: str, lower_is_better: bool = True) -> pd.Series:
    """Per row of ``patched(table)``: whether it is on its method's FLOPs front (module docstring).

    Returns:
        (rows,) bool, indexed as ``patched(table)``; a row of NaN mean is on no front.
    """
    rows = patched(table)
    s, f = score(rows, primary, lower_is_better), rows["flops_vs_unpatched"].astype(float)
    on = []
    for i in rows.index:
        rivals = (rows["method"] == rows.at[i, "method"]) & (rows.index != i)
        dominated = rivals & (f <= f[i]) & (s <= s[i]) & ((f < f[i]) | (s < s[i]))
        on.append(bool(not math.isnan(s[i]) and not dominated.any()))
    return pd.Series(on, index=rows.index, dtype=bool)


def throughput_front(table: pd.DataFrame, primary: str, seconds: Seconds, lower_is_better: bool = True
                     ) -> pd.Series:
    """Per row of ``patched(table)``: whether it is on its method's throughput front, or None where
    its speedup is not called (module docstring).

    Args:
        table: the compare table.
        primary: the primary measure's name.
        seconds: (method, ratio) -> its seconds per timed round.
        lower_is_better: the primary measure's direction.

    Returns:
        (rows,) of True, False or None, indexed as ``patched(table)``.
    """
    rows = patched(table)
    s = score(rows, primary, lower_is_better)
    ranked = rows["speedup_call"].isin(CALLED) & s.notna()
    key = lambda i: (rows.at[i, "method"], float(rows.at[i, "ratio"]))  # noqa: E731
    on: list[bool | None] = []
    for i in rows.index:
        if not ranked[i]:
            on.append(None)
            continue
        rivals = [j for j in rows.index[ranked & (rows["method"] == rows.at[i, "method"])] if j != i]
        on.append(not any(s[j] <= s[i] and faster_in_every_round(seconds[key(j)], seconds[key(i)]) for j in rivals))
    return pd.Series(on, index=rows.index, dtype=object)


def pareto(table: pd.DataFrame, primary: str, seconds: Seconds, lower_is_better: bool = True) -> pd.DataFrame:
    """Every setting with its cost, the primary measure and its place on both fronts.

    Returns:
        One row per setting: method, ratio, flops_vs_unpatched, speedup (its median, min, max and call),
        ``<primary>_mean``, ``_low``, ``_high``, flops_front (bool) and throughput_front (bool, or
        None where not ranked).
    """
    rows = patched(table)
    cols = ["method", "ratio", "flops_vs_unpatched", "speedup", "speedup_min", "speedup_max", "speedup_call",
            *(f"{primary}_{part}" for part in ("mean", "low", "high"))]
    out = rows[cols].copy()
    out["flops_front"] = flops_front(table, primary, lower_is_better)
    out["throughput_front"] = throughput_front(table, primary, seconds, lower_is_better)
    return out


def choices(table: pd.DataFrame, primary: str, lower_is_better: bool = True,
            budgets: Sequence[float] = BUDGETS) -> pd.DataFrame:
    """Each method's choice at each budget (module docstring) and its rank among the methods.

    Returns:
        One row per budget and method (methods in the table's order): budget, method, and the
        choice's ratio, flops_vs_unpatched, ``<primary>_mean``, ``_low``, ``_high`` and rank (1 the
        best, equal s equal rank), all NaN where no setting is within the budget.
    """
    rows = patched(table).assign(_s=lambda d: score(d, primary, lower_is_better)).dropna(subset=["_s"])
    cols = ["ratio", "flops_vs_unpatched", *(f"{primary}_{part}" for part in ("mean", "low", "high"))]
    out = []
    for budget in budgets:
        within = rows[rows["flops_vs_unpatched"] <= budget].sort_values(["_s", "flops_vs_unpatched", "ratio"])
        for method in dict.fromkeys(patched(table)["method"]):
            mine = within[within["method"] == method]
            best = mine.iloc[0] if len(mine) else None
            out.append({"budget": budget, "method": method, "_s": math.nan if best is None else best["_s"],
                        **{c: math.nan if best is None else best[c] for c in cols}})
    df = pd.DataFrame(out, columns=["budget", "method", "_s", *cols])
    df["rank"] = df.groupby("budget")["_s"].rank(method="min")
    return df.drop(columns="_s")


def per_image(values: pd.DataFrame, method: str, ratio: float, measure: str) -> pd.Series:
    """One setting's per-image values of ``measure``, indexed by image."""
    v = values[(values["method"] == method) & (values["ratio"] == ratio) & (values["measure"] == measure)]
    return v.set_index("image")["value"].astype(float)


def verdicts(chosen: pd.DataFrame, values: pd.DataFrame, primary: str, alpha: float = ALPHA) -> pd.DataFrame:
    """Per budget, which method's choice wins and whether its lead is significant (module docstring).

    Args:
        chosen: ``choices``' output.
        values: the per-image values.
        primary: the primary measure's name.
        alpha: the significance level.

    Returns:
        One row per budget: budget, winner and runner_up (their methods; "" where there is none),
        lead (|runner-up's mean − winner's|, in the measure's units; NaN without two choices), p
        (the paired Wilcoxon p, NaN without two choices or when every image ties) and call: "none"
        (no method within the budget), "only" (one), "tie" (equal means), "significant" or
        "not significant".
    """
    out = []
    for budget, group in chosen.groupby("budget", sort=False):
        met = group.dropna(subset=["rank"]).sort_values(["rank", "flops_vs_unpatched", "ratio"], kind="stable")
        row = {"budget": budget, "winner": "", "runner_up": "", "lead": math.nan, "p": math.nan,
               "call": {0: "none", 1: "only"}.get(len(met), "")}
        if len(met) == 1:
            row["winner"] = met.iloc[0]["method"]
        if len(met) >= 2:
            w, r = met.iloc[0], met.iloc[1]
            a = per_image(values, w["method"], w["ratio"], primary)
            b = per_image(values, r["method"], r["ratio"], primary).reindex(a.index)
            tie = w["rank"] == r["rank"]
            row |= {"winner": "" if tie else w["method"], "runner_up": "" if tie else r["method"],
                    "lead": abs(r[f"{primary}_mean"] - w[f"{primary}_mean"]), "p": wilcoxon_p(a, b)}
            row["call"] = "tie" if tie else "significant" if row["p"] < alpha else "not significant"
        out.append(row)
    return pd.DataFrame(out, columns=["budget", "winner", "runner_up", "lead", "p", "call"])


def _g(x: float) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def _choice(row: pd.Series, primary: str) -> str:
    m = f"{primary}_"
    return (f"{row['method']} η {row['ratio']:g} ({_g(row['flops_vs_unpatched'])} of the FLOPs), {primary} "
            f"{_g(row[m + 'mean'])} [{_g(row[m + 'low'])}, {_g(row[m + 'high'])}]")


def _verdict(v: pd.Series, group: pd.DataFrame, alpha: float) -> str:
    if v["call"] == "none":
        return "no method has a setting within it"
    if v["call"] == "only":
        return f"{v['winner']} is the only method within it"
    tied = group[group["rank"] == 1]["method"].tolist()
    if v["call"] == "tie":
        return f"{' and '.join(tied)} tie on the mean (Wilcoxon p {_g(v['p'])})"
    return (f"{v['winner']} leads {v['runner_up']} by {_g(v['lead'])}, Wilcoxon p {_g(v['p'])}: "
            f"{v['call']} at {alpha:g}")


def lines(chosen: pd.DataFrame, verdict: pd.DataFrame, primary: str, alpha: float = ALPHA) -> list[str]:
    """One line per budget: each method's choice (the best first), the methods with none, and the
    verdict, e.g. "at ≤ 0.7 of the FLOPs: importance η 0.5 (0.66 of the FLOPs), kl 0.0023 [0.0019,
    0.0028]; random: no setting within it — importance is the only method within it"."""
    out = []
    for (budget, group), (_, v) in zip(chosen.groupby("budget", sort=False), verdict.iterrows()):
        met = group.dropna(subset=["rank"]).sort_values(["rank", "flops_vs_unpatched", "ratio"], kind="stable")
        parts = [_choice(r, primary) for _, r in met.iterrows()]
        missing = group[group["rank"].isna()]["method"].tolist()
        parts += [f"{', '.join(missing)}: no setting within it"] if missing and len(met) else []
        out.append(f"at ≤ {budget:g} of the FLOPs: {'; '.join(parts) + ' — ' if parts else ''}"
                   f"{_verdict(v, group, alpha)}")
    return out


def front_lines(front: pd.DataFrame) -> list[str]:
    """Per method, the ratios on its FLOPs front and on its throughput front, or why throughput
    could not rank its settings (none called) and which it left out."""
    out = []
    for method, rows in front.groupby("method", sort=False):
        etas = lambda mask: ", ".join(f"{r:g}" for r in rows["ratio"][mask]) or "none"  # noqa: E731
        ranked = rows["throughput_front"].notna()
        text = f"{method}: FLOPs front η {etas(rows['flops_front'].astype(bool))}; "
        if not ranked.any():
            text += "throughput could not rank its settings (no speedup called)"
        else:
            text += f"throughput front η {etas(rows['throughput_front'].eq(True))}"
            text += f" (η {etas(~ranked)} not ranked: no speedup called)" if (~ranked).any() else ""
        out.append(text)
    return out


def records(df: pd.DataFrame) -> list[dict]:
    """``df``'s rows JSON-ready: NaN and None as null, numpy scalars as Python ones."""
    return json.loads(df.to_json(orient="records", force_ascii=False))


@dataclass(frozen=True)
class IsoFlop:
    """The iso-FLOP view of one comparison.

    Attributes:
        budgets: the budgets, fractions of the unpatched model's FLOPs per image.
        primary: the primary measure's name.
        front: ``pareto``'s table.
        chosen: ``choices``' table.
        verdicts: ``verdicts``' table.
    """

    budgets: tuple[float, ...]
    primary: str
    front: pd.DataFrame
    chosen: pd.DataFrame
    verdicts: pd.DataFrame

    def front_lines(self) -> list[str]:
        """Per method, its fronts in words (``front_lines``)."""
        return front_lines(self.front)

    def budget_lines(self) -> list[str]:
        """Per budget, the choices and the verdict in words (``lines``)."""
        return lines(self.chosen, self.verdicts, self.primary)

    def as_json(self) -> dict:
        """The fronts and the budgets (each method's choice, the verdicts), rows and lines, JSON-ready."""
        return {"pareto": {"rows": records(self.front), "lines": self.front_lines()},
                "budgets": {"grid": list(self.budgets), "choices": records(self.chosen),
                            "verdicts": records(self.verdicts), "lines": self.budget_lines()}}


def iso_flop(table: pd.DataFrame, values: pd.DataFrame, seconds: Seconds, primary: str, lower_is_better: bool = True,
             budgets: Sequence[float] = BUDGETS) -> IsoFlop:
    """The fronts, choices and verdicts of one compare table (module docstring).

    Args:
        table: the compare table.
        values: its per-image values.
        seconds: (method, ratio) -> the setting's seconds per timed round.
        primary: the primary measure's name.
        lower_is_better: its direction.
        budgets: fractions of the unpatched model's FLOPs.

    Returns:
        The IsoFlop.
    """
    chosen = choices(table, primary, lower_is_better, budgets)
    return IsoFlop(tuple(budgets), primary, pareto(table, primary, seconds, lower_is_better), chosen,
                   verdicts(chosen, values, primary))
