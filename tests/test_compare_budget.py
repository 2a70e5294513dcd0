"""``taskgeom compare``'s readings on planted numbers whose answers are known: the Pareto fronts and
the best setting per FLOP budget (``comparing.budget``), the speedup called only when the timed
rounds allow it (``comparing.timing.speedup``), and the training images found by content
(``compare_command.training_overlap``) and the ratio grids of ``--ratios``."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd
import pytest

from taskgeom.comparing import budget
from taskgeom.comparing.output import speedup_cell
from taskgeom.comparing.timing import FASTER, SLOWER, WITHIN, Throughput, speedup
from taskgeom.pipeline.compare_command import ratio_grid, ratios_of, training_overlap

DOWN = [+1.0, -1.0] * 4                  # per-image wiggles of mean zero: alternating,
RAMP = [(i - 3.5) / 10 for i in range(8)]  # and a ramp (its differences from DOWN all distinct)
# (method, ratio) -> (flops_vs_unpatched, kl mean, per-image wiggle, speedup_call)
PLANTED = {
    ("importance", 0.25): (0.85, 0.010, DOWN, FASTER), ("importance", 0.5): (0.68, 0.020, DOWN, FASTER),
    ("importance", 0.75): (0.52, 0.050, DOWN, FASTER),
    ("tome_score", 0.25): (0.84, 0.015, RAMP, WITHIN), ("tome_score", 0.5): (0.66, 0.030, RAMP, WITHIN),
    ("tome_score", 0.75): (0.51, 0.060, RAMP, "rounds spread 10.4×: no speedup called"),
    # random: its cheaper η 0.5 is also better than its η 0.25
    ("random", 0.25): (0.83, 0.040, DOWN, FASTER), ("random", 0.5): (0.65, 0.030, DOWN, FASTER),
    ("random", 0.75): (0.49, 0.200, DOWN, WITHIN),
    # evit: η 0.5 ties importance's η 0.5 on the mean at exactly the 0.7 budget's edge
    ("evit", 0.25): (0.88, 0.012, [-x for x in DOWN], SLOWER), ("evit", 0.5): (0.70, 0.020, [-x for x in DOWN], SLOWER),
    ("evit", 0.75): (0.55, 0.080, DOWN, SLOWER),
    # tome: its η 0.75 merges no more than η 0.5 (the same FLOPs) and ends further off
    ("tome", 0.25): (0.95, 0.005, DOWN, WITHIN), ("tome", 0.5): (0.75, 0.025, DOWN, WITHIN),
    ("tome", 0.75): (0.75, 0.030, DOWN, WITHIN),
}
SECONDS = {  # seconds per timed round, round-robin: importance η 0.5 ran faster than η 0.75 in every round
    ("importance", 0.25): (1.0, 1.0, 1.0), ("importance", 0.5): (0.8, 0.7, 0.8), ("importance", 0.75): (0.9, 0.8, 0.9),
    ("random", 0.25): (0.9, 0.8, 0.9), ("random", 0.5): (0.8, 0.7, 0.8),
    # evit η 0.5 is better in the mean than η 0.75 but slower in one round: it cannot push η 0.75 off
    ("evit", 0.25): (2.0, 2.0, 2.0), ("evit", 0.5): (1.5, 1.2, 1.5), ("evit", 0.75): (1.4, 1.3, 1.4),
    **{("tome_score", r): (1.0, 1.0, 1.0) for r in (0.25, 0.5, 0.75)},
}


def planted(wiggle: float = 0.004) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A compare table (unpatched row first) and its per-image values (8 images) from ``PLANTED``:
    image i's kl is the mean + wiggle · pattern[i], so each row's mean is the planted one."""
    rows = [{"method": "unpatched", "ratio": 0.0, "flops_vs_unpatched": 1.0, "kl_mean": math.nan, "kl_low": math.nan,
             "kl_high": math.nan, "speedup": 1.0, "speedup_min": 1.0, "speedup_max": 1.0, "speedup_call": "reference"}]
    values = []
    for (method, ratio), (flops, mean, pattern, call) in PLANTED.items():
        rows.append({"method": method, "ratio": ratio, "flops_vs_unpatched": flops, "kl_mean": mean,
                     "kl_low": mean - 0.001, "kl_high": mean + 0.001, "speedup": 1.2, "speedup_min": 1.1,
                     "speedup_max": 1.3, "speedup_call": call})
        values += [{"method": method, "ratio": ratio, "image": f"im{i}.png", "measure": "kl",
                    "value": mean + wiggle * x} for i, x in enumerate(pattern)]
    return pd.DataFrame(rows), pd.DataFrame(values)


