"""The zoo stage learns, and resumes after an interruption to the same weights."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from taskgeom.artifacts.tables import read_table
from taskgeom.models import train, zoo
from taskgeom.pipeline.registry import WORLD_FILES
from taskgeom.pipeline.runtime import StageContext
from taskgeom.stages import fetch, zoo_table
from taskgeom.stages import sources as sources_stage
from taskgeom.stages import zoo as zoo_stage

pytestmark = pytest.mark.slow  # trains tiny zoo models for tens of steps

WORLD = {"seed": 3, "resolution": 32, "eval_resolutions": [], "splits": {"train": 96, "val": 4, "test": 32},
         "multiview": {"views": 2, "train": 16, "test": 8}, "num_objects": [3, 4], "fov_deg": [45.0, 60.0],
         "room_fov_deg": [50.0, 50.0], "room_share": 0.4, "chunk": 32}
MODELS = {
    "tiny-cls": dict(kind="cls", embed_dim=32, depth=2, num_heads=2, patch_size=8),
    "tiny-dpt": dict(kind="dpt", embed_dim=32, depth=2, num_heads=2, patch_size=8, read_layers=[0, 1, 1, 1],
                     head_features=16),
    "tiny-trunk": dict(kind="trunk", embed_dim=32, depth=2, num_heads=2, patch_size=8, read_layers=[0, 1, 1, 1],
                       head_features=16),
    "tiny-mv": dict(kind="multiview", embed_dim=32, depth=2, num_heads=2, patch_size=8, read_layers=[0, 1, 1, 1],
                    head_features=16),
}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("world")
    outputs = {k: root / Path(v).name for k, v in WORLD_FILES.items()}
    outputs |= {"summary_csv": root / "summary.csv", "summary_md": root / "summary.md",
                "figure_png": root / "world_samples.png", "figure_pdf": root / "world_samples.pdf"}
    fetch.run(StageContext("fetch", {}, outputs, {"world": WORLD}))
    return outputs


def world_sources(world: dict[str, Path]) -> dict:
    """A world source per split of the test world, by the split's name."""
    return {split: {"kind": "world", "split": split, "path": str(world[split])}
            for split in ("train", "test", "mv_train", "mv_test")}


def zoo_inputs(world: dict[str, Path], train: str, test: str) -> dict[str, Path]:
    """The ``sources`` stage's index of the ``train`` and ``test`` world sources (once)."""
    inputs = {}
    for role, split in (("train", train), ("test", test)):
        index = world["train"].parent / f"sources/{split}.json"
        if not index.exists():
            sources_stage.run(StageContext("sources", {}, {"index": index}, {"sources": world_sources(world)}, split))
        inputs[f"source_{role}"] = index
    return inputs


def zoo_context(world: dict[str, Path], out: Path, name: str, **train_cfg) -> StageContext:
    splits = ("mv_train", "mv_test") if name == "tiny-mv" else ("train", "test")
    cfg = MODELS[name] | {"steps": 60, "batch_size": 16, "lr": 2e-3, "weight_decay": 0.05, "seed": 0,
                          "sources": dict(zip(("train", "test"), splits))} | train_cfg
    outputs = {"weights": out / "model.safetensors", "config": out / "config.json", "metrics": out / "metrics.json",
               "curve": out / "curve.csv"}
    return StageContext("zoo", zoo_inputs(world, *splits), outputs,
                        {"zoo": {name: cfg}, "device": "cpu", "sources": world_sources(world)}, name,
                        log=logging.getLogger("test"))


def test_depth_model_learns(world, tmp_path: Path):
    ctx = zoo_context(world, tmp_path, "tiny-dpt", steps=120)
    zoo_stage.run(ctx)
    losses = read_table(ctx.outputs["curve"])["train_loss"]
    assert losses.iloc[-1] < 0.7 * losses.iloc[0]  # training loss falls
    metrics = json.loads(ctx.outputs["metrics"].read_text())["metrics"]
    assert metrics["abs_rel"] < metrics["baseline_abs_rel"]  # held-out, against the mean-depth map


def test_trunk_learns_both_tasks_and_reports_each_family(world, tmp_path: Path):
    """One trunk, two heads: the joint loss falls, depth beats the mean-depth map on the held-out
    scenes, and the depth metrics are reported per family; its decoders share the blocks."""
    ctx = zoo_context(world, tmp_path, "tiny-trunk", steps=120)
    zoo_stage.run(ctx)
    losses = read_table(ctx.outputs["curve"])["train_loss"]
    assert losses.iloc[-1] < 0.8 * losses.iloc[0]
    metrics = json.loads(ctx.outputs["metrics"].read_text())["metrics"]
    assert metrics["abs_rel"] < metrics["baseline_abs_rel"]
    assert {"accuracy", "outdoor_delta1", "room_delta1", "baseline_room_delta1", "room_delta1_median_scaled",
            "baseline_room_delta1_median_scaled"} <= set(metrics)
    better = {row["metric"]: row["better"] for row in zoo_table.rows(json.loads(ctx.outputs["metrics"].read_text()))}
    assert better["room_abs_rel"] == better["abs_rel"] == "lower" and better["room_delta1"] == "higher"
    model = zoo.load(ctx.outputs["weights"], ctx.outputs["config"])
    assert model.decoders == ("cls", "logits", "depth") and model.decoder_layers("cls") == (1,)
    x = torch.rand(2, 3, 32, 32)
    out = model(x)
    assert out["logits"].shape == (2, zoo.NUM_CLASSES) and out["depth"].shape == (2, 32, 32)
    from taskgeom.models.host import run_decoder
    torch.testing.assert_close(run_decoder(model, "logits", x), out["logits"])
    torch.testing.assert_close(run_decoder(model, "depth", x), out["depth"].flatten(1))
    assert run_decoder(model, "cls", x).shape == (2, 32)


