"""The findings' rules: each claim's verdict follows its stated rule on small tables whose answer is
known, in both directions, and a claim without rows is not tested."""

from __future__ import annotations

import pandas as pd
import pytest

from taskgeom.evaluate import findings_text
from taskgeom.evaluate.findings import CLAIMS, FAILS, HOLDS, MIXED, UNTESTED, findings, judge_all, verdict
from taskgeom.evaluate.reasons import Context
from taskgeom.pipeline.registry import FINDINGS_INPUTS

EMPTY = {name: pd.DataFrame() for c in CLAIMS for name in c.tables}
SINGLE = lambda model: model == "mv"
CONTEXT = Context(SINGLE, 20, {"kappa_high": 0.9, "cv_high": 1.0, "erank_rich": 5.0})


def judged(**tables: pd.DataFrame) -> pd.DataFrame:
    return findings({**EMPTY, **tables}, CONTEXT).set_index("claim")


def test_verdicts_count_the_checks():
    assert verdict([]) == UNTESTED and verdict([True, True]) == HOLDS
    assert verdict([False]) == FAILS and verdict([True, False]) == MIXED


def test_the_findings_stage_reads_exactly_the_tables_the_claims_name():
    assert set(FINDINGS_INPUTS) == {name for c in CLAIMS for name in c.tables}


def test_a_run_without_any_table_tests_nothing():
    table = findings(EMPTY, CONTEXT)
    assert list(table["claim"]) == [c.claim for c in CLAIMS]
    assert (table["verdict"] == UNTESTED).all() and (table["checks"] == "0 of 0").all() and (table["why"] == "").all()


def table1(regime_cls: str) -> pd.DataFrame:
    row = dict(layers=1, metric="euclidean", kappa_cap=0.5, cv=1.0, erank=10.0, kappa_cap_ci="[0.4, 0.6]",
               cv_ci="[0.9, 1.1]", erank_ci="[9, 11]")
    return pd.DataFrame([
        {**row, "source": "ours", "probe": "a", "model": "tiny", "decoder": "cls", "regime": regime_cls},
        {**row, "source": "ours", "probe": "b", "model": "mv", "decoder": "camera", "regime": "rank-bounded"},
        {**row, "source": "ours", "probe": "c", "model": "mv", "decoder": "camera", "metric": "so3", "regime": "x"},
        {**row, "source": "paper", "probe": "p", "model": "dinov2", "decoder": "cls", "regime": "marginal"},
        {**row, "source": "paper", "probe": "q", "model": "vggt", "decoder": "camera", "regime": "rank-bounded"},
    ])


@pytest.mark.parametrize("regime, expected", [("marginal", HOLDS), ("rich-spectrum", MIXED)])
def test_regimes_compare_each_probe_with_its_counterpart(regime, expected):
    row = judged(diagnose_table1=table1(regime)).loc["Each probe class falls in the paper's regime"]
    assert row["verdict"] == expected and row["checks"].endswith("of 2")  # the SO(3) row is not compared


def heads(spectral_ci: str, block_ci: str, floor: float = 0.1, agree: float = 0.5, share: float = 0.3) -> pd.DataFrame:
    row = dict(source="ours", probe="p", w_rank=0.5, train_images=8, width=16, heads=2, rho_position_only=floor,
               paper_rho=0.2, targets_rho=agree, targets_rho_ci="[0.4, 0.6]", position_share=share)
    return pd.DataFrame([{**row, "head": "s", "target": "spectral", "rho": 0.5, "rho_ci": spectral_ci},
                         {**row, "head": "b", "target": "block_norm", "rho": 0.4, "rho_ci": block_ci},
                         {**row, "head": "w", "target": "block_norm", "width": 32, "rho": 0.4, "rho_ci": block_ci}])


@pytest.mark.parametrize("spectral, block, expected", [("[0.45, 0.55]", "[0.3, 0.44]", HOLDS),
                                                       ("[0.45, 0.55]", "[0.3, 0.46]", FAILS),
                                                       ("[0.2, 0.3]", "[0.4, 0.5]", FAILS)])
def test_spectral_targets_need_disjoint_intervals_in_the_papers_direction(spectral, block, expected):
    row = judged(metric_importance=heads(spectral, block)).loc[
        "Spectral targets teach the importance head better than block norms"]
    assert row["verdict"] == expected and row["checks"].endswith("of 1")  # the wider block head has no twin


def test_the_head_must_clear_its_position_only_floor():
    table = heads("[0.45, 0.55]", "[0.3, 0.44]", floor=0.5)
    assert judged(metric_importance=table).loc["The importance head ranks tokens beyond their position",
                                               "verdict"] == FAILS


