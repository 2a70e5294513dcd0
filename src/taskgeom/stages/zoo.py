"""The ``zoo`` stage: train one tiny model on its ``train`` source (a world split), evaluate
it on its ``test`` source against a trivial baseline, and save it; or import one of the
paper's models from its local weights and evaluate it zero-shot on its sources
(``models/pretrained.py``), recording what it saw and the architecture its checkpoint chose.

Training is resumable and deterministic: the batch of step s depends only on
(seed, s), and every ``CHECKPOINT_EVERY`` steps the model, the optimizer and the
loss curve go to one safetensors file under ``.partial/``, so a killed run restarts
there and ends with the same weights as an uninterrupted one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from taskgeom.artifacts import metrics as dvc_files
from taskgeom.artifacts.atomic import write_json
from taskgeom.artifacts.checkpoints import CheckpointError
from taskgeom.artifacts.tables import write_table
from taskgeom.data.batches import InputDigest
from taskgeom.data.digests import Digests
from taskgeom.data.indexed import open_indexed
from taskgeom.data.sources import Source, SourceError, world_arrays
from taskgeom.finite import check_step
from taskgeom.models import preprocess, pretrained
from taskgeom.models.host import param_count
from taskgeom.models.train import (
    TASKS,
    Task,
    batch_items,
    learning_rate,
    load_state,
    mv_targets,
    sample_batch,
    save_state,
)
from taskgeom.models.zoo import architecture, save, seeded
from taskgeom.pipeline.runtime import StageContext

CHECKPOINT_EVERY = 100
LOG_EVERY = 25


def train(ctx: StageContext, model: nn.Module, task: Task, data: dict[str, np.ndarray], cfg: dict,
          partial: Path, max_depth: float) -> list[tuple[int, float]]:
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "pos_embed" not in n and "token" not in n]
    other = [p for n, p in model.named_parameters() if not any(p is q for q in decay)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": other, "weight_decay": 0.0}], lr=cfg["lr"])
    tag = json.dumps(cfg, sort_keys=True)
    start, curve, window = load_state(partial, model, opt, tag)
    if start:
        ctx.log.info("resuming at step %d of %d from %s", start, cfg["steps"], partial)
    model.train()
    for step in ctx.progress(range(start, cfg["steps"]), desc=f"train {ctx.wildcard}", total=cfg["steps"] - start):
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, cfg["steps"], cfg["lr"])
        batch = sample_batch(data, step, cfg["seed"], cfg["batch_size"], task.flip)
        b = {k: torch.as_tensor(v).to(ctx.device) for k, v in batch.items()} | {"max_depth": max_depth}
        loss = task.loss(model, b)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        items = lambda: batch_items(data, step, cfg["seed"], cfg["batch_size"]).tolist()  # noqa: B023 (called at once)
        check_step(f"zoo {ctx.wildcard}", step, loss, norm, lambda: f"of train-source items {items()}")
        opt.step()
        window.append(loss.item())
        if (step + 1) % LOG_EVERY == 0 or step + 1 == cfg["steps"]:
            curve.append((step + 1, float(np.mean(window))))
            ctx.log.info("step %d/%d loss %.4f", step + 1, cfg["steps"], curve[-1][1])
            window = []
        if (step + 1) % CHECKPOINT_EVERY == 0 and step + 1 < cfg["steps"]:
            save_state(partial, model, opt, step + 1, curve, window, tag)
    model.eval()
    return curve


def task_source(ctx: StageContext, role: str, task: Task) -> Source:
    """The indexed ``role`` source of a tiny model: a world split of the kind its task reads."""
    source = open_indexed(ctx.inputs[f"source_{role}"], ctx.params.get("sources"))
    if (source[0].image.ndim == 4) != task.views:
        needs = "view groups (a multi-view split)" if task.views else "single images"
        raise SourceError(f"zoo.{ctx.wildcard}.sources.{role}: {source.name!r} does not hold {needs}")
    return source


def load_task_data(source: Source, task: Task, what: str) -> dict[str, np.ndarray]:
    data = world_arrays(source, task.keys, what)
    return mv_targets(data) if "cam_to_world" in task.keys else data


def write_dvc_files(ctx: StageContext, metrics: dict[str, float], curve: list[tuple[int, float]]) -> None:
    """The held-out metrics (a DVC metric) and the training curve (a DVC plot)."""
    dvc_files.write_metrics(ctx.outputs.get("headline"), metrics, ctx.provenance())
    rows = [{"step": s, "train_loss": v} for s, v in curve]
    dvc_files.write_plot(ctx.outputs.get("loss_plot"), rows, ctx.provenance())


def run_pretrained(ctx: StageContext, cfg: dict) -> None:
    """Import one of the paper's models from its local weights and evaluate it zero-shot."""
    try:
        host = pretrained.load(cfg, ctx.device)
    except CheckpointError as err:  # the checkpoint's config disagrees with the entry's overrides
        raise CheckpointError(f"zoo.{ctx.wildcard}: {err}") from None
    entry = pretrained.architecture(cfg, host)
    train, test = (preprocess.open_for_host(ctx.inputs[f"source_{role}"], ctx.params.get("sources"), host, entry,
                                            f"zoo.{ctx.wildcard}.sources.{role}")[0] for role in ("train", "test"))
    prep, digest = preprocess.for_host(host, entry), InputDigest()
    metrics = pretrained.evaluate(host, train, test, prep, cfg["batch_size"], ctx.device, digest)
    metrics = {k: round(v, 6) for k, v in metrics.items()}
    ctx.log.info("%s zero-shot on %s: %s", ctx.wildcard, test.name, metrics)
    provenance = ctx.provenance() | {"input": preprocess.seen(test, prep, digest)}
    with Digests() as digests:  # the checkpoint's identity is its content (pipeline/identity.py), not its path
        weights = digests.tree_sha256(Path(cfg["path"]).expanduser())
    save(host, entry, ctx.outputs["weights"], ctx.outputs["config"],
         ctx.provenance(), {"parameters": param_count(host), "weights_sha256": weights})
    write_json(ctx.outputs["metrics"], {"model": ctx.wildcard, "kind": "pretrained", "metrics": metrics,
                                        "parameters": param_count(host), "steps": 0, "provenance": provenance,
                                        "test_scenes": len(test)})
    write_table(pd.DataFrame(columns=["step", "train_loss"]), ctx.outputs["curve"], provenance=ctx.provenance())
    write_dvc_files(ctx, metrics, [])


