"""The paper's claims that the pipeline tests, each judged from the run's own tables by a stated rule.

A ``Claim`` names the tables it reads (name -> DataFrame, with the paper's rows where a table
carries them), its rule, and a judge that returns the paper's figure and our checks: one per
item the claim applies to (a probe, a model, a ratio η), each a success or not. The verdict is

- ``holds``: every check succeeds;
- ``does not hold``: none does;
- ``mixed``: some do;
- ``not tested``: the run made none of the tables' rows the claim applies to.

A difference counts only where the tables show it: disjoint intervals (the tables' bootstrap
95% intervals) for correlations and effective ranks, the tables' own paired test by image
(p < ``ALPHA``) for pruning. The rules are fixed in ``CLAIMS``, not tuned to any result.
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
COLUMNS = ("claim", "where", "paper", "ours", "checks", "verdict", "rule")

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
    """
    claim: str
    where: str                                            # the paper's table or section
    tables: tuple[str, ...]                               # the tables it reads
    rule: str
    judge: Callable[[Tables, Callable[[str], bool]], Judged]


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


# ----------------------------------------------------------------------------- the diagnostic


def regimes(t: Tables, multiview: Callable[[str], bool]) -> Judged:
    """The regime of each of our probes against the paper's Table 1 counterpart.

    Args:
        t: the run's tables by name.
        multiview: tells a multi-view host from a single-image one, by model name.

    Returns:
        The paper's figure and the checks: per Euclidean-output probe with a counterpart, whether
        its regime is the counterpart's.
    """
    table = t["diagnose_table1"]
    theirs = {row.decoder: row.regime for row in rows_of(table, "paper").itertuples()}
    checks = []
    for row in rows_of(table, "ours").itertuples():
        counterpart = PAPER_PROBE.get((multiview(row.model), row.decoder))
        if row.metric == "euclidean" and counterpart in theirs:
            checks.append((f"{row.probe}: {row.regime} (κ_cap {row.kappa_cap:.3g}, CV {row.cv:.3g}, erank "
                           f"{row.erank:.3g}) vs the paper's {counterpart}: {theirs[counterpart]}",
                           row.regime == theirs[counterpart]))
    return "; ".join(f"{k}: {v}" for k, v in theirs.items()), checks


def power_iteration(t: Tables, _) -> Judged:
    """q = 2 against q = 0 subspace error, per probe (App. C.3).

    Args:
        t: the run's tables by name.

    Returns:
        The paper's figure and the checks: per probe whose q = 0 error exceeds 1e-6: whether q = 2 at most halves it.
    """
    table = t["diagnose_power_iterations"]
    checks = [(f"{r.probe}: {r.error_q0:.3g} → {r.error_q2:.3g}", r.error_q2 <= r.error_q0 / 2)
              for r in rows_of(table, "ours").itertuples() if r.error_q0 > 1e-6]
    theirs = "; ".join(f"{r.probe}: {r.error_q0:g} → {r.error_q2:g}" for r in rows_of(table, "paper").itertuples())
    return theirs, checks


# ----------------------------------------------------------------------------- learning the metric


def _head(row) -> str:
    low, high = interval(row.rho_ci)
    return f"{row.head} ρ {row.rho:.3g} [{low:.3g}, {high:.3g}]"


def spectral_targets(t: Tables, _) -> Judged:
    """Spectral against block-norm importance heads of the same probe and settings.

    Args:
        t: the run's tables by name.

    Returns:
        The paper's figure and the checks: per (spectral, block-norm) pair, whether the spectral ρ
        interval lies above the other's.
    """
    heads = rows_of(t["metric_importance"], "ours")
    same = ["probe", "w_rank", "train_images", "width", "heads"]
    checks = []
    for block in heads[heads["target"] == "block_norm"].itertuples():
        twins = heads[(heads["target"] == "spectral")
                      & np.logical_and.reduce([heads[k] == getattr(block, k) for k in same])]
        checks += [(f"{_head(s)} vs {_head(block)}", interval(s.rho_ci)[0] > interval(block.rho_ci)[1])
                   for s in twins.itertuples()]
    theirs = "; ".join(f"{r.head} ({r.target}): ρ {r.paper_rho:g}" for r in heads.itertuples()
                       if pd.notna(r.paper_rho) and r.probe in set(heads.loc[heads["target"] == "block_norm", "probe"]))
    return theirs, checks


