"""Checkpoints are checked on load: damaged weights (header or data) and a damaged config are
refused naming the file and the stage to rerun; intact ones load to the same tensors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from taskgeom.artifacts.checkpoints import WEIGHTS_SHA256, CheckpointError
from taskgeom.metric import checkpoint
from taskgeom.metric.head import ImportanceHead
from taskgeom.models import zoo

ARCH = {"kind": "cls", "embed_dim": 16, "depth": 2, "num_heads": 2, "patch_size": 8, "img_size": 16}


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, Path, nn.Module]:
    model = zoo.seeded(0, ARCH)
    weights, config = tmp_path / "zoo/model.safetensors", tmp_path / "zoo/config.json"
    zoo.save(model, ARCH, weights, config, provenance={"stage": "test"})
    return weights, config, model


def test_an_intact_checkpoint_records_its_digest_and_loads(saved):
    weights, config, model = saved
    assert len(json.loads(config.read_text())[WEIGHTS_SHA256]) == 64
    loaded = zoo.load(weights, config)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


@pytest.mark.parametrize("where", ["header", "data"])
def test_damaged_weights_are_refused_naming_the_file(saved, where):
    weights, config, _ = saved
    data = bytearray(weights.read_bytes())
    at = 8 if where == "header" else len(data) - 16  # the JSON header, or the last tensor's bytes
    data[at:at + 8] = b"\x7f\x01\x02\x03\x04\x05\x06\x07"
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"{weights}: .*rerun the stage that wrote it"):
        zoo.load(weights, config)


def test_a_config_without_a_digest_loads_unchecked_but_a_damaged_header_is_still_named(saved):
    weights, config, _ = saved
    without_digest = {k: v for k, v in json.loads(config.read_text()).items() if k != WEIGHTS_SHA256}
    config.write_text(json.dumps(without_digest))
    zoo.load(weights, config)
    weights.write_bytes(b"\x7f" * 16 + weights.read_bytes()[16:])
    with pytest.raises(CheckpointError, match=rf"{weights}: not a readable safetensors file"):
        zoo.load(weights, config)


def test_a_damaged_config_is_refused_naming_it(saved):
    weights, config, _ = saved
    config.write_text('{"architecture": ')
    with pytest.raises(CheckpointError, match=rf"{config}: not a checkpoint config"):
        zoo.load(weights, config)


def test_learned_metric_checkpoints_are_checked_too(tmp_path: Path):
    head = ImportanceHead(5, 4, 8, 2, 1)
    weights, config = tmp_path / "head/model.safetensors", tmp_path / "head/config.json"
    checkpoint.save_seeds({0: head}, {"kind": "importance_head", "tokens": 5, "dim": 4, "width": 8, "heads": 2,
                                      "layers": 1}, weights, config, provenance={})
    checkpoint.load(weights, config)
    weights.write_bytes(weights.read_bytes()[:-4] + b"\x00\x00\x80\x7f")
    with pytest.raises(CheckpointError, match=rf"{weights}: its bytes do not match"):
        checkpoint.load(weights, config)
