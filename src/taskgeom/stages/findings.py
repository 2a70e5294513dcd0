"""The ``findings`` stage: each of the paper's claims that the run tests, with the paper's figure,
ours and a verdict by the claim's stated rule (``taskgeom.evaluate.findings``), from the tables
the run wrote; REPORT.md shows it first."""

from __future__ import annotations

from collections.abc import Callable

from taskgeom.artifacts.tables import read_table, write_table
from taskgeom.evaluate.findings import CLAIMS, findings
from taskgeom.pipeline.runtime import StageContext

CAPTION = ("The paper's claims that this run tests: the paper's figure, ours, how many of the items each claim "
           "applies to meet its rule, and the verdict (holds: all; does not hold: none; mixed: some; not tested: "
           "the run has no such item), computed from the tables below by the rule stated in each row.")


def multiview(zoo: dict) -> Callable[[str], bool]:
    """Whether a zoo model reads view groups (the tiny multi-view model, or VGGT)."""
    return lambda model: zoo.get(model, {}).get("kind") == "multiview" or zoo.get(model, {}).get("adapter") == "vggt"


def run(ctx: StageContext) -> None:
    tables = {name: read_table(ctx.inputs[name]) for name in sorted({n for c in CLAIMS for n in c.tables})}
    table = findings(tables, multiview(ctx.params["zoo"]))
    for row in table.itertuples():
        ctx.log.info("%s: %s (%s)", row.claim, row.verdict, row.checks)
    write_table(table, ctx.outputs["csv"], ctx.outputs["md"], ctx.outputs["tex"], caption=CAPTION,
                provenance=ctx.provenance())
