"""A cost in units of another timing (``benchmarks/cost_unit.py``, used by ``diagnose_cost.py``):
the unit is sampled many times between the runs it normalises, reported with its spread, and a row
whose unit or total spreads by more than 2× says so in place of a ratio."""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import cost_unit  # noqa: E402
import diagnose_cost  # noqa: E402
from cost_unit import STABLE, group_stability, shown, spread, stability, unit_batch  # noqa: E402


def test_a_spread_over_the_limit_in_the_unit_or_the_total_makes_the_row_unstable():
    steady, runs = [0.002] * 20, [0.40, 0.45, 0.50]
    assert spread(steady) == 1 and spread(runs) == pytest.approx(1.25)
    assert stability(steady, runs) == STABLE
    assert stability([0.002] * 19 + [0.004], runs) == STABLE   # 2× exactly is within the limit
    assert stability([0.002] * 19 + [0.0062], runs) == "unstable: unit spread 3.1×"
    assert stability(steady, [0.4, 0.96, 0.5]) == "unstable: total spread 2.4×"
    assert stability([0.001, 0.005], [1.0, 3.0]) == "unstable: unit spread 5.0×, total spread 3.0×"
    assert group_stability(pd.Series([STABLE, "unstable: unit spread 3.1×", STABLE])) == "unstable: 1 of 3 rows"
    assert group_stability(pd.Series([STABLE, STABLE])) == STABLE


def test_the_unit_is_timed_at_least_fifteen_times_whatever_the_number_of_runs():
    for runs in (1, 2, 3, 8, 20):
        assert (runs + 1) * unit_batch(runs) >= cost_unit.MIN_UNIT_SAMPLES
        assert unit_batch(runs) >= 5


def test_an_unstable_row_says_why_in_place_of_its_ratios():
    df = pd.DataFrame({"case": ["a", "b"], "forward_equivalents": [148.0, math.nan],
                       "other_forward_equivalents": [14.3, math.nan], "cost_over_frozen": [math.nan, math.nan],
                       "stability": [STABLE, "unstable: unit spread 3.1×"]})
    md = shown(df, ("forward_equivalents", "other_forward_equivalents", "cost_over_frozen"))
    assert md["forward_equivalents"].tolist() == ["148", "unstable: unit spread 3.1×"]
    assert md["other_forward_equivalents"].tolist() == ["14.3", "unstable"]
    assert md["cost_over_frozen"].tolist() == ["—", "unstable"]
    assert "unstable: unit spread 3.1×" in md.to_markdown(index=False)


class Machine:
    """A clock that a forward and a diagnose run advance by set amounts: a machine whose speed is
    scripted, forward by forward."""

    def __init__(self, forward_s, diagnose_s: float):
        self.now, self.forward_s, self.diagnose_s, self.events = 0.0, iter(forward_s), diagnose_s, []

    def perf_counter(self) -> float:
        return self.now

    def forward(self, F):
        self.now += next(self.forward_s)
        self.events.append("forward")
        return F.sum()

    def diagnose(self, f, F, seed):
        self.now += self.diagnose_s
        self.events.append("diagnose")
        return SimpleNamespace(products=168, jvps=84, vjps=84, budget={"sketch": 48, "slq": 100})


def timed_row(monkeypatch, forward_s, diagnose_s=0.4, repeats=3) -> tuple[dict, Machine]:
    machine = Machine(forward_s, diagnose_s)
    monkeypatch.setattr(diagnose_cost, "time", machine)
    monkeypatch.setattr(diagnose_cost, "diagnose", machine.diagnose)
    probe = SimpleNamespace(F=torch.zeros(2, 3), f=machine.forward)
    d, seconds, spent, runs, forwards = diagnose_cost.timed_diagnose(probe, 0, repeats=repeats)
    return diagnose_cost.cost_columns(d, seconds, spent, runs, forwards), machine


def test_forwards_are_timed_in_batches_between_the_diagnose_runs_and_their_median_is_the_unit(monkeypatch):
    batch = unit_batch(3)
    row, machine = timed_row(monkeypatch, [0.002] * 100)
    assert machine.events == (["forward"] * (batch + 1) + ["diagnose"]) * 3 + ["forward"] * (batch + 1)
    assert row["stability"] == STABLE
    assert [row[k] for k in ("forward_ms", "forward_ms_min", "forward_ms_max")] == pytest.approx([2.0] * 3)
    assert row["diagnose_s"] == pytest.approx(0.4) and row["forward_equivalents"] == pytest.approx(200)


def test_a_unit_that_stalled_under_part_of_the_run_gives_no_forward_equivalents(monkeypatch):
    batch = unit_batch(3)
    # the machine slows fourfold after the second run: each batch's untimed first forward, then its timed ones
    forward_s = ([0.002] * (batch + 1)) * 3 + ([0.008] * (batch + 1)) * 2
    row, _ = timed_row(monkeypatch, forward_s)
    assert row["stability"] == "unstable: unit spread 4.0×"
    assert row["forward_ms_min"] == pytest.approx(2.0) and row["forward_ms_max"] == pytest.approx(8.0)
    ratios = [k for k in diagnose_cost.RATIOS if k in row]
    assert ratios and all(math.isnan(row[k]) for k in ratios)
    md = shown(pd.DataFrame([row]), diagnose_cost.RATIOS)
    assert md["forward_equivalents"].tolist() == ["unstable: unit spread 4.0×"]


def test_a_probe_summary_gives_no_mean_over_images_when_one_is_unstable():
    rows = [{"probe": p, "weights": "random", "image": i, "N": 4, "D": 8, "M": 16, "forward_ms": 2.0,
             "products": 168, "min_budget_products": 168, "stability": s,
             **{k: (100.0 + i if s == STABLE else math.nan) for k in diagnose_cost.RATIOS[:5]}}
            for p, states in (("steady", [STABLE, STABLE]), ("stalled", [STABLE, "unstable: total spread 2.4×"]))
            for i, s in enumerate(states)]
    summary = diagnose_cost.summarise(pd.DataFrame(rows)).set_index("probe")
    assert summary.loc["steady", "stability"] == STABLE
    assert summary.loc["steady", "forward_equivalents"] == 100.5
    assert summary.loc["stalled", "stability"] == "unstable: 1 of 2 rows"
    assert math.isnan(summary.loc["stalled", "forward_equivalents"])
