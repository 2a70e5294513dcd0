"""Why a claim does not hold here: for each claim whose verdict is not "holds", the measurement
that decides whether this run could show the effect, computed from the run's own tables.

Every failing item of a claim gets one of three kinds, by a rule fixed per claim below:

- ``UNTESTABLE`` "not testable here": a measurement of the run's inputs says the effect cannot
  show in it (the two targets rank tokens alike; position alone ranks them; the spectrum has no
  gap for power iteration to use; too few images for the signed-rank test to reach p < ``ALPHA``,
  whose smallest two-sided p at n pairs is 2·2⁻ⁿ);
- ``TOO_SMALL`` "the effect is smaller than the test can see": the difference lies inside the
  intervals, or the paired test did not see it, beside the smallest difference it detects;
- ``CONTRARY`` "tested and contrary": the run measured the opposite, beyond its uncertainty.

The claim's kind is the commonest among its failing items (ties: contrary, then too small,
then untestable), and its phrase the first such item's measurement. The thresholds are constants
of this module, fixed before any run is read:

- ``AGREE``: per-image ρ between the spectral and the block-norm target from which no head can
  rank one target's tokens better than the other's;
- ``POSITION``: share of a target's rank variance explained by the token slot from which a head
  has nothing beyond position to learn (``metric.target_agreement``);
- ``CUT``: the factor q = 2 must cut the q = 0 error by (the claim's own rule). Subspace iteration
  with a block of l = r + p vectors shrinks the tangent of the largest principal angle to the
  top-r subspace by g² per iteration, g = σ_{l+1}/σ_r (Halko, Martinsson & Tropp 2011, §10.4;
  Gu 2015), so the error 1 − alignment ≈ tan²θ by g⁸ from q = 0 to q = 2: where g⁸ > CUT the
  spectrum cannot show it (g from the power table's ``gap``, an upper estimate σ_l/σ_r);
- the detectable difference of a paired test by image: (z_{1−α/2} + z_{power})·sd/√n with sd the
  standard deviation of the per-image differences, α = ``ALPHA`` and power ``POWER`` (the paired
  t-test's; Wilcoxon's asymptotic efficiency against it is 3/π ≈ 0.95 for normal differences).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import pandas as pd

from taskgeom.evaluate import pruning_claims as pc
from taskgeom.evaluate.claim import ALPHA, PAPER_PROBE, Tables, interval, rows_of

UNTESTABLE, TOO_SMALL, CONTRARY = ("not testable here", "the effect is smaller than the test can see",
                                   "tested and contrary")
PRECEDENCE = (CONTRARY, TOO_SMALL, UNTESTABLE)
AGREE = 0.9
POSITION = 0.9
CUT = 0.5
POWER = 0.8
Z_ALPHA = NormalDist().inv_cdf(1 - ALPHA / 2)  # the two-sided test's and a 95% interval's quantile
DETECT_Z = Z_ALPHA + NormalDist().inv_cdf(POWER)


@dataclass(frozen=True)
class Context:
    """What the reason rules read beside the tables.

    Attributes:
        multiview: model name -> whether it is a multi-view host.
        r: the diagnostic's rank budget (``diagnose.estimator.r``).
        regimes: the regime rule's thresholds (``diagnose.regimes``).
    """
    multiview: Callable[[str], bool]
    r: int
    regimes: dict


@dataclass(frozen=True)
class Reason:
    """Why a claim does not hold: its kind, one short phrase, a sentence per failing item, and
    notes on the items around them (e.g. the trend over η)."""
    kind: str
    short: str
    items: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def cell(self) -> str:
        """The findings table's "why": kind and phrase."""
        return f"{self.kind} ({self.short})"


Item = tuple[str, str, str]  # (kind, sentence, its measurement in a short phrase)
WORD = {CONTRARY: "contrary", TOO_SMALL: "too small to see", UNTESTABLE: "not testable"}


def combine(items: list[Item]) -> Reason:
    """A claim's reason from its failing items.

    Args:
        items: (kind, sentence, short phrase) per failing item.

    Returns:
        The reason: the commonest kind (ties by ``PRECEDENCE``); as its phrase, the first item of
        that kind's, after the count of each kind where the items differ in kind, or followed by
        how many more items there are.
    """
    counts = Counter(kind for kind, *_ in items)
    if not counts:
        return Reason(UNTESTABLE, "no failing item to explain", ())
    kind = max(PRECEDENCE, key=lambda k: (counts[k], -PRECEDENCE.index(k)))
    first = next(phrase for k, _, phrase in items if k == kind)
    if len(counts) > 1:
        phrase = ", ".join(f"{counts[k]} {WORD[k]}" for k in PRECEDENCE if counts[k]) + f"; {first}"
    else:
        phrase = first + (f"; {len(items) - 1} more alike" if len(items) > 1 else "")
    return Reason(kind, phrase, tuple(f"{text}: {k}" for k, text, _ in items))


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


