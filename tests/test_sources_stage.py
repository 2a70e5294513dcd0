"""Stages read their images through named sources: the ``sources`` stage indexes and checks one
(a corrupt file stops it, writing nothing), and ``diagnose`` records the digest of exactly the
pixels it saw after its host's preprocessing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from PIL import Image

from taskgeom.data.hdf5 import KIND_ATTR, StoreError, new_file
from taskgeom.data.indexed import open_indexed
from taskgeom.data.sources import SourceError
from taskgeom.models import zoo
from taskgeom.models.preprocess import world
from taskgeom.pipeline import identity
from taskgeom.pipeline.runtime import StageContext
from taskgeom.stages import diagnose as diagnose_stage
from taskgeom.stages import sources as sources_stage

ARCH = dict(kind="cls", embed_dim=16, depth=3, num_heads=2, patch_size=8, img_size=32)
DIAGNOSE = {"images": 3, "estimator": {"r": 4, "num_probes": 8, "power_iters": 1, "seed": 0},
            "dense": {"max_dim": 0, "images": 0}, "power_table": {"q": [0], "images": 0, "reference_q": 2},
            "bootstrap": {"resamples": 20, "level": 0.9, "seed": 0},
            "regimes": {"kappa_high": 0.9, "cv_high": 1.0, "erank_rich": 5.0},
            "probes": {"p": {"model": "m", "decoder": "cls", "layers": [1], "source": "mine"}}}


def known_images(root: Path) -> dict[str, np.ndarray]:
    """Four PNGs of different shapes (lossless, so these pixels are what a reader gets), by name."""
    known = {}
    for k, shape in enumerate([(40, 56), (32, 32), (50, 30), (33, 47)]):
        path = root / f"{k}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        known[path.name] = np.random.default_rng(k).integers(0, 256, (*shape, 3), dtype=np.uint8)
        Image.fromarray(known[path.name]).save(path)
    return known


def index(tmp_path: Path, sources: dict) -> Path:
    out = tmp_path / "data/sources/mine.json"
    sources_stage.run(StageContext("sources", {}, {"index": out}, {"sources": sources}, "mine"))
    return out


def test_diagnose_records_the_digest_of_the_preprocessed_pixels_it_saw(tmp_path: Path):
    known = known_images(tmp_path / "images")
    sources = {"mine": {"kind": "folder", "path": str(tmp_path / "images")}}
    indexed = json.loads(index(tmp_path, sources).read_text())
    assert indexed["keys"] == sorted(known) and indexed["items"] == 4
    weights, config = tmp_path / "zoo/model.safetensors", tmp_path / "zoo/config.json"
    zoo.save(zoo.seeded(0, ARCH), ARCH, weights, config, provenance={})
    summary = tmp_path / "p.json"
    outputs = {"summary": summary, "arrays": tmp_path / "p.h5"}
    inputs = {"source": tmp_path / "data/sources/mine.json", "weights": weights, "config": config}
    diagnose_stage.run(StageContext("diagnose", inputs, outputs, {"diagnose": DIAGNOSE, "sources": sources}, "p"))
    seen = json.loads(summary.read_text())["provenance"]["input"]
    expected = hashlib.sha256(b"".join(world(32).image(known[k]).numpy().tobytes() for k in sorted(known)[:3]))
    assert seen["input_sha256"] == expected.hexdigest() and seen["preprocess"]["mode"] == "world"
    assert seen["source"]["keys_sha256"] == indexed["keys_sha256"]


def test_a_corrupt_image_stops_the_sources_stage_naming_it_and_writes_nothing(tmp_path: Path):
    known_images(tmp_path / "images")
    (tmp_path / "images/9.jpg").write_bytes(b"\xff\xd8\xff\xe0" + bytes(100))
    with pytest.raises(SourceError, match=r"9\.jpg: expected a JPEG or PNG image"):
        index(tmp_path, {"mine": {"kind": "folder", "path": str(tmp_path / "images")}})
    assert not (tmp_path / "data").exists()


def test_a_changed_selection_is_refused_until_the_source_is_indexed_again(tmp_path: Path):
    known_images(tmp_path / "images")
    sources = {"mine": {"kind": "folder", "path": str(tmp_path / "images")}}
    path = index(tmp_path, sources)
    assert len(open_indexed(path, sources)) == 4
    with pytest.raises(SourceError, match=r"sources\.mine: its items differ from .*mine\.json"):
        open_indexed(path, {"mine": {**sources["mine"], "subset": {"count": 2, "seed": 0}}})


def test_a_damaged_world_file_stops_the_sources_stage_naming_it_and_publishes_nothing(tmp_path: Path):
    path, n = tmp_path / "world/test.h5", 6
    path.parent.mkdir()
    pixels = np.random.default_rng(0).integers(0, 256, (n, 16, 16, 3), dtype=np.uint8)
    layout = {"r16/rgb": ((16, 16, 3), "uint8"), "r16/sketch": ((16, 16, 3), "uint8"),
              "r16/depth": ((16, 16), "float32"), "label": ((), "int64")}
    with new_file(path, {KIND_ATTR: "world", "base_resolution": 16, "num_items": n}, layout, n) as f:
        f["r16/rgb"][:], f["r16/sketch"][:], f["r16/depth"][:] = pixels, pixels[..., ::-1], 1.0
        f["label"][:] = np.arange(n) % 2
    with h5py.File(path, "r") as f:  # a chunk of renders the source does not select (rgb is what it reads)
        chunk = f["r16/sketch"].id.get_chunk_info(3)
    data = bytearray(path.read_bytes())
    data[chunk.byte_offset:chunk.byte_offset + chunk.size] = np.random.default_rng(1).bytes(chunk.size)
    path.write_bytes(bytes(data))
    sources = {"mine": {"kind": "world", "split": "test", "path": str(path)}}
    said = rf"{path}: damaged \(r16/sketch rows .*rerun fetch.*dvc checkout --force {path}"
    with pytest.raises(StoreError, match=said):
        index(tmp_path, sources)
    assert not (tmp_path / "data").exists()
    path.write_bytes(bytes(data[:len(data) // 2]))  # a truncated copy: one line too (SourceError is a user's)
    with pytest.raises(SourceError, match=rf"sources\.mine: {path}: not a readable HDF5 file .*rerun fetch"):
        index(tmp_path, sources)


def test_the_index_is_the_same_bytes_wherever_the_files_lie(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    known_images(tmp_path / "here/images")
    shutil.copytree(tmp_path / "here/images", tmp_path / "there/images")
    link = tmp_path / "data/external/images"  # the location convention: a machine-local link
    link.parent.mkdir(parents=True)
    sources = {"mine": {"kind": "folder", "path": "data/external/images"}}
    indexes, identities = [], []
    for place in ("here", "there"):
        link.unlink(missing_ok=True)
        link.symlink_to(tmp_path / place / "images")
        indexes.append(index(tmp_path, sources).read_bytes())
        identities.append(identity.compute({"sources": sources, "zoo": {}})["sources"]["mine"])
    assert indexes[0] == indexes[1] and identities[0] == identities[1]
    recorded = json.loads(indexes[0])
    assert recorded["content_sha256"] == identities[0] and "machine" not in recorded["provenance"]
    assert recorded["files"]["0.png"] == hashlib.sha256((tmp_path / "here/images/0.png").read_bytes()).hexdigest()