def test_classifier_and_multiview_losses_fall(world, tmp_path: Path):
    for name in ("tiny-cls", "tiny-mv"):
        ctx = zoo_context(world, tmp_path / name, name, steps=60)
        zoo_stage.run(ctx)
        losses = read_table(ctx.outputs["curve"])["train_loss"]
        assert losses.iloc[-1] < losses.iloc[0], name


def test_checkpoint_round_trip_gives_the_same_model(world, tmp_path: Path):
    ctx = zoo_context(world, tmp_path, "tiny-mv", steps=5)
    zoo_stage.run(ctx)
    model = zoo.load(ctx.outputs["weights"], ctx.outputs["config"])
    config = json.loads(ctx.outputs["config"].read_text())
    assert config["architecture"]["img_size"] == 32 and "code_version" in config["provenance"]
    saved = load_file(str(ctx.outputs["weights"]))
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
    fresh = zoo.seeded(0, config["architecture"])  # the trained weights are not the initialisation
    assert not all(torch.equal(v, saved[k]) for k, v in fresh.state_dict().items())
    with pytest.raises(FileNotFoundError, match="checkpoint file missing"):
        zoo.load(tmp_path / "absent.safetensors", ctx.outputs["config"])


class Interrupted(Exception):
    pass


def test_interrupted_training_resumes_to_identical_weights(world, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(zoo_stage, "CHECKPOINT_EVERY", 10)
    whole = zoo_context(world, tmp_path / "whole", "tiny-dpt", steps=30)
    zoo_stage.run(whole)

    calls = {"n": 0}
    real_loss = train.TASKS["dpt"].loss

    def dying_loss(model, batch):
        calls["n"] += 1
        if calls["n"] == 16:  # after the checkpoint at step 10
            raise Interrupted
        return real_loss(model, batch)

    resumed = zoo_context(world, tmp_path / "resumed", "tiny-dpt", steps=30)
    monkeypatch.setattr(train.TASKS["dpt"], "loss", dying_loss)
    with pytest.raises(Interrupted):
        zoo_stage.run(resumed)
    assert not resumed.outputs["weights"].exists()
    assert (tmp_path / "resumed" / ".partial" / "train_state.safetensors").exists()
    monkeypatch.setattr(train.TASKS["dpt"], "loss", real_loss)
    zoo_stage.run(resumed)
    a, b = load_file(str(whole.outputs["weights"])), load_file(str(resumed.outputs["weights"]))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert whole.outputs["curve"].read_bytes() == resumed.outputs["curve"].read_bytes()
    assert not (tmp_path / "resumed" / ".partial" / "train_state.safetensors").exists()


@pytest.mark.parametrize("adapter, metric", [("dinov2-b14", "knn_accuracy"), ("depth-anything-v2", "abs_rel")])
def test_paper_model_is_imported_into_the_zoo_and_evaluated(world, tmp_path: Path, adapter: str, metric: str):
    from taskgeom.models.adapters import PAPER_MODELS, build_paper_model

    spec = PAPER_MODELS[adapter]
    torch.manual_seed(0)
    host = build_paper_model(adapter, tiny=True)
    if adapter == "dinov2-b14":
        weights = tmp_path / "dinov2.safetensors"
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in host.vit.state_dict().items()}, str(weights))
        size = spec.tiny["img_size"]
    else:
        weights = tmp_path / "depth-anything"
        host.model.save_pretrained(weights)
        size = spec.tiny["image_size"]
    cfg = {"kind": "pretrained", "adapter": adapter, "path": str(weights), "img_size": size, "batch_size": 8,
           "overrides": dict(spec.tiny), "sources": {"train": "train", "test": "test"}}
    out = tmp_path / "zoo"
    outputs = {"weights": out / "model.safetensors", "config": out / "config.json", "metrics": out / "m.json",
               "curve": out / "curve.csv"}
    zoo_stage.run(StageContext("zoo", zoo_inputs(world, "train", "test"), outputs,
                               {"zoo": {"paper": cfg}, "device": "cpu", "sources": world_sources(world)}, "paper"))
    result = json.loads(outputs["metrics"].read_text())
    metrics, seen = result["metrics"], result["provenance"]["input"]
    assert metric in metrics and f"baseline_{metric}" in metrics
    assert seen["source"]["name"] == "test" and seen["source"]["items"] == 32
    assert result["test_scenes"] == 32 and len(seen["input_sha256"]) == 64
    reloaded = zoo.load(outputs["weights"], outputs["config"])
    x = torch.randn(2, 3, size, size)
    from taskgeom.models.host import run_decoder

    decoder = host.decoders[0]
    torch.testing.assert_close(run_decoder(reloaded, decoder, x), run_decoder(host, decoder, x))


def test_paper_model_without_weights_fails_at_once_naming_it(world, tmp_path: Path):
    cfg = {"kind": "pretrained", "adapter": "clip-b16", "path": None, "img_size": 224, "batch_size": 8,
           "sources": {"train": "train", "test": "test"}}
    outputs = {k: tmp_path / k for k in ("weights", "config", "metrics", "curve")}
    with pytest.raises(FileNotFoundError, match="paper model 'clip-b16'.*weights not found"):
        zoo_stage.run(StageContext("zoo", zoo_inputs(world, "train", "test"), outputs,
                                   {"zoo": {"clip": cfg}, "device": "cpu", "sources": world_sources(world)}, "clip"))
    assert not any(p.exists() for p in outputs.values())