# ----------------------------------------------------------------------------- the diagnostic


def regime_axes(ours, theirs, r: int, thresholds: dict) -> list[tuple[str, float, float, tuple[float, float]]]:
    """The axes on which our probe sits on the other side of the regime rule's threshold than the
    paper's counterpart: (axis, our value, threshold, our interval).

    Args:
        ours: our Table 1 row (kappa_cap, cv, erank, each with its ``_ci``).
        theirs: the paper's Table 1 row of the counterpart.
        r: the rank budget.
        thresholds: kappa_high, cv_high, erank_rich (``diagnostics.regime``).

    Returns:
        The axes that differ, in the rule's order.
    """
    rule = (("κ_cap", "kappa_cap", thresholds["kappa_high"]), ("CV", "cv", thresholds["cv_high"]),
            ("erank", "erank", thresholds["erank_rich"] * r))
    side = lambda row, col, limit: getattr(row, col) >= limit
    return [(name, getattr(ours, col), limit, interval(getattr(ours, f"{col}_ci", None)))
            for name, col, limit in rule
            if pd.notna(getattr(theirs, col, None)) and side(ours, col, limit) != side(theirs, col, limit)]


def regimes(t: Tables, ctx: Context) -> Reason:
    """Per probe outside its counterpart's regime, the axes that put it there and by how much;
    contrary unless every such axis's interval contains its threshold (then too small)."""
    table = t["diagnose_table1"]
    theirs = {row.decoder: row for row in rows_of(table, "paper").itertuples()}
    items = []
    for row in rows_of(table, "ours").itertuples():
        paper = theirs.get(PAPER_PROBE.get((ctx.multiview(row.model), row.decoder)))
        if row.metric != "euclidean" or paper is None or row.regime == paper.regime:
            continue
        axes = regime_axes(row, paper, ctx.r, ctx.regimes)
        within = bool(axes) and all(low <= limit <= high for _, _, limit, (low, high) in axes)
        said = "; ".join(f"{name} {value:.3g} {'≥' if value >= limit else '<'} {limit:.3g} (by {value - limit:+.3g})"
                         for name, value, limit, _ in axes) or "on the same side of every threshold"
        items.append((TOO_SMALL if within else CONTRARY,
                      f"{row.probe} is {row.regime}, the paper's {paper.decoder} {paper.regime}: {said}",
                      f"{row.probe} off on {', '.join(name for name, *_ in axes) or 'no axis'}"))
    return combine(items)


def power_iteration(t: Tables, ctx: Context) -> Reason:
    """Per probe whose q = 2 error is above half its q = 0 error: untestable where its spectral
    gap g predicts a cut g⁸ above ``CUT``, contrary otherwise."""
    table = rows_of(t["diagnose_power_iterations"], "ours")
    items = []
    for r in table.itertuples():
        if not r.error_q0 > 1e-6 or r.error_q2 <= r.error_q0 / 2:
            continue
        gap = getattr(r, "gap", math.nan)
        text = (f"{r.probe}: {r.error_q0:.3g} → {r.error_q2:.3g}, gap σ_(r+p)/σ_r {gap:.3g} allows a cut to "
                f"{gap ** 8:.2g} of it")
        items.append((UNTESTABLE if gap ** 8 > CUT else CONTRARY, text, f"{r.probe}: gap {gap:.3g}"))
    return combine(items)


# ----------------------------------------------------------------------------- learning the metric


def _targets(row) -> str:
    return (f"the targets' per-image ρ {row.targets_rho:.3g} {row.targets_rho_ci}, position explains "
            f"{row.position_share:.0%} of their rank variance")


def spectral_targets(t: Tables, _ctx: Context) -> Reason:
    """Per (spectral, block-norm) pair whose intervals are not ordered: untestable where the two
    targets agree (ρ ≥ ``AGREE``) or position explains ≥ ``POSITION``; else too small where the
    intervals overlap, contrary where the block-norm head's lies above."""
    heads = rows_of(t["metric_importance"], "ours")
    same = ["probe", "w_rank", "train_images", "width", "heads"]
    items = []
    for b in heads[heads["target"] == "block_norm"].itertuples():
        twins = heads[(heads["target"] == "spectral") & pd.concat([heads[k] == getattr(b, k) for k in same],
                                                                  axis=1).all(axis=1)]
        for s in twins.itertuples():
            if interval(s.rho_ci)[0] > interval(b.rho_ci)[1]:
                continue
            kind = (UNTESTABLE if b.targets_rho >= AGREE or b.position_share >= POSITION
                    else TOO_SMALL if _overlap(interval(s.rho_ci), interval(b.rho_ci)) else CONTRARY)
            items.append((kind, f"{s.head} ρ {s.rho:.3g} {s.rho_ci} vs {b.head} {b.rho:.3g} {b.rho_ci}; {_targets(b)}",
                          f"targets' ρ {b.targets_rho:.2f}, position {b.position_share:.0%}"))
    return combine(items)