def pruning(p: float, importance_minus_method: float) -> pd.DataFrame:
    rows = [dict(source="ours", part="cls", model="m", method="tome_score", ratio=r, mean=1.0, importance_mean=0.5,
                 importance_minus_method=importance_minus_method, p_vs_importance=p, sd_diff_vs_importance=2.0,
                 images=64) for r in (0.2, 0.5)]
    return pd.DataFrame([*rows, {**rows[0], "ratio": 0.0, "p_vs_importance": float("nan")},
                         {**rows[0], "method": "random", "p_vs_importance": 1.0}])


@pytest.mark.parametrize("p, diff, expected", [(0.01, -0.5, HOLDS), (0.2, -0.5, FAILS), (0.01, 0.5, FAILS)])
def test_cls_merging_needs_the_paired_test_and_the_papers_direction(p, diff, expected):
    row = judged(prune_table2=pruning(p, diff)).loc["Geometric merging beats ToMe on CLS decoders at every η"]
    assert row["verdict"] == expected and row["checks"].endswith("of 2")  # η = 0 and other methods are left out


def test_retrieval_compares_the_drm_with_each_baseline():
    rows = [dict(model="m", domain="rgb", method="drm", rho_mean=0.8, rho_low=0.7, rho_high=0.9),
            dict(model="m", domain="rgb", method="l2", rho_mean=0.5, rho_low=0.4, rho_high=0.6),
            dict(model="m", domain="rgb", method="cosine", rho_mean=0.75, rho_low=0.65, rho_high=0.8),
            dict(model="paper", domain="in-distribution", method="drm", rho_mean=0.783)]
    row = judged(retrieval_table14=pd.DataFrame(rows)).loc[
        "The DRM predicts decoder distance better than L2 and cosine"]
    assert row["verdict"] == MIXED and row["checks"] == "1 of 2" and "0.783" in row["paper"]


def test_vae_and_randnla_rules():
    vae = pd.DataFrame([dict(vae="v", quantity="erank", original=50.0, original_ci="[48, 52]", latent=6.0,
                             latent_ci="[5, 7]", paper_original=282.6, paper_latent="30–53")])
    t13 = pd.DataFrame([dict(source="ours", probe="a", supervision="q1", share_of_exact=0.95),
                        dict(source="ours", probe="b", supervision="q1", share_of_exact=0.5),
                        dict(source="ours", probe="b", supervision="exact", share_of_exact=1.0),
                        dict(source="ours", probe="c", supervision="q1", share_of_exact=float("nan"))])  # no exact run
    table = judged(metric_vae=vae, metric_table13=t13)
    assert table.loc["The VAE bottleneck cuts a dense probe's effective rank", "verdict"] == HOLDS
    row = table.loc["RandNLA supervision at q = 1 is as good as exact"]
    assert row["verdict"] == MIXED and row["checks"] == "1 of 2" and "c:" not in row["ours"]


def test_the_summary_reads_in_one_screen_and_every_check_follows_it():
    tables = {**EMPTY, "prune_table2": pd.concat([pruning(0.01, -0.5), pd.DataFrame(
        [dict(source="paper", part="cls", model="dinov2", method=m, ratio=r, mean=v)
         for m, r, v in (("tome_score", 0.5, 33.21), ("importance", 0.5, 0.76), ("importance", 0.1, 0.007))])])}
    table, judged_ = findings(tables, CONTEXT), judge_all(tables, SINGLE)
    assert list(table.columns[:8]) == ["claim", "where", "paper", "ours", "checks", "verdict", "why", "rule"]
    row = table.set_index("claim").loc["Geometric merging beats ToMe on CLS decoders at every η"]
    assert row["ours"] == ("m η 0.2: importance 0.5 vs ToMe score 1 (p 0.01); "  # every item
                          "m η 0.5: importance 0.5 vs ToMe score 1 (p 0.01)")
    assert row["paper_headline"] == "η 0.5: importance 0.76 vs ToMe 33.21"
    assert row["ours_headline"] == "2 of 2 (model, η): importance lower, p < 0.05"
    text = findings_text.markdown(judged_, table, [None] * len(CLAIMS), "Caption.")
    lines = text.splitlines()
    assert [cell.strip() for cell in lines[2].split("|")[1:-1]] == ["claim", "verdict", "the paper", "ours", "why"]
    summary = lines[2:lines.index("", 2)]
    assert len(summary) == 2 + len(CLAIMS) and all(len(cell.strip()) <= 80 for line in summary
                                                   for cell in line.split("|"))
    section = text.split("### Geometric merging beats ToMe on CLS decoders at every η: holds\n", 1)[1]
    assert section.split("###")[0].count("- ✓ m η") == 2
    assert "### The DRM keeps its lead over cosine across domains: not tested" in text
