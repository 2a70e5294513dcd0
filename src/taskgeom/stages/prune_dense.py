"""The ``prune-dense`` stage: hard prune + Last-Layer Fusion in a frozen dense-depth model
(paper §7.2, Table 2 bottom, Tables 4 and 5, App. E.1), and the maps of the paper's Figure 2
(where the first domain's images are those of the head's probe's cached test targets).

For every schedule (the blocks after which tokens are removed), method, ratio η and seed, the
pruned depth is compared with the unpruned depth (additional SILog ×100) and, for sources with
ground truth, with the ground truth (SILog ×100), over pixels with valid depth (every pixel
without ground truth). Settings: each domain at the base resolution (the first of
``prune.resolutions``), the first domain at the further resolutions, all with LLF; and the base
setting without LLF. Every per-image value behind the table's means, intervals and paired tests
is published beside it (``prune.protocol.per_image``), and the table is computed from those rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from taskgeom.artifacts.atomic import write_json
from taskgeom.artifacts.tables import write_table
from taskgeom.artifacts.values import write_values
from taskgeom.data.batches import digest_of
from taskgeom.evaluate.stats import spearman
from taskgeom.evaluate.tasks import silog, valid_depth
from taskgeom.metric.targets import TargetFile
from taskgeom.models import zoo
from taskgeom.models.host import forward_states, run_decoder
from taskgeom.pipeline.runtime import StageContext
from taskgeom.prune.blocks import attention_block
from taskgeom.prune.llf import pruned_forward
from taskgeom.prune.protocol import (
    batched,
    by_method,
    generator,
    load_host,
    load_learned,
    per_image,
    role_batch,
    schedule_name,
    seed_runs,
    settings,
    summary_rows,
    write_degradation,
)
from taskgeom.prune.redundancy import NEAR_DUPLICATE, near_duplicate_share
from taskgeom.prune.tome import tome_score

EXAMPLES = 4  # test images of the Figure 2 maps (fewer where the batch or the cached test split holds fewer)


def shows_targets(ctx: StageContext, cfg: dict, resolution: int) -> bool:
    """Whether the first domain's base images are the head's probe's cached test images (its test
    source at the zoo model's side), so that Figure 2's maps can be scored against their targets."""
    probe = ctx.params["learn"]["probes"][cfg["probe"]]
    return (probe["sources"]["test"] == cfg["sources"][ctx.params["prune"]["domains"][0]]
            and resolution == int(zoo.entry(ctx.inputs["config"])["img_size"]))


def figure_maps(ctx: StageContext, host, cfg: dict, learned, base, x: torch.Tensor, depth: np.ndarray) -> dict:
    """Importance head and ToMe score maps at the head's probe layer, the unpruned depth, and
    each map's Spearman ρ against the Jacobian-derived target cached for those test images."""
    target = TargetFile.open(ctx.inputs["targets"])
    probe = ctx.params["learn"]["probes"][cfg["probe"]]
    if probe.get("layers") is None or len(probe["layers"]) != 1:
        raise ValueError(f"prune.dense: probe {cfg['probe']!r} must read one layer for the importance maps")
    layer = probe["layers"][0]
    key = f"q{ctx.params['learn']['targets']['power_iters']}/importance"
    cached = target.read(("features", key), slice(0, min(EXAMPLES, len(x))))
    n = len(cached["features"])  # the first test images that both the batch and the cached split hold
    with torch.no_grad():
        states, tokens_ctx = forward_states(host, x[:n], layer)
        if not np.allclose(states[layer].cpu().numpy(), cached["features"], atol=1e-4):
            raise ValueError(f"{target.path}: its test features are not this model's layer-{layer} features of the "
                             "first test images; rebuild the targets")
        idx = torch.arange(states[layer].shape[1]).expand(n, -1)
        importance = learned.importance(states[layer], idx, base)[:, base.prefix:]
        before = states[layer - 1] if layer > 0 else host.embed(x[:n])[0]
        _, stats = attention_block(host, layer, tokens_ctx).with_stats(before)
        tome = tome_score(stats.keys)[:, base.prefix:]
    truth = cached[key][:, base.prefix:]
    maps = {"importance": importance.numpy(), "tome_score": tome.numpy()}
    return {"layer": layer, "grid": [base.rows, base.cols], "depth": depth[:n].tolist(),
            "target": truth.tolist(), **{k: v.tolist() for k, v in maps.items()},
            "rho": {k: [spearman(a, b) for a, b in zip(v, truth)] for k, v in maps.items()}}