def head_learns(t: Tables, _ctx: Context) -> Reason:
    """Per spectral head not above position alone: untestable where position explains ≥
    ``POSITION`` of the target's rank variance; too small where its interval contains the
    position-only ρ; contrary where it lies below."""
    heads = rows_of(t["metric_importance"], "ours")
    items = []
    for h in heads[heads["target"] == "spectral"].itertuples():
        low, high = interval(h.rho_ci)
        if low > h.rho_position_only:
            continue
        kind = UNTESTABLE if h.position_share >= POSITION else TOO_SMALL if high >= h.rho_position_only else CONTRARY
        items.append((kind, f"{h.head} ρ {h.rho:.3g} {h.rho_ci} vs position-only {h.rho_position_only:.3g}; "
                            f"position explains {h.position_share:.0%} of the target's rank variance",
                      f"{h.head}: position explains {h.position_share:.0%}"))
    return combine(items)


def randnla_supervision(t: Tables, _ctx: Context) -> Reason:
    """Per probe whose q = 1 SPN reaches less than 0.9 of exact supervision: contrary."""
    table = rows_of(t["metric_table13"], "ours")
    return combine([(CONTRARY, f"{r.probe}: q1 at {r.share_of_exact:.3g} of exact",
                     f"{r.probe}: q1 at {r.share_of_exact:.2f} of exact") for r in table.itertuples()
                    if r.supervision == "q1" and pd.notna(r.share_of_exact) and r.share_of_exact < 0.9])


def vae_cut(t: Tables, _ctx: Context) -> Reason:
    """Per VAE whose latent erank interval is not below the original's: too small where they
    overlap, contrary where it lies above."""
    rows = t["metric_vae"]
    items = []
    for r in rows[rows["quantity"] == "erank"].itertuples():
        latent, original = interval(r.latent_ci), interval(r.original_ci)
        if latent[1] < original[0]:
            continue
        items.append((TOO_SMALL if _overlap(latent, original) else CONTRARY,
                      f"{r.vae}: erank {r.original:.3g} {r.original_ci} → {r.latent:.3g} {r.latent_ci}",
                      f"{r.vae}: erank {r.original:.3g} → {r.latent:.3g}"))
    return combine(items)


# ----------------------------------------------------------------------------- using the metric


def paired(diff: float, sd: float, n: int, p: float) -> tuple[str, str, str]:
    """The kind of a failing paired comparison and its figures: not testable where n images
    cannot give the signed-rank test p < ALPHA at all (its smallest two-sided p is 2·2⁻ⁿ);
    contrary where the test saw the other direction (p < ALPHA, diff > 0); else too small. The
    figures: the difference with its normal 95% interval and the smallest difference the test
    detects.

    Args:
        diff: the mean paired difference (the claim's method minus the other; below 0 favours it).
        sd: the standard deviation of the per-image differences.
        n: the images.
        p: the paired test's p.

    Returns:
        (kind, "Δ d [lo, hi], detectable |Δ| ≥ m at n images, p p", a short phrase).
    """
    se = sd / math.sqrt(n) if n > 0 else math.nan
    half = Z_ALPHA * se
    floor = 2.0 ** (1 - n)
    if floor >= ALPHA:
        return (UNTESTABLE, f"Δ {diff:+.3g}, p {p:.2g}: at {n} images the paired test's smallest p is {floor:.2g}",
                f"{n} images: p ≥ {floor:.2g}")
    kind = CONTRARY if p < ALPHA and diff > 0 else TOO_SMALL
    return kind, (f"Δ {diff:+.3g} [{diff - half:+.3g}, {diff + half:+.3g}], detectable |Δ| ≥ {DETECT_Z * se:.3g} "
                  f"at {n} images, p {p:.2g}"), (f"Δ {diff:+.2g}, p {p:.2g}" if kind == CONTRARY else
                                                f"Δ {diff:+.2g} vs detectable {DETECT_Z * se:.2g}")