def head_learns(t: Tables, _) -> Judged:
    """Each spectral importance head against the position-only baseline.

    Args:
        t: the run's tables by name.

    Returns:
        The paper's figure and the checks: per spectral head: whether its ρ interval lies above the position-only ρ.
    """
    heads = rows_of(t["metric_importance"], "ours")
    heads = heads[heads["target"] == "spectral"]
    checks = [(f"{_head(r)} vs position-only {r.rho_position_only:.3g}",
               interval(r.rho_ci)[0] > r.rho_position_only) for r in heads.itertuples()]
    return "; ".join(f"{r.head}: ρ {r.paper_rho:g}" for r in heads.itertuples() if pd.notna(r.paper_rho)), checks


def randnla_supervision(t: Tables, _) -> Judged:
    """SPNs trained on q = 1 targets against exact supervision (Table 13).

    Args:
        t: the run's tables by name.

    Returns:
        The paper's figure and the checks: per probe with exact supervision: whether q = 1 reaches 0.9 of exact.
    """
    table = t["metric_table13"]
    # a probe without an exact-supervision run (too large for the dense reference) has no share
    q1 = lambda who: [r for r in rows_of(table, who).itertuples()
                      if r.supervision == "q1" and pd.notna(r.share_of_exact)]
    checks = [(f"{r.probe}: q1 at {r.share_of_exact:.3g} of exact", r.share_of_exact >= 0.9) for r in q1("ours")]
    return "; ".join(f"{r.probe}: q1 at {r.share_of_exact:.3g} of exact" for r in q1("paper")), checks


def vae_cut(t: Tables, _) -> Judged:
    """The latent probe's effective rank against the original probe's, per VAE.

    Args:
        t: the run's tables by name.

    Returns:
        The paper's figure and the checks: per VAE: whether the latent erank interval lies below the original's.
    """
    rows = t["metric_vae"]
    rows = rows[rows["quantity"] == "erank"]
    checks = [(f"{r.vae}: erank {r.original:.3g} {r.original_ci} → {r.latent:.3g} {r.latent_ci}",
               interval(r.latent_ci)[1] < interval(r.original_ci)[0]) for r in rows.itertuples()]
    theirs = "; ".join(f"erank {r.paper_original} → {r.paper_latent}" for r in rows.itertuples()
                       if pd.notna(r.paper_original))
    return theirs, checks


# ----------------------------------------------------------------------------- using the metric


def _beats(rows: pd.DataFrame, label: Callable) -> Checks:
    """Importance against a baseline's rows (with importance_minus_method and p_vs_importance): a
    success where importance's error is the lower one and the paired test gives p < ALPHA."""
    return [(f"{label(r)}: {r.importance_mean:.3g} vs {r.mean:.3g} (p {r.p_vs_importance:.2g})",
             bool(r.importance_minus_method < 0 and r.p_vs_importance < ALPHA)) for r in rows.itertuples()]


def cls_merging(t: Tables, _) -> Judged:
    """Importance against ToMe's score on CLS decoders, per model and η > 0 (Table 2).

    Args:
        t: the run's tables by name.

    Returns:
        The paper's figure and the checks: ``_beats`` per model and η.
    """
    table = t["prune_table2"]
    mine, theirs = rows_of(table, "ours"), rows_of(table, "paper")
    mine = mine[(mine["part"] == "cls") & (mine["method"] == TOME) & (mine["ratio"] > 0)]
    theirs = theirs[(theirs["part"] == "cls") & theirs["method"].isin([TOME, "importance"])]
    return ("; ".join(f"{r.model} {r.method} η {r.ratio:g}: {r.mean:g}" for r in theirs.itertuples()),
            _beats(mine, lambda r: f"{r.model} η {r.ratio:g}"))


def dense_pruning(t: Tables, _) -> Judged:
    """Importance against ToMe's score, 2-stage with LLF, η ≥ 0.2, on dense depth.

    Args:
        t: the run's tables by name.

    Returns:
        The paper's figure and the checks: ``_beats`` per model and η, at the first domain and the base resolution.
    """
    table = t["prune_schedules"]
    rows = table[(table["schedule"] == "2-stage") & (table["llf"].astype(str) == "True") & (table["method"] == TOME)
                 & (table["ratio"] >= 0.2) & (table["metric"] == "add_silog")]
    rows = rows[(rows["resolution"] == table["resolution"].min()) & (rows["domain"] == table["domain"].iloc[0])]
    return "geometric ahead of ToMe only at η ≥ 0.20", _beats(rows, lambda r: f"{r.model} η {r.ratio:g}")


