"""The paper-mini fixtures: every file in its real format, readable by the project's own readers and
loaders, the same bytes on every run, and a command that never writes into a foreign directory."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before huggingface_hub reads it at import

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import BIN, run
from PIL import Image
from safetensors.torch import load_file

from taskgeom.data.real import VAL_FILENAME, ImageFolderClasses, NYUDepthV2Labeled, read_nyu_split
from taskgeom.fixtures import images
from taskgeom.fixtures.paper_mini import MANIFEST, WRITER, ForeignDirectoryError, write_paper_mini
from taskgeom.models.adapters import load_paper_model
from taskgeom.models.host import run_decoder

pytestmark = pytest.mark.slow  # writes the paper-mini files, random weights of the real architectures

WNIDS = ["n01440764", "n01443537", "n01484850", "n01491361", "n01494475", "n01496331", "n01498041",
         "n01514668", "n01514859", "n01518878"]


@pytest.fixture(scope="module")
def written(paper_mini_files: tuple[Path, dict]) -> tuple[Path, dict]:
    """What ``taskgeom fixtures paper-mini`` wrote (once per session: tests/conftest.py)."""
    return paper_mini_files


def check_files(root: Path, manifest: dict) -> None:
    """Every file of the manifest is there with its hash and size, and nothing else is."""
    for rel, record in manifest["files"].items():
        data = (root / rel).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (record["sha256"], record["bytes"]), rel
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    assert on_disk == set(manifest["files"]) | {MANIFEST}


def test_manifest_records_every_file(written):
    root, manifest = written
    check_files(root, manifest)
    text = (root / MANIFEST).read_text()
    assert json.loads(text) == manifest
    assert text == json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    assert manifest["writer"] == WRITER and manifest["complete"]
    assert set(manifest["models"]) == {"dinov2-b14", "clip-b16", "depth-anything-v2"}
    assert "vggt" in manifest["skipped"]
    assert {k: v["count"] for k, v in manifest["datasets"].items()} == {
        "imagenet_val": 60, "imagenet_sketch": 60, "nyu_depth_v2": 24}


def image_sizes(folder: Path) -> list[tuple[int, int]]:
    sizes = []
    for path in sorted(folder.rglob("*.JPEG")):
        with Image.open(path) as image:
            assert image.format == "JPEG" and image.mode == "RGB"
            sizes.append(image.size)
    return sizes


@pytest.mark.parametrize(("folder", "per_class"), [("imagenet-val", 6), ("imagenet-sketch", 6)])
def test_imagenet_class_folders(written, folder: str, per_class: int):
    root, manifest = written
    data = ImageFolderClasses(root / folder, 16)
    assert data.classes == WNIDS == manifest["datasets"][folder.replace("-", "_")]["classes"]
    labels = [label for _, label in data.samples]
    assert np.bincount(labels).tolist() == [per_class] * 10
    assert all(path.parent.name == WNIDS[label] for path, label in data.samples)
    if folder == "imagenet-val":
        assert all(VAL_FILENAME.fullmatch(path.name) for path, _ in data.samples)
    sizes = image_sizes(root / folder)
    assert all(w != h and 96 <= w <= 160 and 80 <= h <= 128 for w, h in sizes)
    assert len(set(sizes)) > len(sizes) // 2


def test_imagenet_val_classes_are_the_world_labels_of_their_scenes(written):
    """Class c's folder holds renders of world scenes whose label (main object's shape x texture)
    is c: the mapping is checked on the first image of each class against a fresh render. (The
    classes are not separable by raw-pixel nearest neighbours: colours, surroundings and
    lighting vary at random within a class, as in natural images.)"""
    picked = images.pick_scenes(2)
    for c, wnid in enumerate(images.WNIDS):
        assert all(images.sample_scene(images.SEED, i).label == c for i in picked[c])
        path = written[0] / "imagenet-val" / wnid / f"ILSVRC2012_val_{c + 1:08d}.JPEG"
        stored = np.asarray(Image.open(path).convert("RGB"), dtype=np.float64)
        fresh = np.asarray(images._render(picked[c][0], "rgb", images.SEED), dtype=np.float64)
        assert stored.shape == fresh.shape and np.abs(stored - fresh).mean() < 8  # JPEG's loss only


def test_nyu_mat_and_splits(written):
    nyu = written[0] / "nyu"
    mat = nyu / "nyu_depth_v2_labeled.mat"
    assert mat.read_bytes()[:10] == b"MATLAB 7.3"
    with h5py.File(mat, "r") as file:
        assert file["images"].shape == (24, 3, 160, 120) and file["images"].dtype == np.uint8
        assert file["depths"].shape == (24, 160, 120) and file["depths"].dtype == np.float32
    assert read_nyu_split(nyu / "splits.mat", "train").tolist() == list(range(16))
    data = NYUDepthV2Labeled(mat, 32, read_nyu_split(nyu / "splits.mat", "test"))
    assert len(data) == 8
    for item in data:
        depth = item["depth"]
        assert depth.shape == (32, 32) and torch.isfinite(depth).all() and (depth > 0).all()
        assert depth.max() <= 10.0 and depth.std() > 0
        assert item["image"].shape == (3, 32, 32) and item["image"].std() > 0


def contents(tensors: dict[str, torch.Tensor]) -> Counter:
    """The multiset of tensors (shape, dtype, bytes), whatever their names."""
    return Counter((tuple(t.shape), str(t.dtype), hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest())
                   for t in tensors.values())


@pytest.mark.parametrize("name", ["dinov2-b14", "clip-b16", "depth-anything-v2"])
def test_models_load_with_their_manifest_overrides(written, name: str):
    root, manifest = written
    entry = manifest["models"][name]
    host = load_paper_model(name, root / entry["path"], **entry["overrides"])
    weights = root / entry["path"]
    if weights.is_dir():
        weights /= "model.safetensors"
    # the loaded weights are the written ones (no silent re-init); transformers saves Depth Anything
    # under the hub checkpoint's key names, which differ from its modules', so compare contents
    loaded = (host.vit if hasattr(host, "vit") else host.model).state_dict()
    assert contents(loaded) == contents(load_file(str(weights)))

    size = entry["img_size"]
    data = ImageFolderClasses(root / "imagenet-val", size)
    images = torch.stack([data[0][0], data[1][0]])
    with torch.no_grad():
        out = run_decoder(host, host.decoders[0], images)
    assert out.shape[0] == 2 and torch.isfinite(out).all()
    assert not torch.allclose(out[0], out[1])  # outputs depend on the image


def test_command_is_deterministic_reruns_and_refuses_foreign_directories(written, tmp_path: Path):
    """A rerun into a copy of the session's output with every file emptied (its own output: the
    manifest names its writer) writes each file again, with the session's bytes."""
    root, manifest = written
    target = shutil.copytree(root, tmp_path / "again")
    for rel in manifest["files"]:
        (target / rel).write_bytes(b"")
    run([str(BIN / "taskgeom"), "fixtures", "paper-mini", str(target)], tmp_path)
    assert (target / MANIFEST).read_bytes() == (root / MANIFEST).read_bytes()  # same hashes: same bytes
    check_files(target, manifest)

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    proc = run([str(BIN / "taskgeom"), "fixtures", "paper-mini", str(foreign)], tmp_path, check=False)
    assert proc.returncode == 2 and str(foreign) in proc.stderr and "not empty" in proc.stderr
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]


def test_a_manifest_by_another_writer_is_foreign(tmp_path: Path):
    (tmp_path / MANIFEST).write_text(json.dumps({"writer": "someone else"}))
    with pytest.raises(ForeignDirectoryError, match=str(tmp_path)):
        write_paper_mini(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [MANIFEST]
    file = tmp_path / "file"
    file.write_text("")
    with pytest.raises(ForeignDirectoryError, match="not a directory"):
        write_paper_mini(file)