def _pruning(select: Callable[[Tables], pd.DataFrame], label: Callable) -> Callable[[Tables, Context], Reason]:
    """The reason rule of an importance-against-ToMe's-score claim: ``paired`` per failing row."""
    def reason(t: Tables, _ctx: Context) -> Reason:
        items = []
        for r in select(t).itertuples():
            if r.importance_minus_method < 0 and r.p_vs_importance < ALPHA:
                continue
            kind, figures, phrase = paired(r.importance_minus_method, r.sd_diff_vs_importance, int(r.images),
                                           r.p_vs_importance)
            items.append((kind, f"{label(r)}: importance − ToMe score {figures}", f"{label(r)}: {phrase}"))
        return combine(items)
    return reason


def trend(t: Tables) -> tuple[str, ...]:
    """Importance − ToMe's score at every η > 0 of every schedule with LLF (first domain, base
    resolution), each with its normal 95% interval: where the sign turns over η, the trend.

    Args:
        t: the run's tables (``prune_schedules``).

    Returns:
        One line per (model, schedule).
    """
    rows = pc.base_rows(t["prune_schedules"])
    rows = rows[(rows["method"] == pc.TOME) & (rows["ratio"] > 0)]
    return tuple(f"{model} {schedule}, importance − ToMe score by η: " + "; ".join(
        f"{r.ratio:g}: {r.importance_minus_method:+.3g} ± {Z_ALPHA * r.sd_diff_vs_importance / r.images ** 0.5:.2g} "
        f"(p {r.p_vs_importance:.2g})" for r in group.itertuples())
        for (model, schedule), group in rows.groupby(["model", "schedule"], sort=False))


cls_merging = _pruning(pc.cls_rows, lambda r: f"{r.model} η {r.ratio:g}")
_dense = _pruning(pc.dense_rows, lambda r: f"{r.model} η {r.ratio:g}")


def dense_pruning(t: Tables, ctx: Context) -> Reason:
    """``_pruning`` on the dense claim's rows, with the ``trend`` of every schedule as notes."""
    reason = _dense(t, ctx)
    return Reason(reason.kind, reason.short, reason.items, trend(t))


resolution_transfer = _pruning(pc.resolution_rows, lambda r: f"{r.model} {r.resolution}px {r.schedule} η {r.ratio:g}")


def soft_merging(t: Tables, _ctx: Context) -> Reason:
    """Per (model, schedule, η) where ToMe's merging is not ahead of every hard reduction:
    ``paired`` on merging − the best of the hard methods it is not ahead of."""
    items = []
    for (model, schedule, ratio), rows in pc.hard_rows(t).groupby(["model", "schedule", "ratio"], sort=False):
        behind = rows[~((rows["merging_mean"] < rows["mean"]) & (rows["p_vs_tome"] < ALPHA))]
        if behind.empty:
            continue
        best = behind.loc[behind["mean"].idxmin()]
        kind, figures, phrase = paired(best["merging_mean"] - best["mean"], best["sd_diff_vs_tome"],
                                       int(best["images"]), best["p_vs_tome"])
        items.append((kind, f"{model} {schedule} η {ratio:g}: merging − {best['method']} {figures}",
                      f"{schedule} η {ratio:g}, vs {best['method']}: {phrase}"))
    return combine(items)


def _drop(r, name: str) -> str:
    first = getattr(r, "rho_first_domain", math.nan)
    return f"{name} {first:.3g} → {r.rho_mean:.3g}" if pd.notna(first) else f"{name} {r.rho_mean:.3g}"


def drm_against(name: str, baselines: tuple[str, ...]) -> Callable[[Tables, Context], Reason]:
    """The reason rule of a DRM claim: per failing (model, domain, baseline), too small where the
    intervals overlap, contrary where the baseline's lies above; with each ρ's change from the
    first domain and how far the domain's decoder distances lie from the first's, where the table
    has them."""
    def reason(t: Tables, _ctx: Context) -> Reason:
        table = t[name]
        items = []
        for (model, domain), rows in table[table["model"] != "paper"].groupby(["model", "domain"], sort=False):
            for d in rows[rows["method"] == "drm"].itertuples():
                for o in rows[rows["method"].isin(baselines)].itertuples():
                    if d.rho_low > o.rho_high:
                        continue
                    shift = (f"; decoder distances from the first domain's: KS {d.distance_shift:.2f}, median "
                             f"×{d.distance_ratio:.2f}" if pd.notna(getattr(d, "distance_shift", math.nan)) else "")
                    items.append((TOO_SMALL if _overlap((d.rho_low, d.rho_high), (o.rho_low, o.rho_high))
                                  else CONTRARY, f"{model} {domain}: ρ {_drop(d, 'drm')}, {_drop(o, o.method)}{shift}",
                                  f"{domain}: ρ {_drop(d, 'drm')}, {_drop(o, o.method)}"))
        return combine(items)
    return reason