def test_each_methods_flops_front_drops_exactly_the_settings_another_of_its_settings_beats():
    table, _ = planted()
    front = budget.pareto(table, "kl", SECONDS).set_index(["method", "ratio"])
    assert "unpatched" not in front.index.get_level_values(0)
    assert not front.flops_front[("random", 0.25)]          # η 0.5: fewer FLOPs and a lower mean
    assert not front.flops_front[("tome", 0.75)]            # η 0.5: the same FLOPs and a lower mean
    assert front.flops_front.drop([("random", 0.25), ("tome", 0.75)]).all()  # the others trade FLOPs for fidelity
    higher = budget.pareto(table.assign(kl_mean=-table.kl_mean), "kl", SECONDS, lower_is_better=False)
    assert higher.flops_front.tolist() == front.flops_front.tolist()


def test_the_throughput_front_ranks_called_settings_only_and_by_every_round():
    table, _ = planted()
    front = budget.pareto(table, "kl", SECONDS).set_index(["method", "ratio"]).throughput_front
    assert [front[("tome_score", r)] for r in (0.25, 0.5, 0.75)] == [None, None, None]
    assert front[("random", 0.75)] is None and front[("random", 0.5)] is True and front[("random", 0.25)] is False
    assert front[("importance", 0.25)] is True and front[("importance", 0.5)] is True
    assert front[("importance", 0.75)] is False         # η 0.5: lower mean, faster in every round
    assert front[("evit", 0.75)] is True                # η 0.5 has the lower mean but lost one round
    lines = budget.front_lines(budget.pareto(table, "kl", SECONDS))
    assert "tome_score: FLOPs front η 0.25, 0.5, 0.75; throughput could not rank its settings" in lines[1]
    assert lines[2] == "random: FLOPs front η 0.5, 0.75; throughput front η 0.5 (η 0.75 not ranked: no speedup called)"


def test_each_budget_takes_each_methods_best_setting_within_it_and_names_the_winner():
    table, values = planted()
    chosen = budget.choices(table, "kl", budgets=(0.4, 0.5, 0.6, 0.7, 0.9))
    pick = {(b, m): r for b, m, r in zip(chosen.budget, chosen.method, chosen.ratio)}
    assert all(math.isnan(pick[(0.4, m)]) for m in ("importance", "tome_score", "random", "evit", "tome"))
    assert pick[(0.5, "random")] == 0.75 and math.isnan(pick[(0.5, "importance")])
    assert pick[(0.7, "evit")] == 0.5 and pick[(0.7, "importance")] == 0.5        # 0.70 ≤ 0.7 counts
    assert pick[(0.9, "random")] == 0.5 and pick[(0.9, "importance")] == 0.25     # random's cheaper is better
    assert pick[(0.9, "tome")] == 0.5                                             # its η 0.25 is over budget
    verdict = budget.verdicts(chosen, values, "kl").set_index("budget")
    assert verdict.call.tolist() == ["none", "only", "significant", "tie", "not significant"]
    assert verdict.winner[0.5] == "random" and verdict.winner[0.7] == ""
    assert (verdict.winner[0.6], verdict.runner_up[0.6]) == ("importance", "tome_score")
    assert verdict.lead[0.6] == pytest.approx(0.010) and verdict.p[0.6] == pytest.approx(2 / 2**8)
    assert (verdict.winner[0.9], verdict.runner_up[0.9]) == ("importance", "evit") and verdict.p[0.9] > 0.05
    lines = budget.lines(chosen, verdict.reset_index(), "kl")
    assert lines[0] == "at ≤ 0.4 of the FLOPs: no method has a setting within it"
    assert lines[1].startswith("at ≤ 0.5 of the FLOPs: random η 0.75 (0.49 of the FLOPs), kl 0.2 [0.199, 0.201]; "
                               "importance, tome_score, evit, tome: no setting within it")
    assert lines[2].endswith("importance leads tome_score by 0.01, Wilcoxon p 0.00781: significant at 0.05")
    assert "importance and evit tie on the mean" in lines[3]
    assert lines[4].endswith("not significant at 0.05") and lines[4].index("evit η 0.25") < lines[4].index("tome_score")