def write_dvc_files(ctx: StageContext, rows: list[dict], domain: str, resolution: int, schedule: str) -> None:
    """Additional SILog ×100 per method at each η on the base setting with the first schedule and
    LLF, the mean over seeds and images (a DVC metric, ``add_silog.<method>.eta<100η>``, and a DVC
    plot against η)."""
    base = [r for r in rows if r["metric"] == "add_silog" and r["llf"] and r["schedule"] == schedule
            and (r["domain"], r["resolution"]) == (domain, resolution)]
    write_degradation(ctx.outputs, "add_silog", base, ctx.provenance())


def run(ctx: StageContext) -> None:
    name = ctx.wildcard
    p = ctx.params["prune"]
    cfg = p["dense"][name]
    boot = ctx.params["learn"]["bootstrap"]
    host, base = load_host(ctx.inputs, ctx.device)
    base_res, count = p["resolutions"][0], cfg.get("images", p["images"])
    learned = load_learned(ctx.inputs, p["seeds"], base, ctx.device)
    decoder = cfg["decoder"]
    rows, tidy, examples, seen = [], [], None, {}
    runs = [(d, r, True) for d, r in settings(p)] + [(p["domains"][0], base_res, False)]
    for domain, res, llf in runs:
        batch, source = role_batch(ctx.inputs, ctx.params["sources"], host, domain, res, count, "prune.images",
                                   depth=True)
        x, gt = batch.x, batch.depth
        seen[f"{domain}@{res}"] = {"source": source.describe(), "input_sha256": digest_of(x)}
        depth0 = batched(lambda b: run_decoder(host, decoder, b.to(ctx.device)).cpu(), x, p["batch_size"])
        depth0 = depth0.view(len(x), *x.shape[-2:])
        shape = depth0.shape
        # pixels with valid ground truth; without ground truth (ImageNet), every pixel against the unpruned depth
        mask = valid_depth(gt, source.max_depth) if gt is not None else torch.ones(shape, dtype=torch.bool)
        if (domain, res, llf) == runs[0]:  # ToMe's keys where the first schedule first prunes; Figure 2's maps
            redundancy = near_duplicate_share(host, x, cfg["schedules"][0][0], p["batch_size"], ctx.device)
            if shows_targets(ctx, cfg, res):
                examples = figure_maps(ctx, host, cfg, learned[p["seeds"][0]], base, x, depth0.numpy())
        unpruned_gt = (100.0 * silog(depth0, gt, mask)).mean().item() if gt is not None else None
        for schedule in cfg["schedules"]:
            for ratio in p["ratios"]:
                add, vs_gt = {}, {}
                for method in cfg["methods"]:
                    a, g = [], []
                    for seed, computed in seed_runs(method, p["seeds"]):
                        if computed:
                            gen = generator(seed, int(ratio * 1000), res, len(schedule))
                            depth = batched(lambda b: pruned_forward(
                                host, decoder, b.to(ctx.device), schedule, method, ratio, llf, learned[seed],
                                gen).cpu(),
                                x, p["batch_size"]).view(shape)
                            add_s = (100.0 * silog(depth, depth0, mask)).numpy()
                            gt_s = (100.0 * silog(depth, gt, mask)).numpy() if gt is not None else None
                        a.append(add_s)
                        g.append(gt_s)
                    add[method], vs_gt[method] = np.stack(a), np.stack(g)
                common = {"model": name, "domain": domain, "resolution": res, "schedule": schedule_name(schedule),
                          "llf": llf, "ratio": ratio}
                tidy.append(per_image(add, p["seeds"], {**common, "metric": "add_silog"}))
                rows += [{**common, "metric": "add_silog", **r} for r in summary_rows(by_method(tidy[-1]), boot)]
                if gt is not None:
                    tidy.append(per_image(vs_gt, p["seeds"], {**common, "metric": "silog_gt"}))
                    rows += [{**common, "metric": "silog_gt", "unpruned": unpruned_gt, **r}
                             for r in summary_rows(by_method(tidy[-1]), boot)]
                ctx.log.info("%s %s@%d %s llf=%s η=%.2f: %s", name, domain, res, schedule_name(schedule), llf, ratio,
                             ", ".join(f"{m} {v.mean():.3g}" for m, v in add.items()))
    write_values(pd.concat(tidy, ignore_index=True), ctx.outputs["values"], provenance=ctx.provenance())
    write_table(pd.DataFrame(rows), ctx.outputs["table"], provenance=ctx.provenance())
    write_json(ctx.outputs["summary"], {"model": name, **cfg, "images": count, "seeds": p["seeds"],
                                        "near_duplicate_keys": {"layer": cfg["schedules"][0][0],
                                                                "threshold": NEAR_DUPLICATE, "share": redundancy},
                                        "examples": examples, "provenance": {**ctx.provenance(), "input": seen}})
    write_dvc_files(ctx, rows, p["domains"][0], base_res, schedule_name(cfg["schedules"][0]))
