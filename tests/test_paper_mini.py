"""The paper's probes on files in the paper's formats (``taskgeom fixtures paper-mini``): the
sources stage indexes ImageNet-val's class folders and NYU-Depth-V2's labeled .mat, and
``diagnose`` runs the mini DINOv2 and Depth-Anything-V2 checkpoints on exactly the pixels their
own preprocessing makes of those files (timm's transform for DINOv2)."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before huggingface_hub reads it at import

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from taskgeom.artifacts.checkpoints import CheckpointError
from taskgeom.data.indexed import open_indexed
from taskgeom.models import pretrained, zoo
from taskgeom.pipeline.runtime import StageContext
from taskgeom.stages import diagnose as diagnose_stage
from taskgeom.stages import sources as sources_stage
from taskgeom.stages import zoo as zoo_stage

pytestmark = pytest.mark.slow  # writes the paper-mini files, random weights of the real architectures

SETTINGS = {"images": 2, "estimator": {"r": 4, "num_probes": 8, "power_iters": 1, "seed": 0},
            "dense": {"max_dim": 0, "images": 0}, "power_table": {"q": [0], "images": 0, "reference_q": 2},
            "bootstrap": {"resamples": 20, "level": 0.9, "seed": 0},
            "regimes": {"kappa_high": 0.9, "cv_high": 1.0, "erank_rich": 5.0}}


@pytest.fixture(scope="module")
def mini(paper_mini_files: tuple[Path, dict], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("paper-mini")
    files, manifest = paper_mini_files
    shutil.copytree(files, root / "files")
    return root, manifest


def sources(files: Path) -> dict:
    return {"imagenet-val": {"kind": "imagenet_val", "path": str(files / "imagenet-val"),
                             "subset": {"count": 10, "seed": 0}},
            "nyu-test": {"kind": "nyu_depth_v2", "path": str(files / "nyu/nyu_depth_v2_labeled.mat"),
                         "splits": str(files / "nyu/splits.mat"), "split": "test"}}


def diagnose(root: Path, manifest: dict, model: str, decoder: str, source: str) -> dict:
    """Index ``source``, import ``model`` into the zoo's format, diagnose it at layer 2; its summary."""
    files, params = root / "files", sources(root / "files")
    index = root / f"sources/{source}.json"
    sources_stage.run(StageContext("sources", {}, {"index": index}, {"sources": params}, source))
    entry = manifest["models"][model]
    cfg = {"kind": "pretrained", "adapter": entry["adapter"], "path": str(files / entry["path"]),
           "img_size": entry["img_size"], "batch_size": 4, "overrides": entry["overrides"]}
    weights, config = root / f"zoo/{model}/model.safetensors", root / f"zoo/{model}/config.json"
    host = pretrained.load(cfg, "cpu")
    zoo.save(host, pretrained.architecture(cfg, host), weights, config, provenance={})
    probes = {"p": {"model": model, "decoder": decoder, "layers": [2], "source": source}}
    summary = root / f"diagnose/{model}.json"
    diagnose_stage.run(StageContext(
        "diagnose", {"source": index, "weights": weights, "config": config},
        {"summary": summary, "arrays": summary.with_suffix(".h5")},
        {"diagnose": {**SETTINGS, "probes": probes}, "sources": params}, "p"))
    return json.loads(summary.read_text())


def test_dinov2_is_diagnosed_on_timms_transform_of_the_imagenet_files(mini):
    from timm.data import create_transform, resolve_data_config

    root, manifest = mini
    result = diagnose(root, manifest, "dinov2-b14", "cls", "imagenet-val")
    seen = result["provenance"]["input"]
    source = open_indexed(root / "sources/imagenet-val.json", sources(root / "files"))
    assert len(source) == 10 and len(set(source.labels.tolist())) == 10  # stratified: one per class
    host = zoo.load(root / "zoo/dinov2-b14/model.safetensors", root / "zoo/dinov2-b14/config.json")
    size = manifest["models"]["dinov2-b14"]["img_size"]
    transform = create_transform(**resolve_data_config({"input_size": (3, size, size)}, model=host.vit))
    with Image.open(source.root / source.keys[0]) as first, Image.open(source.root / source.keys[1]) as second:
        pixels = [transform(im.convert("RGB")).numpy() for im in (first, second)]
    assert seen["input_sha256"] == hashlib.sha256(b"".join(p.tobytes() for p in pixels)).hexdigest()
    assert seen["preprocess"]["mode"] == "timm" and result["images"] == 2
    assert np.isfinite(result["summary"]["kappa_cap"]["mean"])


