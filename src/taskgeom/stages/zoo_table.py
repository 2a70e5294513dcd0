"""The ``zoo-table`` stage: each zoo model's held-out metrics beside its trivial baseline."""

from __future__ import annotations

import json

import pandas as pd

from taskgeom.artifacts.tables import write_table
from taskgeom.pipeline.runtime import StageContext

LOWER_IS_BETTER = {"abs_rel", "rot_err_deg", "trans_err_m", "point_err_m"}


def rows(record: dict) -> list[dict]:
    metrics = record["metrics"]
    out = []
    for name, value in metrics.items():
        if name.startswith("baseline_"):
            continue
        baseline = metrics[f"baseline_{name}"]
        lower = any(name == m or name.endswith(f"_{m}") for m in LOWER_IS_BETTER)  # also per family: room_abs_rel
        out.append({
            "model": record["model"], "kind": record["kind"], "parameters": record["parameters"],
            "steps": record["steps"], "test_scenes": record["test_scenes"], "metric": name,
            "value": value, "trivial_baseline": baseline, "better": "lower" if lower else "higher",
            "beats_baseline": (value < baseline) if lower else (value > baseline),
        })
    return out


def run(ctx: StageContext) -> None:
    records = [json.loads(p.read_text()) for p in ctx.inputs["metrics"]]
    table = pd.DataFrame([r for rec in records for r in rows(rec)])
    caption = ("Tiny zoo: held-out metrics against a trivial baseline (majority class; the training "
               "set's mean depth, pose and point map).")
    if any(r["kind"] == "pretrained" for r in records):
        caption += (" The paper's models, zero-shot on their test sources: k-NN accuracy (k = 5, the train source "
                    "as gallery) against the majority class; median-scaled depth against a flat map at the train "
                    "source's median depth; camera errors against the identity pose.")
    write_table(table, ctx.outputs["csv"], ctx.outputs["md"], ctx.outputs["tex"], caption=caption,
                provenance=ctx.provenance())
