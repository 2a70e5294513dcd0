"""The paper's claims that the pipeline tests, each judged from the run's own tables by a stated
rule (``evaluate.claim``), with the reason rule that says why one does not hold
(``evaluate.reasons``).

A difference counts only where the tables show it: disjoint intervals (the tables' bootstrap
95% intervals) for correlations and effective ranks, the tables' own paired test by image
(p < ``ALPHA``) for pruning. The rules and the reasons' thresholds are fixed in ``CLAIMS`` and
``evaluate.reasons``, not tuned to any result.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from taskgeom.evaluate import headlines, reasons
from taskgeom.evaluate import pruning_claims as pc
from taskgeom.evaluate.claim import (
    ALPHA,
    FAILS,
    HOLDS,
    MERGING,
    MIXED,
    PAPER_PROBE,
    TOME,
    UNTESTED,
    Checks,
    Claim,
    Judged,
    Tables,
    interval,
    rows_of,
    verdict,
)

__all__ = ["ALPHA", "CLAIMS", "COLUMNS", "FAILS", "HOLDS", "MERGING", "MIXED", "TOME", "UNTESTED", "Checks", "Claim",
           "findings", "judge_all", "verdict"]
COLUMNS = ("claim", "where", "paper", "ours", "checks", "verdict", "why", "rule", "paper_headline", "ours_headline")


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


PRUNING = "paired by image, p < 0.05"
CLAIMS: tuple[Claim, ...] = (
    Claim("Each probe class falls in the paper's regime", "Table 1", ("diagnose_table1",),
          "per probe with a counterpart (same decoder, single- or multi-view host), Euclidean output: the same "
          "regime", regimes,
          "probes in the paper's regime", headlines.regimes, reasons.regimes),
    Claim("Power iteration at q = 2 cuts the subspace error of q = 0", "App. C.3", ("diagnose_power_iterations",),
          "per probe whose q = 0 error exceeds 1e-6: the q = 2 error is at most half of it", power_iteration,
          "probes: error at least halved", headlines.power_iteration, reasons.power_iteration),
    Claim("Spectral targets teach the importance head better than block norms", "§5.5, App. F",
          ("metric_importance",), "per block-norm head: the spectral head of the same probe and settings has a ρ "
          "interval above its interval", spectral_targets, "pairs: spectral interval above",
          headlines.spectral_targets, reasons.spectral_targets),
    Claim("The importance head ranks tokens beyond their position", "§5.4", ("metric_importance",),
          "per spectral head: its ρ interval lies above the position-only baseline's ρ", head_learns,
          "heads above position alone", headlines.head_learns, reasons.head_learns),
    Claim("RandNLA supervision at q = 1 is as good as exact", "Table 13", ("metric_table13",),
          "per probe with an exact-target SPN: the SPN on q = 1 targets reaches at least 0.9 of its v1",
          randnla_supervision, "probes at ≥ 0.9 of exact", headlines.randnla_supervision, reasons.randnla_supervision),
    Claim("The VAE bottleneck cuts a dense probe's effective rank", "§6", ("metric_vae",),
          "per VAE: the latent probe's erank interval lies below the original probe's", vae_cut,
          "VAEs: erank interval below", headlines.vae_cut, reasons.vae_cut),
    Claim("Geometric merging beats ToMe on CLS decoders at every η", "Table 2 (CLS)", ("prune_table2",),
          f"per CLS model and η > 0: importance's degradation below ToMe's score's, {PRUNING}", pc.cls_merging,
          "(model, η): importance lower, p < 0.05", headlines.cls_merging, reasons.cls_merging),
    Claim("2-stage pruning with LLF beats ToMe on dense depth from η = 0.2", "Table 2 (dense), App. E.1",
          ("prune_schedules",), "per dense model and η ≥ 0.2 (2-stage + LLF, first domain, base resolution): "
          f"importance's added SILog below ToMe's score's, {PRUNING}", pc.dense_pruning,
          "(model, η): importance lower, p < 0.05", None, reasons.dense_pruning),
    Claim("Importance's lead over ToMe carries to higher resolutions", "Tables 4–5", ("prune_resolutions",),
          "per dense model, resolution above the base, schedule with LLF and η > 0: importance's added SILog "
          f"below ToMe's score's, {PRUNING}", pc.resolution_transfer,
          "settings: importance lower, p < 0.05", lambda _: "Tables 4–5, at 336 and 448 px",
          reasons.resolution_transfer),
    Claim("ToMe's soft merging beats every hard reduction on dense depth (ours)",
          "Table 2 (dense), App. E.1", ("prune_schedules",),
          "per dense model, schedule with LLF and η > 0 (first domain, base resolution): ToMe's merging's added "
          f"SILog below each of importance, ToMe's score, EViT and random, {PRUNING}", pc.soft_merging,
          "(model, schedule, η): merging lowest, p < 0.05", None, reasons.soft_merging),
    Claim("The DRM predicts decoder distance better than L2 and cosine", "Table 14", ("retrieval_table14",),
          "per model, domain and baseline (L2, cosine): the DRM's ρ interval lies above the baseline's",
          pc.drm_against("retrieval_table14", ("l2", "cosine")), "comparisons: DRM interval above",
          lambda t: headlines.drm(t, "retrieval_table14"), reasons.drm_against("retrieval_table14", ("l2", "cosine"))),
    Claim("The DRM keeps its lead over cosine across domains", "Table 15", ("retrieval_table15",),
          "per model, domain and baseline (cosine): the DRM's ρ interval lies above the baseline's",
          pc.drm_against("retrieval_table15", ("cosine",)), "comparisons: DRM interval above",
          lambda t: headlines.drm(t, "retrieval_table15"), reasons.drm_against("retrieval_table15", ("cosine",))),
)


def judge_all(tables: Tables, multiview: Callable[[str], bool]) -> list[tuple[Claim, str, Checks]]:
    """Every claim judged from ``tables``: (claim, the paper's figure, our checks); a claim whose
    tables hold no rows has no checks. ``multiview(model)`` tells a multi-view host from a
    single-image one.

    Args:
        tables: table name -> DataFrame, every table a claim reads.
        multiview: model name -> whether it is a multi-view host.

    Returns:
        One triple per claim of ``CLAIMS``, in order.
    """
    return [(c, *(("", []) if any(tables[n].empty for n in c.tables) else c.judge(tables, multiview)))
            for c in CLAIMS]


def findings(tables: Tables, context: reasons.Context) -> pd.DataFrame:
    """One row per claim (``COLUMNS``), judged from ``tables`` (``judge_all``); a claim whose
    tables hold no rows is not tested. ``paper_headline`` and ``ours_headline`` say the paper's
    figure and our count of successes in one phrase each; ``why``, for a claim that is tested and
    does not hold, its reason rule's kind and phrase (``evaluate.reasons``).

    Args:
        tables: table name -> DataFrame, every table a claim reads.
        context: what the reason rules read beside the tables (its ``multiview`` serves the judges).

    Returns:
        The findings, columns ``COLUMNS``.
    """
    rows = []
    for c, theirs, checks in judge_all(tables, context.multiview):
        passed = sum(ok for _, ok in checks)
        short = c.headline(tables) if c.headline is not None and checks else theirs
        judged = verdict([ok for _, ok in checks])
        why = explain(c, tables, context, judged)
        rows.append({"claim": c.claim, "where": c.where, "paper": theirs or "—",
                     "ours": "; ".join(text for text, _ in checks) or "—",
                     "checks": f"{passed} of {len(checks)}", "verdict": judged,
                     "why": why.cell if why else "", "rule": c.rule,
                     "paper_headline": short or theirs or "—",
                     "ours_headline": f"{passed} of {len(checks)} {c.counted}" if checks else "—"})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def explain(claim: Claim, tables: Tables, context: reasons.Context, judged: str) -> reasons.Reason | None:
    """The claim's reason where it is tested and does not hold, None otherwise.

    Args:
        claim: the claim.
        tables: the run's tables.
        context: what the reason rules read beside the tables.
        judged: its verdict.

    Returns:
        Its reason rule's answer, or None.
    """
    if judged in (HOLDS, UNTESTED) or claim.reason is None:
        return None
    return claim.reason(tables, context)
