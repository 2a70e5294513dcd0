"""The ``findings`` stage: each of the paper's claims that the run tests, with the paper's figure,
ours and a verdict by the claim's stated rule (``taskgeom.evaluate.findings``), from the tables
the run wrote; REPORT.md shows it first. The CSV holds every column; the Markdown and LaTeX lead
with one short phrase per cell (``evaluate.findings_text``), the Markdown then each claim's checks."""

from __future__ import annotations

from collections.abc import Callable

from taskgeom.artifacts.atomic import write_text
from taskgeom.artifacts.tables import read_table, write_table
from taskgeom.evaluate import findings_text
from taskgeom.evaluate.claim import is_multiview
from taskgeom.evaluate.findings import CLAIMS, explain, findings, judge_all
from taskgeom.evaluate.reasons import Context
from taskgeom.pipeline.runtime import StageContext

CAPTION = ("The paper's claims that this run tests: the verdict (holds: every item the claim applies to meets "
           "its rule; does not hold: none does; mixed: some do; not tested: the run has no such item), the paper's "
           "headline figure and how many items meet the rule, computed from the tables below; each claim's rule, "
           "the paper's figures in full and every check follow the table. Why: for a claim that does not hold, the "
           "measurement that decides whether this run could show it (not testable here, the effect smaller than the "
           "test can see, or tested and contrary), by a rule fixed before the run (taskgeom.evaluate.reasons).")


def multiview(zoo: dict) -> Callable[[str], bool]:
    """Whether a zoo model reads view groups (the tiny multi-view model, or VGGT)."""
    return lambda model: is_multiview(zoo.get(model, {}))


def run(ctx: StageContext) -> None:
    tables = {name: read_table(ctx.inputs[name]) for name in sorted({n for c in CLAIMS for n in c.tables})}
    diagnose = ctx.params["diagnose"]
    context = Context(multiview(ctx.params["zoo"]), diagnose["estimator"]["r"], diagnose["regimes"])
    judged = judge_all(tables, context.multiview)
    table = findings(tables, context)
    why = [explain(c, tables, context, v) for c, v in zip(CLAIMS, table["verdict"])]
    for row in table.itertuples():
        ctx.log.info("%s: %s (%s) %s", row.claim, row.verdict, row.checks, row.why)
    write_table(table, ctx.outputs["csv"], provenance=ctx.provenance())
    write_text(ctx.outputs["md"], findings_text.markdown(judged, table, why, CAPTION), ctx.provenance())
    write_text(ctx.outputs["tex"], findings_text.summary(table).to_latex(index=False, caption=CAPTION, escape=True),
               ctx.provenance())
