"""Where external data lie is machine-local (``data/external/<name>`` links); what the pipeline
tracks is their content (``data/identity.yaml``). The end-to-end checks on a finished paper-mini
run are in test_paper_mini_run.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from PIL import Image

from taskgeom.pipeline import identity
from taskgeom.pipeline.dag import dvc_stage, rule_values
from taskgeom.pipeline.external import link
from taskgeom.pipeline.registry import stage


def images(root: Path) -> Path:
    for k, cls in enumerate("aabb"):
        (root / cls).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8 + k, 8), (k * 40, 0, 0)).save(root / cls / f"{k}.png")
    return root


def params_for(folder: str, weights: str) -> dict:
    return {"sources": {"s": {"kind": "imagenet_sketch", "path": folder, "subset": {"count": 2, "seed": 0}},
                        "w": {"kind": "world", "split": "test"}},
            "zoo": {"m": {"kind": "pretrained", "adapter": "clip-b16", "path": weights},
                    "tiny": {"kind": "cls"}}}


def test_link_points_a_name_at_this_machines_copy_and_never_replaces_files(tmp_path: Path):
    first, second = images(tmp_path / "one"), shutil.copytree(tmp_path / "one", tmp_path / "two")
    where = link("data-set", first, tmp_path)
    assert where == tmp_path / "data/external/data-set" and where.resolve() == first
    assert link("data-set", second, tmp_path).resolve() == second
    (tmp_path / "data/external/real").mkdir()
    with pytest.raises(FileExistsError, match="is not a link"):
        link("real", first, tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        link("gone", tmp_path / "nowhere", tmp_path)
    with pytest.raises(ValueError, match="one plain file name"):
        link("../escape", first, tmp_path)


def test_identity_is_content_the_same_bytes_anywhere_and_one_changed_byte_another(tmp_path: Path):
    here, weights = images(tmp_path / "here"), tmp_path / "ckpt/model.safetensors"
    weights.parent.mkdir()
    weights.write_bytes(b"weights")
    there = shutil.copytree(here, tmp_path / "there")
    moved = shutil.copytree(weights.parent, tmp_path / "elsewhere/ckpt")
    first = identity.compute(params_for(str(here), str(weights.parent)))
    assert first["sources"]["w"] is None and first["zoo"]["tiny"] is None  # nothing from outside
    assert identity.compute(params_for(str(there), str(moved))) == first
    picked = sorted(p for p in there.rglob("*.png"))
    for path in picked:  # one byte of one file changes exactly the entry that reads it
        path.write_bytes(path.read_bytes()[:-1] + bytes([path.read_bytes()[-1] ^ 1]))
        changed = identity.compute(params_for(str(there), str(moved)))
        path.write_bytes(path.read_bytes()[:-1] + bytes([path.read_bytes()[-1] ^ 1]))
        if changed["sources"]["s"] != first["sources"]["s"]:
            break
    else:
        raise AssertionError("no selected file changed the source's identity")
    assert changed["zoo"] == first["zoo"]
    (moved / "model.safetensors").write_bytes(b"other weights")
    assert identity.compute(params_for(str(there), str(moved)))["zoo"]["m"] != first["zoo"]["m"]


def test_an_unreadable_entry_keeps_what_was_recorded_here_or_in_dvc_lock(tmp_path: Path):
    lock = {"stages": {"sources@s": {"params": {identity.IDENTITY: {"sources.s": "from-the-lock"}}},
                       "zoo@m": {"params": {identity.IDENTITY: {"zoo.m": "pulled"}}}}}
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    params = params_for(str(tmp_path / "no-such-folder"), str(tmp_path / "no-weights"))
    assert identity.refresh(params, tmp_path) == {"sources": {"s": "from-the-lock", "w": None},
                                                  "zoo": {"m": "pulled", "tiny": None}}
    written = (tmp_path / identity.IDENTITY).stat().st_mtime_ns
    (tmp_path / "dvc.lock").unlink()
    assert identity.refresh(params, tmp_path)["sources"]["s"] == "from-the-lock"  # the file's own record
    assert (tmp_path / identity.IDENTITY).stat().st_mtime_ns == written  # the same bytes are not rewritten
    (tmp_path / identity.IDENTITY).unlink()
    assert identity.refresh(params, tmp_path)["zoo"]["m"] == identity.UNAVAILABLE


def test_both_front_ends_take_the_content_and_not_the_location_as_a_parameter(tmp_path: Path):
    sources, zoo = dvc_stage(stage("sources"))["do"], dvc_stage(stage("zoo"))["do"]
    assert {identity.IDENTITY: ["sources.${key}"]} in sources["params"]
    assert {identity.IDENTITY: ["zoo.${key}"]} in zoo["params"]
    check = dvc_stage(stage("check-params"))
    assert {identity.IDENTITY: {"cache": False, "persist": True}} in check["outs"]
    params = params_for("data/external/sketch", "data/external/clip-b16")
    values = json.loads(rule_values(stage("sources"), params, "s", {"sources": {"s": "abc"}}))
    assert values["identity"] == {"sources.s": "abc"} and values["sources"]["s"]["path"] == "data/external/sketch"