def run(ctx: StageContext) -> None:
    name = ctx.wildcard
    cfg = ctx.params["zoo"][name]
    torch.use_deterministic_algorithms(True, warn_only=True)
    if cfg["kind"] == "pretrained":
        return run_pretrained(ctx, cfg)
    task = TASKS[cfg["kind"]]
    train_source, test_source = (task_source(ctx, role, task) for role in ("train", "test"))
    train_data = load_task_data(train_source, task, f"zoo.{name}.sources.train")
    test_data = load_task_data(test_source, task, f"zoo.{name}.sources.test")
    max_depth = train_source.max_depth
    img_size = train_data["rgb"].shape[-2]
    arch = architecture(cfg, img_size)
    model = seeded(cfg["seed"], arch).to(ctx.device)
    ctx.log.info("%s: %s, %d parameters, %d training scenes", name, cfg["kind"], param_count(model),
                 len(train_data["label"]))
    partial = ctx.outputs["weights"].parent / ".partial" / "train_state.safetensors"
    partial.parent.mkdir(parents=True, exist_ok=True)
    curve = train(ctx, model, task, train_data, cfg, partial, max_depth)
    metrics = task.evaluate(model, test_data, train_data, max_depth)
    metrics = {k: round(v, 6) for k, v in metrics.items()}
    ctx.log.info("%s held-out: %s", name, metrics)
    meta = {"parameters": param_count(model), "train_scenes": len(train_data["label"]),
            "test_scenes": len(test_data["label"])}
    save(model, arch, ctx.outputs["weights"], ctx.outputs["config"], ctx.provenance(), meta)
    write_json(ctx.outputs["metrics"], {"model": name, "kind": cfg["kind"], "metrics": metrics,
                                        "provenance": ctx.provenance(),
                                        "parameters": param_count(model), "steps": cfg["steps"],
                                        "test_scenes": len(test_data["label"])})
    write_table(pd.DataFrame(curve, columns=["step", "train_loss"]), ctx.outputs["curve"], provenance=ctx.provenance())
    write_dvc_files(ctx, metrics, curve)
    partial.unlink(missing_ok=True)
