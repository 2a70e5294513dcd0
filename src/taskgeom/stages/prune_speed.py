"""The ``prune-speed`` stage: the cost of hard prune + LLF against the unpruned model, for every
method, ratio, schedule and resolution — theoretical FLOPs (scoring and reinsertion included)
and measured wall-clock time on this machine. FLOPs are deterministic; wall-clock times are
medians of ``prune.speed.repeats`` interleaved runs, so their ratios are the figures to compare
and they differ from machine to machine."""

from __future__ import annotations

import pandas as pd

from taskgeom.artifacts.tables import write_table
from taskgeom.evaluate.cost import count_flops, interleaved_wall_clock
from taskgeom.models.host import run_decoder
from taskgeom.pipeline.runtime import StageContext, machine
from taskgeom.prune.llf import pruned_forward
from taskgeom.prune.protocol import generator, load_host, load_learned, role_batch, schedule_name


def run(ctx: StageContext) -> None:
    name = ctx.wildcard
    p = ctx.params["prune"]
    cfg = p["dense"][name]
    host, base = load_host(ctx.inputs, ctx.device)
    learned = load_learned(ctx.inputs, p["seeds"][:1], base, ctx.device)[p["seeds"][0]]
    rows = []
    for res in p["resolutions"]:
        x = role_batch(ctx.inputs, ctx.params["sources"], host, p["domains"][0], res, p["speed"]["images"],
                       "prune.speed.images")[0].x.to(ctx.device)
        unpruned = lambda b=x: run_decoder(host, cfg["decoder"], b)
        base_flops = count_flops(lambda: unpruned(x[:1]), host)
        for schedule in cfg["schedules"]:
            for ratio in p["ratios"]:
                fns = {"unpruned": unpruned}
                for method in cfg["methods"]:
                    fns[method] = (lambda b=x, m=method: pruned_forward(
                        host, cfg["decoder"], b, schedule, m, ratio, True, learned, generator(0)))
                times = interleaved_wall_clock(fns, p["speed"]["repeats"])
                for method in cfg["methods"]:
                    flops = count_flops(lambda m=method: fns[m](x[:1]), host)
                    rows.append({"model": name, "resolution": res, "schedule": schedule_name(schedule), "ratio": ratio,
                                 "method": method, "flops_per_image": flops, "flops_saved": 1.0 - flops / base_flops,
                                 "seconds": times[method], "seconds_unpruned": times["unpruned"],
                                 "speedup": times["unpruned"] / times[method]})
                ctx.log.info("%s @%d %s η=%.2f: %s", name, res, schedule_name(schedule), ratio,
                             ", ".join(f"{m} {times['unpruned'] / times[m]:.2f}×" for m in cfg["methods"]))
    table = pd.DataFrame(rows)
    table["machine"] = machine(ctx.device)
    table["batch"] = p["speed"]["images"]
    write_table(table, ctx.outputs["table"], provenance=ctx.provenance())
