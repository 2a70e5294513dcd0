"""The findings as read in one screen: a summary table of one short phrase per cell (claim,
verdict, the paper's headline figure, ours, why), a sentence in plain words per claim that does
not hold, then one section per claim with its rule, the paper's figures in full, every check with
its outcome and, where it does not hold, each failing item's reason.

The CSV (``evaluate.findings.COLUMNS``) keeps every column; this is its Markdown and LaTeX face.
"""

from __future__ import annotations

import pandas as pd

from taskgeom.evaluate.findings import Checks, Claim
from taskgeom.evaluate.reasons import CONTRARY, TOO_SMALL, UNTESTABLE, Reason

SUMMARY = {"claim": "claim", "verdict": "verdict", "paper_headline": "the paper", "ours_headline": "ours",
           "why": "why"}
MARK = {True: "✓", False: "✗"}
PLAIN = {UNTESTABLE: "this run cannot show the effect", TOO_SMALL: "the effect is smaller than this run's test can see",
         CONTRARY: "tested, and this run measured the opposite"}


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """The one-screen table: claim, verdict, the paper's headline figure, ours, why.

    Args:
        table: the findings (``evaluate.findings.findings``).

    Returns:
        Those five columns, renamed for reading.
    """
    return table[list(SUMMARY)].rename(columns=SUMMARY)


def plain(table: pd.DataFrame, why: list[Reason | None]) -> list[str]:
    """One sentence per claim that does not hold: its verdict and its reason in plain words.

    Args:
        table: the findings.
        why: each claim's reason (None where it holds or is not tested), in the table's order.

    Returns:
        Markdown lines, a bullet each.
    """
    return [f"- **{claim}** ({verdict}): {PLAIN[reason.kind]}: {reason.short}."
            for claim, verdict, reason in zip(table["claim"], table["verdict"], why) if reason is not None]


def details(judged: list[tuple[Claim, str, Checks]], table: pd.DataFrame, why: list[Reason | None]) -> list[str]:
    """One section per claim: heading with its verdict, where and rule, the paper's figures, each
    check marked ✓ (meets the rule) or ✗, and each failing item's reason.

    Args:
        judged: ``evaluate.findings.judge_all``'s (claim, the paper's figure, checks).
        table: the findings, in the same order (their verdicts).
        why: each claim's reason or None, in the same order.

    Returns:
        Markdown lines.
    """
    lines = []
    for (claim, theirs, checks), verdict, reason in zip(judged, table["verdict"], why):
        lines += [f"### {claim.claim}: {verdict}", "", f"{claim.where}. Rule: {claim.rule}.", "",
                  f"The paper: {theirs or '—'}", ""]
        lines += [f"- {MARK[bool(ok)]} {text}" for text, ok in checks] or ["- no item of this run applies"]
        if reason is not None:
            lines += ["", f"Why: {reason.cell}.", "", *(f"- {item}" for item in reason.items),
                      *(["", *(f"- {note}" for note in reason.notes)] if reason.notes else [])]
        lines.append("")
    return lines


def markdown(judged: list[tuple[Claim, str, Checks]], table: pd.DataFrame, why: list[Reason | None],
             caption: str) -> str:
    """The findings' Markdown: ``caption``, the summary table, ``plain``, then ``details``.

    Args:
        judged: ``evaluate.findings.judge_all``'s result.
        table: the findings.
        why: each claim's reason or None, in the same order.
        caption: the paragraph above the table.

    Returns:
        The text, ending in a newline.
    """
    said = plain(table, why)
    return "\n".join([caption, "", summary(table).to_markdown(index=False), "",
                      *(["Why the claims that do not hold do not:", "", *said, ""] if said else []),
                      "Each claim's checks, one per item it applies to:", "",
                      *details(judged, table, why)]).rstrip() + "\n"
