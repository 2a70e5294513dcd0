"""The ``prune-cls`` stage: token reduction in a frozen CLS model (paper §7.1, Table 2 top,
Tables 10 and 12, the k-NN accuracy of App. H).

For every method, ratio η and seed, the CLS embedding with tokens reduced after ``layer`` is
compared with the unreduced one: degradation ×100 = 100·(1 − cos). The model runs in float32, as
the paper's models do. Settings:
each domain at the base resolution, and the first domain at the further resolutions. On the
base setting the pruned embeddings are also classified by weighted k-NN against the unpruned
embeddings of the training split. Every per-image value behind the table's means, intervals and
paired tests is published beside it (``prune.protocol.per_image``), and the table is computed
from those rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F_

from taskgeom.artifacts.atomic import write_json
from taskgeom.artifacts.tables import write_table
from taskgeom.artifacts.values import write_values
from taskgeom.data.batches import digest_of
from taskgeom.evaluate.knn import knn_correct
from taskgeom.models.host import run_decoder
from taskgeom.pipeline.runtime import StageContext
from taskgeom.prune.cls_merge import merged_forward_from, unreduced_prefix
from taskgeom.prune.protocol import (
    batched,
    by_method,
    generator,
    load_host,
    load_learned,
    per_image,
    role_batch,
    seed_runs,
    settings,
    summary_rows,
    write_degradation,
)
from taskgeom.prune.redundancy import NEAR_DUPLICATE, near_duplicate_share

UNTESTED = ("p_vs_", "sd_diff_vs_")  # k-NN accuracy rows carry no paired test


def write_dvc_files(ctx: StageContext, rows: list[dict], domain: str, resolution: int) -> None:
    """CLS degradation ×100 per method at each η on the base setting, the mean over seeds and
    images (a DVC metric, ``cls_degradation.<method>.eta<100η>``, and a DVC plot against η)."""
    base = [r for r in rows
            if r["metric"] == "cls_degradation" and (r["domain"], r["resolution"]) == (domain, resolution)]
    write_degradation(ctx.outputs, "cls_degradation", base, ctx.provenance())


def run(ctx: StageContext) -> None:
    name, p = ctx.wildcard, ctx.params["prune"]
    cfg = p["cls"][name]
    boot = ctx.params["learn"]["bootstrap"]
    dtype = torch.float32
    host, base = load_host(ctx.inputs, ctx.device, dtype)
    base_res, count = p["resolutions"][0], cfg.get("images", p["images"])
    learned = load_learned(ctx.inputs, p["seeds"], base, ctx.device, dtype, spn=True)
    embed = lambda x: run_decoder(host, cfg["decoder"], x.to(ctx.device, dtype)).cpu()
    sources = ctx.params["sources"]
    train = role_batch(ctx.inputs, sources, host, "bank", base_res, p["knn"]["bank_images"], "prune.knn.bank_images")[0]
    bank, bank_labels = batched(embed, train.x, p["batch_size"]), train.labels
    rows, tidy, seen = [], [], {}
    for domain, res in settings(p):
        data, source = role_batch(ctx.inputs, sources, host, domain, res, count, "prune.images")
        x, labels = data.x, data.labels
        seen[f"{domain}@{res}"] = {"source": source.describe(), "input_sha256": digest_of(x)}
        y0 = batched(embed, x, p["batch_size"])
        # the blocks before the reduction, once per batch for every method, ratio and seed
        prefixes = [unreduced_prefix(host, x[i:i + p["batch_size"]].to(ctx.device, dtype), cfg["layer"])
                    for i in range(0, len(x), p["batch_size"])]
        base_setting = (domain, res) == (p["domains"][0], base_res)
        if base_setting:
            redundancy = near_duplicate_share(host, x, cfg["layer"], p["batch_size"], ctx.device)
            unpruned = float(knn_correct(bank, bank_labels, y0, labels, p["knn"]["k"],
                                         p["knn"]["temperature"]).double().mean())
        for ratio in p["ratios"]:
            values, correct = {}, {}
            for method in cfg["methods"]:
                per_seed, hits = [], []
                for seed, computed in seed_runs(method, p["seeds"]):
                    if computed:
                        gen = generator(seed, int(ratio * 1000), res)
                        y = torch.cat([merged_forward_from(host, cfg["decoder"], prefix, cfg["layer"], method, ratio,
                                                           learned[seed], gen).cpu() for prefix in prefixes])
                        deg = (100.0 * (1.0 - F_.cosine_similarity(y, y0, dim=1))).numpy()
                        hit = knn_correct(bank, bank_labels, y, labels, p["knn"]["k"],
                                          p["knn"]["temperature"]).numpy() if base_setting else None
                    per_seed.append(deg)
                    hits.append(hit)
                values[method] = np.stack(per_seed)
                if base_setting:
                    correct[method] = np.stack(hits).astype(np.float64)
            common = {"model": name, "domain": domain, "resolution": res, "ratio": ratio}
            tidy.append(per_image(values, p["seeds"], {**common, "metric": "cls_degradation"}))
            rows += [{**common, "metric": "cls_degradation", **r} for r in summary_rows(by_method(tidy[-1]), boot)]
            if base_setting:
                tidy.append(per_image(correct, p["seeds"], {**common, "metric": "knn_top1"}))
                rows += [{**common, "metric": "knn_top1", **{k: v for k, v in r.items() if not k.startswith(UNTESTED)}}
                         for r in summary_rows(by_method(tidy[-1]), boot)]
            ctx.log.info("%s %s@%d η=%.2f: %s", name, domain, res, ratio,
                         ", ".join(f"{m} {v.mean():.3g}" for m, v in values.items()))
    write_values(pd.concat(tidy, ignore_index=True), ctx.outputs["values"], provenance=ctx.provenance())
    write_table(pd.DataFrame(rows), ctx.outputs["table"], provenance=ctx.provenance())
    write_json(ctx.outputs["summary"], {"model": name, **cfg, "knn_top1_unpruned": unpruned,
                                        "images": count, "seeds": p["seeds"],
                                        "near_duplicate_keys": {"layer": cfg["layer"], "threshold": NEAR_DUPLICATE,
                                                                "share": redundancy},
                                        "provenance": {**ctx.provenance(), "input": seen}})
    write_dvc_files(ctx, rows, p["domains"][0], base_res)
