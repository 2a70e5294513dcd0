"""The reason rules: each kind follows from its measurement on small tables whose answer is known,
the detectable difference is the paired test's, and the targets' measurements are what they say."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from taskgeom.evaluate import reasons
from taskgeom.evaluate.claim import TOME
from taskgeom.evaluate.reasons import CONTRARY, TOO_SMALL, UNTESTABLE, Context
from taskgeom.metric.target_agreement import position_share, targets_agreement

CONTEXT = Context(lambda model: model == "mv", 20, {"kappa_high": 0.9, "cv_high": 1.0, "erank_rich": 5.0})


def heads(agree: float, share: float, block_ci: str) -> dict[str, pd.DataFrame]:
    row = dict(source="ours", probe="p", w_rank=0.5, train_images=8, width=16, heads=2, rho_position_only=0.3,
               targets_rho=agree, targets_rho_ci="[0.1, 0.9]", position_share=share)
    return {"metric_importance": pd.DataFrame([{**row, "head": "s", "target": "spectral", "rho": 0.5,
                                                "rho_ci": "[0.45, 0.55]"},
                                               {**row, "head": "b", "target": "block_norm", "rho": 0.5,
                                                "rho_ci": block_ci}])}


@pytest.mark.parametrize("agree, share, block_ci, kind", [(0.95, 0.2, "[0.5, 0.6]", UNTESTABLE),
                                                          (0.5, 0.95, "[0.5, 0.6]", UNTESTABLE),
                                                          (0.5, 0.2, "[0.5, 0.6]", TOO_SMALL),
                                                          (0.5, 0.2, "[0.6, 0.7]", CONTRARY)])
def test_spectral_targets_are_untestable_where_the_targets_agree_or_position_ranks_them(agree, share, block_ci, kind):
    reason = reasons.spectral_targets(heads(agree, share, block_ci), CONTEXT)
    assert reason.kind == kind and len(reason.items) == 1 and f"{share:.0%}" in reason.items[0]


def test_a_holding_pair_has_no_item():
    assert reasons.spectral_targets(heads(0.5, 0.2, "[0.3, 0.4]"), CONTEXT).items == ()


def prune_rows(p: float, diff: float) -> dict[str, pd.DataFrame]:
    return {"prune_table2": pd.DataFrame([dict(source="ours", part="cls", model="m", method=TOME, ratio=0.5,
                                               mean=1.0, importance_mean=1.0 + diff, importance_minus_method=diff,
                                               p_vs_importance=p, sd_diff_vs_importance=2.0, images=64)])}


@pytest.mark.parametrize("p, diff, kind", [(0.01, 0.5, CONTRARY), (0.3, 0.5, TOO_SMALL), (0.3, -0.1, TOO_SMALL)])
def test_pruning_is_contrary_only_where_the_test_saw_the_other_direction(p, diff, kind):
    reason = reasons.cls_merging(prune_rows(p, diff), CONTEXT)
    assert reason.kind == kind
    detectable = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * 2.0 / math.sqrt(64)
    assert f"detectable |Δ| ≥ {detectable:.3g} at 64 images" in reason.items[0]


def test_a_paired_test_on_too_few_images_cannot_be_significant():
    kind, figures, phrase = reasons.paired(-0.5, 0.1, 5, 0.0625)  # signed-rank test: p ≥ 2·2⁻⁵ at 5 images
    assert kind == UNTESTABLE and phrase == "5 images: p ≥ 0.062"
    assert reasons.paired(-0.5, 0.1, 6, 0.03125)[0] == TOO_SMALL  # p < 0.05 possible from 6 images


@pytest.mark.parametrize("gap, kind", [(0.99, UNTESTABLE), (0.5, CONTRARY)])
def test_power_iteration_is_untestable_without_a_spectral_gap(gap, kind):
    table = pd.DataFrame([dict(source="ours", probe="a", error_q0=0.5, error_q2=0.45, gap=gap),
                          dict(source="ours", probe="b", error_q0=0.5, error_q2=0.1, gap=gap)])
    reason = reasons.power_iteration({"diagnose_power_iterations": table}, CONTEXT)
    assert reason.kind == kind and len(reason.items) == 1 and reason.items[0].startswith("a:")


def test_regimes_name_the_axis_that_puts_a_probe_outside():
    row = dict(metric="euclidean", kappa_cap=0.95, kappa_cap_ci="[0.94, 0.96]", cv=0.4, cv_ci="[0.3, 0.5]",
               erank=10.0, erank_ci="[9, 11]")
    table = pd.DataFrame([{**row, "source": "ours", "probe": "room", "model": "tiny", "decoder": "depth",
                           "regime": "low-rank-delocalized"},
                          {**row, "source": "paper", "probe": "dpt", "model": "dpt", "decoder": "dpt-depth",
                           "regime": "marginal-kappa-high-cv", "kappa_cap": 0.5, "cv": 4.0}])
    reason = reasons.regimes({"diagnose_table1": table}, CONTEXT)
    assert reason.kind == CONTRARY
    assert "κ_cap 0.95 ≥ 0.9" in reason.items[0] and "CV 0.4 < 1 (by -0.6)" in reason.items[0]
    assert reason.short == "room off on κ_cap, CV"


def test_the_drm_reason_gives_each_drop_and_the_distance_shift():
    rows = [dict(model="m", domain="sketch", method="drm", rho_mean=0.4, rho_low=0.35, rho_high=0.45,
                 rho_first_domain=0.8, distance_shift=0.6, distance_ratio=1.5),
            dict(model="m", domain="sketch", method="cosine", rho_mean=0.5, rho_low=0.46, rho_high=0.55,
                 rho_first_domain=0.6, distance_shift=0.6, distance_ratio=1.5)]
    reason = reasons.drm_against("retrieval_table15", ("cosine",))({"retrieval_table15": pd.DataFrame(rows)}, CONTEXT)
    assert reason.kind == CONTRARY
    assert reason.items[0].startswith("m sketch: ρ drm 0.8 → 0.4, cosine 0.6 → 0.5; decoder distances")
    assert "KS 0.60, median ×1.50" in reason.items[0]


def test_soft_merging_is_judged_against_the_best_hard_method():
    base = dict(model="m", domain="rgb", resolution=64, schedule="2-stage", llf=True, ratio=0.3, metric="add_silog",
                images=64)
    rows = [{**base, "method": "tome", "mean": 1.0},
            {**base, "method": "importance", "mean": 0.8, "p_vs_tome": 0.001, "sd_diff_vs_tome": 0.5},
            {**base, "method": TOME, "mean": 1.5, "p_vs_tome": 0.001, "sd_diff_vs_tome": 0.5},
            {**base, "method": "random", "mean": 1.2, "p_vs_tome": 0.2, "sd_diff_vs_tome": 0.5}]
    reason = reasons.soft_merging({"prune_schedules": pd.DataFrame(rows)}, CONTEXT)
    assert reason.kind == CONTRARY and "merging − importance Δ +0.2" in reason.items[0]
    rows[1] |= {"mean": 1.1}  # merging now ahead of importance: the hard method it is not ahead of is random
    reason = reasons.soft_merging({"prune_schedules": pd.DataFrame(rows)}, CONTEXT)
    assert reason.kind == TOO_SMALL and "merging − random Δ -0.2" in reason.items[0]


def test_the_targets_measurements():
    rng = np.random.default_rng(0)
    slot = np.arange(16.0)
    by_position = slot + rng.normal(0, 1e-3, (8, 16))  # every image ranks its tokens by slot
    assert position_share(by_position) == pytest.approx(1.0)
    assert position_share(rng.normal(size=(400, 16))) < 0.05  # no slot effect
    assert np.allclose(targets_agreement(by_position, by_position ** 2), 1.0)
    assert np.allclose(targets_agreement(by_position, -by_position), -1.0)


def test_the_dense_reason_gives_the_trend_over_every_eta_of_every_schedule():
    base = dict(model="m", domain="rgb", resolution=64, llf=True, metric="add_silog", method=TOME, images=64,
                sd_diff_vs_importance=0.8, mean=1.0)
    rows = [{**base, "schedule": s, "ratio": r, "importance_minus_method": d, "p_vs_importance": p}
            for s in ("1-stage", "2-stage") for r, d, p in ((0.1, -0.2, 0.04), (0.3, 0.3, 0.01))]
    reason = reasons.dense_pruning({"prune_schedules": pd.DataFrame(rows)}, CONTEXT)
    assert [item.split(":")[0] for item in reason.items] == ["m η 0.3"]  # the 2-stage row of η ≥ 0.2
    assert reason.kind == CONTRARY and len(reason.notes) == 2
    assert reason.notes[0] == ("m 1-stage, importance − ToMe score by η: 0.1: -0.2 ± 0.2 (p 0.04); "
                               "0.3: +0.3 ± 0.2 (p 0.01)")
