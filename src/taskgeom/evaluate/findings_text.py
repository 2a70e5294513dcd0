"""The findings as read in one screen: a summary table of one short phrase per cell (claim,
verdict, the paper's headline figure, ours), then one section per claim with its rule, the
paper's figures in full and every check with its outcome.

The CSV (``evaluate.findings.COLUMNS``) keeps every column; this is its Markdown and LaTeX face.
"""

from __future__ import annotations

import pandas as pd

from taskgeom.evaluate.findings import Checks, Claim

SUMMARY = {"claim": "claim", "verdict": "verdict", "paper_headline": "the paper", "ours_headline": "ours"}
MARK = {True: "✓", False: "✗"}


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """The one-screen table: claim, verdict, the paper's headline figure, ours.

    Args:
        table: the findings (``evaluate.findings.findings``).

    Returns:
        Those four columns, renamed for reading.
    """
    return table[list(SUMMARY)].rename(columns=SUMMARY)


def details(judged: list[tuple[Claim, str, Checks]], table: pd.DataFrame) -> list[str]:
    """One section per claim: heading with its verdict, where and rule, the paper's figures, and
    each check marked ✓ (meets the rule) or ✗.

    Args:
        judged: ``evaluate.findings.judge_all``'s (claim, the paper's figure, checks).
        table: the findings, in the same order (their verdicts).

    Returns:
        Markdown lines.
    """
    lines = []
    for (claim, theirs, checks), verdict in zip(judged, table["verdict"]):
        lines += [f"### {claim.claim}: {verdict}", "", f"{claim.where}. Rule: {claim.rule}.", "",
                  f"The paper: {theirs or '—'}", ""]
        lines += [f"- {MARK[bool(ok)]} {text}" for text, ok in checks] or ["- no item of this run applies"]
        lines.append("")
    return lines


def markdown(judged: list[tuple[Claim, str, Checks]], table: pd.DataFrame, caption: str) -> str:
    """The findings' Markdown: ``caption``, the summary table, then ``details``.

    Args:
        judged: ``evaluate.findings.judge_all``'s result.
        table: the findings.
        caption: the paragraph above the table.

    Returns:
        The text, ending in a newline.
    """
    return "\n".join([caption, "", summary(table).to_markdown(index=False), "",
                      "Each claim's checks, one per item it applies to:", "", *details(judged, table)]).rstrip() + "\n"