def test_a_lead_with_every_image_on_one_side_is_significant_and_a_wiggle_is_not():
    table, values = planted(wiggle=0.0)       # every image of a setting at its mean: shifts only
    verdict = budget.verdicts(budget.choices(table, "kl", budgets=(0.9,)), values, "kl")
    assert verdict.call.tolist() == ["significant"] and verdict.p[0] < 0.05
    record = budget.iso_flop(table, values, SECONDS, "kl", budgets=(0.9,)).as_json()
    assert record["budgets"]["verdicts"][0]["winner"] == "importance" and len(record["pareto"]["rows"]) == 15
    assert record["budgets"]["grid"] == [0.9] and record["pareto"]["rows"][2]["throughput_front"] is False


def rounds(*seconds: float) -> Throughput:
    return Throughput(float(np.median([4 / s for s in seconds])), 4 / max(seconds), 4 / min(seconds), seconds)


def test_a_speedup_is_called_only_when_every_round_agrees_and_the_rounds_hold_still():
    base = rounds(1.0, 1.1, 1.0, 1.05)
    fast = speedup(rounds(0.5, 0.6, 0.55, 0.5), base)
    assert fast.call == FASTER and fast.low == pytest.approx(1.0 / 0.55) and fast.high == pytest.approx(1.05 / 0.5)
    assert speedup(rounds(2.0, 2.5, 2.0, 2.2), base).call == SLOWER
    assert speedup(rounds(0.9, 1.2, 0.95, 1.0), base).call == WITHIN       # ratios 1.11, 0.92, ...: both sides
    wild = speedup(rounds(0.1, 1.04, 0.2, 0.5), base)                       # 10.4× between its rounds
    assert wild.call == "rounds spread 10.4×: no speedup called" and not wild.called
    steady_over_wild = speedup(rounds(0.5, 0.5, 0.5, 0.5), rounds(1.0, 3.0, 1.0, 1.0))
    assert steady_over_wild.call == "unpatched rounds spread 3.0×: no speedup called"
    assert speedup(rounds(0.5), rounds(1.0)).call == "one timed round: no speedup called"
    assert speedup(base, base).call == "reference" and speedup(base, base).median == 1.0
    once, wild_base = rounds(1.0), rounds(1.0, 3.0, 1.0, 1.0)
    assert speedup(once, once).call == "reference"
    assert speedup(wild_base, wild_base).call == "rounds spread 3.0×: no speedup called"
    row = {"speedup": wild.median, "speedup_min": wild.low, "speedup_max": wild.high, "speedup_call": wild.call}
    assert speedup_cell(row) == wild.call                                   # not a figure
    assert speedup_cell({**row, "speedup_call": FASTER}).endswith("faster")


def test_training_images_are_found_by_their_bytes_not_their_names():
    held = {"a.png": "sha-a", "b.png": "sha-b", "c.png": "sha-c"}
    fit = {"train": ["elsewhere/renamed.png", "b.png"], "train_sha256": ["sha-a", "sha-other"]}
    note = training_overlap(held, fit)
    assert note.startswith("1 held-out image(s) have the same bytes (sha256)")
    assert "a.png = the fit's elsewhere/renamed.png" in note
    assert training_overlap(held, {"train": ["b.png"], "train_sha256": ["sha-other"]}) is None
    old = training_overlap(held, {"train": ["b.png", "z.png"]})
    assert "compared by name only: 1 image name(s) are among them" in old
    assert "by name only: no image name" in training_overlap(held, {"train": ["z.png"]})
    assert training_overlap(held, {}) is None


def test_ratio_grids_expand_and_each_eta_is_kept_once():
    assert ratio_grid("0.1:0.9:0.1") == (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
    assert ratios_of([0.25, ratio_grid("0:0.5:0.25"), 0.5]) == [0.25, 0.0, 0.5]
    for bad in ("0.5:1.2:0.25", "0.5:0.2:0.1", "0.1:0.5:0", "a:b:c", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            ratio_grid(bad)