def resolution_transfer(t: Tables, _) -> Judged:
    """Importance against ToMe's score above the base resolution (Tables 4–5).

    Args:
        t: the run's tables by name.

    Returns:
        The paper's figure and the checks: ``_beats`` per model, resolution, schedule with LLF, and η > 0.
    """
    table = t["prune_resolutions"]
    rows = table[(table["method"] == TOME) & (table["ratio"] > 0) & (table["llf"].astype(str) == "True")
                 & (table["resolution"] > table["resolution"].min())]
    return ("the paper's Tables 4–5 rank geometric pruning against ToMe at 336 and 448 px",
            _beats(rows, lambda r: f"{r.model} {r.resolution}px {r.schedule} η {r.ratio:g}"))


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


PRUNING = "paired by image, p < 0.05"
CLAIMS: tuple[Claim, ...] = (
    Claim("Each probe class falls in the paper's regime", "Table 1", ("diagnose_table1",),
          "per probe with a counterpart (same decoder, single- or multi-view host), Euclidean output: the same "
          "regime", regimes),
    Claim("Power iteration at q = 2 cuts the subspace error of q = 0", "App. C.3", ("diagnose_power_iterations",),
          "per probe whose q = 0 error exceeds 1e-6: the q = 2 error is at most half of it", power_iteration),
    Claim("Spectral targets teach the importance head better than block norms", "§5.5, App. F",
          ("metric_importance",), "per block-norm head: the spectral head of the same probe and settings has a ρ "
          "interval above its interval", spectral_targets),
    Claim("The importance head ranks tokens beyond their position", "§5.4", ("metric_importance",),
          "per spectral head: its ρ interval lies above the position-only baseline's ρ", head_learns),
    Claim("RandNLA supervision at q = 1 is as good as exact", "Table 13", ("metric_table13",),
          "per probe with an exact-target SPN: the SPN on q = 1 targets reaches at least 0.9 of its v1",
          randnla_supervision),
    Claim("The VAE bottleneck cuts a dense probe's effective rank", "§6", ("metric_vae",),
          "per VAE: the latent probe's erank interval lies below the original probe's", vae_cut),
    Claim("Geometric merging beats ToMe on CLS decoders at every η", "Table 2 (CLS)", ("prune_table2",),
          f"per CLS model and η > 0: importance's degradation below ToMe's, {PRUNING}", cls_merging),
    Claim("2-stage pruning with LLF beats ToMe on dense depth from η = 0.2", "Table 2 (dense), App. E.1",
          ("prune_schedules",), "per dense model and η ≥ 0.2 (2-stage + LLF, first domain, base resolution): "
          f"importance's added SILog below ToMe's, {PRUNING}", dense_pruning),
    Claim("Importance's lead over ToMe carries to higher resolutions", "Tables 4–5", ("prune_resolutions",),
          "per dense model, resolution above the base, schedule with LLF and η > 0: importance's added SILog "
          f"below ToMe's, {PRUNING}", resolution_transfer),
    Claim("The DRM predicts decoder distance better than L2 and cosine", "Table 14", ("retrieval_table14",),
          "per model, domain and baseline (L2, cosine): the DRM's ρ interval lies above the baseline's",
          drm_against("retrieval_table14", ("l2", "cosine"))),
    Claim("The DRM keeps its lead over cosine across domains", "Table 15", ("retrieval_table15",),
          "per model, domain and baseline (cosine): the DRM's ρ interval lies above the baseline's",
          drm_against("retrieval_table15", ("cosine",))),
)


def findings(tables: Tables, multiview: Callable[[str], bool]) -> pd.DataFrame:
    """One row per claim (``COLUMNS``), judged from ``tables``; a claim whose tables hold no rows
    is not tested. ``multiview(model)`` tells a multi-view host from a single-image one.

    Args:
        tables: table name -> DataFrame, every table a claim reads.
        multiview: model name -> whether it is a multi-view host.

    Returns:
        The findings, columns ``COLUMNS``.
    """
    rows = []
    for c in CLAIMS:
        theirs, checks = ("", []) if any(tables[n].empty for n in c.tables) else c.judge(tables, multiview)
        rows.append({"claim": c.claim, "where": c.where, "paper": theirs or "—",
                     "ours": "; ".join(text for text, _ in checks) or "—",
                     "checks": f"{sum(ok for _, ok in checks)} of {len(checks)}",
                     "verdict": verdict([ok for _, ok in checks]), "rule": c.rule})
    return pd.DataFrame(rows, columns=list(COLUMNS))