def test_depth_anything_is_diagnosed_on_nyu_frames_at_its_own_resize(mini):
    root, manifest = mini
    result = diagnose(root, manifest, "depth-anything-v2", "depth", "nyu-test")
    seen = result["provenance"]["input"]
    assert seen["preprocess"]["mode"] == "lower_bound" and seen["preprocess"]["multiple"] == 14
    assert seen["source"]["items"] == 8 and seen["source"]["kind"] == "nyu_depth_v2"
    assert result["output_dim"] == manifest["models"]["depth-anything-v2"]["img_size"] ** 2
    assert np.isfinite(result["summary"]["erank"]["mean"])


def zoo_copy(root: Path, manifest: dict, name: str, overrides: dict | None) -> tuple[dict, dict[str, Path]]:
    """Run the zoo stage on the mini Depth-Anything-V2 checkpoint (64 wide: not Base) as entry
    ``name`` with ``overrides`` (None: none given, as for a real Small or Large); its entry and outputs."""
    files, params = root / "files", sources(root / "files")
    index = root / "sources/nyu-test.json"
    sources_stage.run(StageContext("sources", {}, {"index": index}, {"sources": params}, "nyu-test"))
    entry = manifest["models"]["depth-anything-v2"]
    cfg = {"kind": "pretrained", "adapter": "depth-anything-v2", "path": str(files / entry["path"]),
           "img_size": entry["img_size"], "batch_size": 4, "sources": {"train": "nyu-test", "test": "nyu-test"}}
    cfg |= {"overrides": overrides} if overrides is not None else {}
    out = root / "zoo" / name
    outputs = {k: out / f for k, f in (("weights", "model.safetensors"), ("config", "config.json"),
                                        ("metrics", "metrics.json"), ("curve", "curve.csv"))}
    zoo_stage.run(StageContext("zoo", {"source_train": index, "source_test": index}, outputs,
                               {"zoo": {name: cfg}, "sources": params}, name))
    return cfg, outputs


def test_a_depth_anything_checkpoint_of_another_size_is_copied_with_its_architecture(mini):
    root, manifest = mini
    cfg, outputs = zoo_copy(root, manifest, "da-other-size", None)
    copy = zoo.load(outputs["weights"], outputs["config"])  # what targets and diagnose load
    recorded = json.loads(outputs["config"].read_text())["architecture"]["overrides"]
    assert recorded["hidden_size"] == 64 and recorded["neck_hidden_sizes"] == [8, 16, 32, 64]
    size = manifest["models"]["depth-anything-v2"]["img_size"]
    images = torch.rand(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(copy(images), pretrained.load(cfg, "cpu")(images))


def test_a_checkpoint_that_disagrees_with_its_overrides_or_its_copys_config_is_one_line(mini):
    root, manifest = mini
    with pytest.raises(CheckpointError, match=r"^zoo\.da-asked: \S*/depth-anything-v2/config\.json: hidden_size is 64 "
                                              r"where the overrides ask 32; drop overrides\.hidden_size"):
        zoo_copy(root, manifest, "da-asked", {"hidden_size": 32})
    _, outputs = zoo_copy(root, manifest, "da-recorded", {})
    config = json.loads(outputs["config"].read_text())
    config["architecture"]["overrides"]["fusion_hidden_size"] = 8  # a copy recording another architecture
    outputs["config"].write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: its tensors do not fit the architecture "
                                              r"\S*config\.json records \(model\.neck\.\S+ is \("):
        zoo.load(outputs["weights"], outputs["config"])


def test_a_timm_checkpoint_of_another_width_than_asked_is_one_line_naming_it(mini):
    root, manifest = mini
    weights = root / "files" / manifest["models"]["dinov2-b14"]["path"]  # 64 wide; no overrides ask for Base
    with pytest.raises(CheckpointError, match=rf"^{weights}: a checkpoint of another architecture than "
                                              r"vit_base_patch14_dinov2 with the overrides \{\} \(cls_token: "):
        pretrained.load({"adapter": "dinov2-b14", "path": str(weights)}, "cpu")
