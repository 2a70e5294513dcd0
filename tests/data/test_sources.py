"""Image sources: what a stage reads is exactly the named files' pixels, subsets are seeded and
stratified, and every bad input is refused naming its key and file."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from PIL import Image

from taskgeom.data import batches as batches_module
from taskgeom.data.batches import InputDigest, batches, read_inputs
from taskgeom.data.digests import Digests
from taskgeom.data.hdf5 import KIND_ATTR, StoreError, new_file
from taskgeom.data.indexed import open_indexed
from taskgeom.data.sources import SourceError, open_source, world_arrays
from taskgeom.data.splits import read_world, to_input
from taskgeom.data.subsets import stratified_subset
from taskgeom.data.world import WorldSpec, render_split
from taskgeom.finite import NonFiniteError
from taskgeom.models.preprocess import world


def _pixels(seed: int, height: int, width: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.fixture
def folder(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """PNGs (lossless, so the known pixels are what is read) in two class folders, one nested deeper."""
    root, known = tmp_path / "images", {}
    for k, (cls, size) in enumerate([("b", (20, 30)), ("a", (33, 17)), ("a", (16, 16)), ("b", (40, 24))]):
        path = root / cls / ("deep" if k == 3 else "") / f"{k}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        key = path.relative_to(root).as_posix()  # keys are relative to the source's root
        known[key] = _pixels(k, *size)
        Image.fromarray(known[key]).save(path)
    return root, known


def test_a_folder_source_yields_exactly_its_pixels_through_the_hosts_preprocessing(folder):
    root, known = folder
    source = open_source("mine", {"mine": {"kind": "folder", "path": str(root)}})
    assert source.keys == sorted(known) and (source.labels == -1).all()
    prep, digest, expected = world(16), InputDigest(), hashlib.sha256()
    seen = []
    for batch in batches(source, prep.image, batch_size=3):
        seen += batch.keys
        digest.update(batch.x)
    for key in sorted(known):
        expected.update(prep.image(known[key]).numpy().tobytes())
    assert seen == sorted(known) and digest.items == 4 and digest.hexdigest() == expected.hexdigest()
    square = next(k for k in known if known[k].shape == (16, 16, 3))  # at the input size: only normalised
    assert torch.equal(prep.image(known[square]), (torch.tensor(known[square]).permute(2, 0, 1) / 255 - 0.5) / 0.25)


def test_class_folders_label_by_sorted_folder_and_subsets_are_seeded_and_stratified(folder, tmp_path):
    root, _ = folder
    spec = {"kind": "imagenet_sketch", "path": str(root)}
    full = open_source("s", {"s": spec})
    assert full.classes == ["a", "b"] and sorted(full.labels.tolist()) == [0, 0, 1]  # class folders are flat
    two = open_source("s", {"s": {**spec, "subset": {"count": 2, "seed": 3}}})
    assert sorted(two.labels.tolist()) == [0, 1]  # one per class
    again = open_source("s", {"s": {**spec, "subset": {"count": 2, "seed": 3}}})
    assert two.keys == again.keys and two.describe()["keys_sha256"] == again.describe()["keys_sha256"]
    labels = np.repeat(np.arange(5), [10, 3, 7, 1, 9])
    picked = stratified_subset(labels, 10, seed=0)
    assert len(set(picked.tolist())) == 10 and np.bincount(labels[picked], minlength=5).min() >= 1
    assert not np.array_equal(picked, stratified_subset(labels, 10, seed=1))


def _world_file(path: Path, n: int = 5, resolution: int = 32, views: int = 1, room_share: float = 0.0) -> Path:
    arrays = render_split(n, seed=1, resolution=resolution, views=views, spec=WorldSpec(room_share=room_share))
    take = (lambda a: a) if views > 1 else (lambda a: a[:, 0])
    names = ("rgb", "sketch", "depth")
    layout = {f"r{resolution}/{k}": (take(arrays[k]).shape[1:], take(arrays[k]).dtype) for k in names}
    attrs = {KIND_ATTR: "world", "base_resolution": resolution, "num_items": n}
    with new_file(path, attrs, layout | {"label": ((), "int64"), "family": ((), "int8")}, n) as f:
        for k in names:
            f[f"r{resolution}/{k}"][:] = take(arrays[k])
        f["label"][:], f["family"][:] = arrays["label"], arrays["family"]
    return path


def test_a_world_source_of_one_family_holds_exactly_its_scenes(tmp_path):
    path = _world_file(tmp_path / "test.h5", n=12, room_share=0.5)
    with h5py.File(path, "r") as f:
        family, depth, labels = f["family"][:], f["r32/depth"][:], f["label"][:]
    rooms = np.flatnonzero(family == 1)
    assert 0 < len(rooms) < 12
    spec = {"kind": "world", "split": "test", "path": str(path), "family": "room"}
    source = open_source("rooms", {"rooms": spec})
    assert source.keys == [f"test.h5[{i}]" for i in rooms] and source.labels.tolist() == labels[rooms].tolist()
    assert np.array_equal(source[1].depth, depth[rooms[1]])
    window = open_source("rooms", {"rooms": spec | {"range": [1, 3]}})
    assert np.array_equal(world_arrays(window, ("depth", "family"), "test")["depth"], depth[rooms[1:3]])
    outdoor = open_source("out", {"out": spec | {"family": "outdoor"}})
    assert sorted(outdoor.keys + source.keys) == sorted(f"test.h5[{i}]" for i in range(12))


def test_a_non_finite_depth_is_refused_naming_the_file_and_scene(tmp_path):
    path = _world_file(tmp_path / "test.h5")
    with h5py.File(path, "r+") as f:
        f["r32/depth"][3, 5, 7] = np.nan
    source = open_source("w", {"w": {"kind": "world", "split": "test", "path": str(path)}})
    with pytest.raises(NonFiniteError, match=rf"sources.w: depth: {path}\[3\] holds a non-finite value"):
        list(batches(source, world(32).image, batch_size=8, depth=world(32).depth))
    with pytest.raises(NonFiniteError, match=rf"zoo.m.sources.train: depth: {path}\[3\] holds"):
        world_arrays(source, ("rgb", "depth"), "zoo.m.sources.train")
    assert world_arrays(source.first(3), ("rgb", "depth"), "zoo.m.sources.train")["depth"].shape == (3, 32, 32)


def test_a_world_source_reproduces_the_worlds_inputs(tmp_path):
    path = _world_file(tmp_path / "test.h5")
    source = open_source("w", {"w": {"kind": "world", "split": "test", "path": str(path), "domain": "sketch"}})
    (batch,) = list(batches(source, world(32).image, batch_size=8, depth=world(32).depth))
    truth = read_world(path, keys=("sketch", "depth", "label"))
    assert torch.equal(batch.x, to_input(truth["sketch"])) and torch.equal(batch.depth, torch.as_tensor(truth["depth"]))
    assert batch.labels.tolist() == truth["label"].tolist()
    views = open_source("v", {"v": {"kind": "world", "split": "mv_test", "path": str(_world_file(
        tmp_path / "mv.h5", n=2, views=3))}})
    assert next(batches(views, world(32).image, batch_size=2)).x.shape == (2, 3, 3, 32, 32)


def test_a_stacked_batch_over_the_spill_size_is_mapped_from_a_file_with_the_same_values_and_layout(
        tmp_path, monkeypatch):
    views = open_source("v", {"v": {"kind": "world", "split": "mv_test", "path": str(_world_file(
        tmp_path / "mv.h5", n=5, views=2))}})
    files = []
    real = batches_module.tempfile.TemporaryFile
    monkeypatch.setattr(batches_module.tempfile, "TemporaryFile", lambda: files.append(real()) or files[-1])
    held, held_digest = read_inputs(views, world(32), batch_size=2, depth=True), InputDigest()
    held_digest.update(held.x)
    assert files == []
    monkeypatch.setattr(batches_module, "SPILL_BYTES", 1)
    mapped, mapped_digest = read_inputs(views, world(32), batch_size=2, depth=True), InputDigest()
    mapped_digest.update(mapped.x, chunk=3)
    assert len(files) == 2 and os.fstat(files[0].fileno()).st_size == mapped.x.numel() * 4  # images, depth
    assert mapped.x.shape == held.x.shape == (5, 2, 3, 32, 32) and mapped.x.stride() == held.x.stride()
    assert torch.equal(mapped.x, held.x) and torch.equal(mapped.depth, held.depth)
    assert mapped.labels.tolist() == held.labels.tolist() and mapped.keys == held.keys
    assert mapped_digest.hexdigest() == held_digest.hexdigest()


def _nyu(path: Path, with_depths: bool = True) -> Path:
    with h5py.File(path, "w", userblock_size=512) as f:
        f["images"] = np.random.default_rng(0).integers(0, 256, (3, 3, 40, 30), dtype=np.uint8)
        if with_depths:
            f["depths"] = np.full((3, 40, 30), 2.5, np.float32)
    return path


def test_nyu_items_carry_depth_and_dense_batches_need_it(tmp_path, folder):
    source = open_source("n", {"n": {"kind": "nyu_depth_v2", "path": str(_nyu(tmp_path / "nyu.mat"))}})
    item = source[1]
    assert item.image.shape == (30, 40, 3) and item.depth.shape == (30, 40) and item.key.endswith("nyu.mat[1]")
    images = open_source("f", {"f": {"kind": "folder", "path": str(folder[0])}})
    with pytest.raises(SourceError, match=r"sources\.f: .*\d\.png has no depth"):
        next(batches(images, world(16).image, batch_size=2, depth=world(16).depth))


def test_bad_sources_are_refused_naming_the_key_and_file(tmp_path, folder):
    root, known = folder
    empty = tmp_path / "empty"
    empty.mkdir()
    corrupt = tmp_path / "corrupt" / "x"
    corrupt.mkdir(parents=True)
    (corrupt / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg at all")
    cases = [
        ("x", {"kind": "folder", "path": str(tmp_path / "missing")}, r"sources\.x\.path: .*missing does not exist"),
        ("x", {"kind": "folder", "path": str(empty)}, r"sources\.x\.path: .*empty holds no"),
        ("x", {"kind": "imagenet_val", "path": str(empty)}, r"sources\.x\.path: .*empty: expected class folders"),
        ("x", {"kind": "nyu_depth_v2", "path": str(_nyu(tmp_path / "d.mat", with_depths=False))},
         r"sources\.x: .*d\.mat: expected dataset 'depths'"),
        ("x", {"kind": "folder", "path": str(root), "subset": {"count": 9, "seed": 0}},
         r"sources\.x\.subset\.count: 9 requested, the source holds 4"),
        ("x", {"kind": "world", "split": "test", "path": str(tmp_path / "none.h5")},
         r"sources\.x: .*none\.h5: no such"),
    ]
    for name, spec, message in cases:
        with pytest.raises(SourceError, match=message):
            open_source(name, {name: spec})
    with pytest.raises(SourceError, match=r"sources\.nope: not defined in params\.yaml \(defined: \['x'\]\)"):
        open_source("nope", {"x": {"kind": "folder", "path": str(root)}})
    source = open_source("c", {"c": {"kind": "folder", "path": str(corrupt.parent)}})
    with pytest.raises(SourceError, match=r"broken\.jpg: expected a JPEG or PNG image"):
        source.check()


def test_a_folder_of_sequences_gives_view_groups_and_refuses_short_or_ragged_ones(tmp_path):
    root = tmp_path / "seqs"
    known = {}
    for g in range(3):
        for v in range(3):  # one spare view per group: only the first `views` by name are read
            path = root / f"scene{g}" / f"{v:02d}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            known[path] = _pixels(10 * g + v, 12, 18)
            Image.fromarray(known[path]).save(path)
    source = open_source("mv", {"mv": {"kind": "sequences", "path": str(root), "views": 2}})
    assert len(source) == 3 and source[1].image.shape == (2, 12, 18, 3)
    assert np.array_equal(source[1].image[1], known[root / "scene1" / "01.png"])
    batch = next(batches(source, world(8).image, batch_size=3))
    assert batch.x.shape == (3, 2, 3, 8, 8)
    with pytest.raises(SourceError, match=r"sources\.mv\.views: .*scene0 holds 3 images, 4 needed"):
        open_source("mv", {"mv": {"kind": "sequences", "path": str(root), "views": 4}})
    Image.fromarray(_pixels(99, 10, 10)).save(root / "scene2" / "00.png")
    with pytest.raises(SourceError, match=r"sources\.mv: the views of .*scene2 differ in size"):
        open_source("mv", {"mv": {"kind": "sequences", "path": str(root)}})[2]


def test_a_range_windows_the_items_and_offsets_give_disjoint_stratified_subsets(tmp_path):
    root = tmp_path / "classes"
    for c in range(4):
        for k in range(6):
            (root / f"c{c}").mkdir(parents=True, exist_ok=True)
            Image.fromarray(_pixels(c * 10 + k, 8, 8)).save(root / f"c{c}" / f"{k}.png")
    spec = {"kind": "imagenet_sketch", "path": str(root)}
    full = open_source("s", {"s": spec})
    tail = open_source("s", {"s": {**spec, "range": [-5, None]}})
    assert tail.keys == full.keys[-5:]
    parts = [open_source("s", {"s": {**spec, "subset": {"count": 8, "seed": 1, "offset": o}}}) for o in (0, 8, 16)]
    keys = [set(p.keys) for p in parts]
    assert not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2]) and len(set.union(*keys)) == 24
    assert all(sorted(np.bincount(p.labels).tolist()) == [2, 2, 2, 2] for p in parts)  # each stratified
    with pytest.raises(SourceError, match=r"sources\.s\.subset\.count: 8 requested, the source holds 4 after"):
        open_source("s", {"s": {**spec, "subset": {"count": 8, "seed": 1, "offset": 20}}})
    with pytest.raises(SourceError, match=r"sources\.s\.range: \[30, None\] selects none"):
        open_source("s", {"s": {**spec, "range": [30, None]}})


def test_a_damaged_chunk_of_a_world_file_is_one_error_naming_the_file(tmp_path):
    path = _world_file(tmp_path / "test.h5")
    with h5py.File(path, "r") as f:
        chunk = f["r32/rgb"].id.get_chunk_info(2)
    with open(path, "r+b") as f:
        f.seek(chunk.byte_offset)
        f.write(bytes(chunk.size))
    source = open_source("w", {"w": {"kind": "world", "split": "test", "path": str(path)}})
    for read in (lambda: source[2], lambda: world_arrays(source, ("rgb",), "zoo.m.sources.train"),
                 lambda: read_world(path)):
        with pytest.raises(StoreError, match=rf"{path}: damaged, a read failed .*rerun fetch"):
            read()


def test_a_sources_keys_and_content_digest_do_not_depend_on_where_its_files_lie(folder, tmp_path):
    root, _ = folder
    copy = shutil.copytree(root, tmp_path / "elsewhere" / "copy")
    spec = {"kind": "imagenet_sketch", "subset": {"count": 2, "seed": 3}}
    here, there = (open_source("s", {"s": spec | {"path": str(p)}}) for p in (root, copy))
    assert here.keys == there.keys and all(not Path(k).is_absolute() for k in here.keys)
    assert [n for n, _ in here.files()] == [n for n, _ in there.files()] == here.keys
    with Digests() as digests:
        assert digests.named_sha256(here.files()) == digests.named_sha256(there.files())
        changed = copy / there.keys[0]
        changed.write_bytes(changed.read_bytes() + b"\0")  # one byte more: another identity
        assert digests.named_sha256(here.files()) != digests.named_sha256(there.files())


def test_a_reader_names_an_indexed_item_that_is_gone(folder, tmp_path):
    root, _ = folder
    sources = {"s": {"kind": "folder", "path": str(root)}}
    index = tmp_path / "s.json"
    source = open_source("s", sources)
    index.write_text(json.dumps({**source.describe(), "keys": source.keys}))
    (root / source.keys[1]).rename(tmp_path / "moved.png")
    with pytest.raises(SourceError, match=rf"sources\.s: .*\({source.keys[1]} is not in {root} now\); rerun"):
        open_indexed(index, sources)
