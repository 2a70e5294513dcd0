"""What a reader of results/REPORT.md needs: every comparison says which side wins (a signed effect,
its p-value and a verdict), figures are embedded and tell their series apart, the paper's numbers
are rendered rather than dumped, and the speed table names its machine."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from taskgeom.artifacts.figures import series_styles
from taskgeom.artifacts.tables import add_effects, comparison, read_table, signed, verdict

NAN = float("nan")


def test_verdict_names_the_side_that_wins_and_only_when_significant():
    assert verdict(-0.3, 1e-17) == "importance better"           # lower is better: a negative difference wins
    assert verdict(+0.3, 1e-17) == "importance worse"
    assert verdict(+0.3, 0.2) == "no difference at p ≥ 0.05"
    assert verdict(-0.3, 0.05) == "no difference at p ≥ 0.05"
    assert verdict(0.0, NAN) == "no difference (every image tied)"
    assert verdict(0.4, NAN) == "not tested"
    assert verdict(+0.3, 0.001, lower_is_better=False) == "importance better"
    assert verdict(+0.3, 0.01, alpha=0.001) == "no difference at p ≥ 0.001"


def frame() -> pd.DataFrame:
    rows = []
    for ratio, imp, p_tome, p_rand in ((0.0, 0.0, NAN, NAN), (0.2, 1.0, 1e-17, 0.4), (0.5, 2.0, 1e-3, 1e-4)):
        rows += [{"model": "m", "ratio": ratio, "method": "importance", "mean": imp},
                 {"model": "m", "ratio": ratio, "method": "tome_score", "mean": imp / 2 if ratio else 0.0,
                  "p_vs_importance": p_tome},
                 {"model": "m", "ratio": ratio, "method": "random", "mean": imp * 4 if ratio else 0.0,
                  "p_vs_importance": p_rand}]
    return pd.DataFrame(rows)


def test_add_effects_gives_the_signed_difference_ratio_and_verdict_per_baseline():
    out = add_effects(frame(), ["model", "ratio"]).set_index(["ratio", "method"])
    assert out.loc[(0.2, "tome_score"), "importance_minus_method"] == pytest.approx(0.5)
    assert out.loc[(0.2, "tome_score"), "importance_over_method"] == pytest.approx(2.0)
    assert out.loc[(0.2, "tome_score"), "verdict"] == "importance worse"      # p = 1e-17, yet worse
    assert out.loc[(0.5, "random"), "importance_minus_method"] == pytest.approx(-6.0)
    assert out.loc[(0.5, "random"), "verdict"] == "importance better"
    assert out.loc[(0.2, "random"), "verdict"] == "no difference at p ≥ 0.05"
    assert out.loc[(0.0, "tome_score"), "verdict"] == "no difference (every image tied)"
    assert math.isnan(out.loc[(0.0, "tome_score"), "importance_over_method"])  # 0 / 0
    assert (out.xs("importance", level="method")["verdict"] == "").all()
    assert out.loc[(0.2, "importance"), "mean"] == 1.0                       # existing columns untouched


def test_add_effects_leaves_untested_rows_and_frames_without_p_alone():
    df = frame()
    paper = pd.DataFrame([{"model": "paper", "ratio": 0.2, "method": m, "mean": v}
                          for m, v in (("importance", 1.0), ("tome_score", 3.0))])
    out = add_effects(pd.concat([df, paper], ignore_index=True), ["model", "ratio"])
    assert (out[out["model"] == "paper"]["verdict"] == "").all()
    no_p = df.drop(columns="p_vs_importance")
    assert add_effects(no_p, ["model", "ratio"]).equals(no_p)


def test_comparison_is_one_readable_row_per_baseline_and_ratio():
    table = comparison(add_effects(frame(), ["model", "ratio"]), ["model"])
    assert list(table.columns) == ["model", "baseline", "η", "importance", "baseline value", "importance − baseline",
                                   "importance / baseline", "Wilcoxon p", "verdict"]
    assert len(table) == 6 and (table["verdict"] != "").all()
    row = table[(table["baseline"] == "random") & (table["η"] == "0.5")].iloc[0]
    assert row["importance − baseline"] == "−6" and row["Wilcoxon p"] == "0.0001"
    assert signed(0.0123) == "+0.0123" and signed(-1.5e-5) == "−1.5e-05" and signed(NAN) == ""


@pytest.mark.parametrize("n", [1, 5, 11, 12, 20, 21, 33])
def test_series_styles_give_every_series_its_own_colour(n):
    styles = series_styles(n)
    assert len(styles) == n
    assert len({s["color"] for s in styles}) == n
    assert len({(s["color"], s["marker"]) for s in styles}) == n


def test_series_styles_are_deterministic():
    assert series_styles(14) == series_styles(14)


# ---- the smoke pipeline's report -------------------------------------------------------------

def markdown_tables(text: str) -> list[list[dict[str, str]]]:
    """Every pipe table in ``text`` as a list of {header: cell} rows."""
    tables, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|$", lines[i + 1]):
            header = [c.strip() for c in lines[i].strip("|").split("|")]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(dict(zip(header, (c.strip() for c in lines[i].strip("|").split("|")))))
                i += 1
            tables.append(rows)
        else:
            i += 1
    return tables


@pytest.mark.pipeline
def test_the_smoke_report_is_readable(smoke: Path):
    results = smoke / "results"
    report = (results / "REPORT.md").read_text()
    embedded = re.findall(r"!\[[^\]]+\]\(([^)\s]+\.png)\)", report)
    mentioned = re.findall(r"[\w./-]*figures/[\w.-]+\.png", report)
    assert embedded and set(mentioned) == set(embedded), set(mentioned) ^ set(embedded)
    assert all((results / f).is_file() for f in embedded)
    assert {f"figures/{p.name}" for p in (results / "figures").glob("*.png")} <= set(embedded)

    for match in re.finditer(r"Paper \(Bond et al\.\):\**", report):
        assert report[match.end():].split("\n## ")[0].strip(), "a paper heading followed by nothing"
    assert "```" not in report and "yaml" not in report.replace("paper_numbers.yaml", "").lower()

    speed = report.split("## Cost of pruning", 1)[1].split("\n## ", 1)[0]
    for machine in read_table(results / "prune/speed.csv")["machine"].unique():
        assert f"Measured on **`{machine}`" in speed
    assert any("method" in row and "η=0.5" in row for t in markdown_tables(speed) for row in t)

    with_p = [t for t in markdown_tables(report) if t and any(re.search(r"\bp\b|p_vs", h) for h in t[0])]
    assert with_p, "no table reports a p-value"
    for table in with_p:
        assert all(row.get("verdict") for row in table), table[0]
    verdicts = {row["verdict"] for t in with_p for row in t}
    assert verdicts <= {"importance better", "importance worse", "no difference at p ≥ 0.05",
                        "no difference (every image tied)", "no difference in the mean"}, verdicts
