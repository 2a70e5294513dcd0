"""The resumable HDF5 writer: atomic publication, resume, and clear errors for bad files."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from taskgeom.data.hdf5 import ResumableH5, StoreError, forget_published, open_store

LAYOUT = {"g/x": ((4, 3), "float32"), "label": ((), "int64")}


def block(start: int, count: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(start)
    return {"g/x": rng.normal(size=(count, 4, 3)).astype(np.float32), "label": np.arange(start, start + count)}


def build(path: Path, stop_after: int | None = None, attrs: dict | None = None) -> ResumableH5:
    store = ResumableH5(path, LAYOUT, 10, attrs or {"seed": 1, "spec": {"a": [1, 2]}}, kind="test")
    for start in range(store.done, 10, 2):
        if stop_after is not None and start >= stop_after:
            store.close()
            return store
        store.write(start, block(start, 2))
    store.finish()
    return store


def test_one_chunk_per_item_compressed_with_attributes(tmp_path: Path):
    build(tmp_path / "a.h5")
    with open_store(tmp_path / "a.h5", "test") as f:
        assert f["g/x"].chunks == (1, 4, 3)
        assert f["g/x"].compression == "gzip"
        assert f.attrs["seed"] == 1 and f.attrs["spec"] == '{"a": [1, 2]}'
        np.testing.assert_array_equal(f["label"][:], np.arange(10))


def test_nothing_is_published_until_complete(tmp_path: Path):
    build(tmp_path / "a.h5", stop_after=6)
    assert not (tmp_path / "a.h5").exists()
    assert (tmp_path / ".partial" / "a.h5").exists()


def test_resume_gives_the_same_data_and_bytes(tmp_path: Path):
    build(tmp_path / "whole.h5")
    build(tmp_path / "resumed.h5", stop_after=4)
    store = ResumableH5(tmp_path / "resumed.h5", LAYOUT, 10, {"seed": 1, "spec": {"a": [1, 2]}}, kind="test")
    assert store.done == 4
    store.close()
    build(tmp_path / "resumed.h5")
    with h5py.File(tmp_path / "whole.h5") as a, h5py.File(tmp_path / "resumed.h5") as b:
        for name in LAYOUT:
            np.testing.assert_array_equal(a[name][:], b[name][:])
        assert dict(a.attrs) == dict(b.attrs)
    assert (tmp_path / "whole.h5").read_bytes() == (tmp_path / "resumed.h5").read_bytes()


def test_a_published_file_that_a_rerun_deleted_is_restored_not_rebuilt(tmp_path: Path):
    path = tmp_path / "a.h5"
    build(path)
    published = path.read_bytes()
    path.unlink()  # what Snakemake and DVC do to a rerun job's declared outputs
    store = ResumableH5(path, LAYOUT, 10, {"seed": 1, "spec": {"a": [1, 2]}}, kind="test")
    assert store.restored and store.done == 10
    assert store.finish() == path and path.read_bytes() == published
    path.unlink()
    other = ResumableH5(path, LAYOUT, 10, {"seed": 2, "spec": {"a": [1, 2]}}, kind="test")
    assert not other.restored and other.done == 0 and not path.exists()
    other.close()
    build(path)
    forget_published([path])
    path.unlink()
    again = ResumableH5(path, LAYOUT, 10, {"seed": 1, "spec": {"a": [1, 2]}}, kind="test")
    assert not again.restored and again.done == 0
    again.close()


def test_partial_file_of_other_parameters_is_discarded(tmp_path: Path):
    build(tmp_path / "a.h5", stop_after=4, attrs={"seed": 1})
    store = ResumableH5(tmp_path / "a.h5", LAYOUT, 10, {"seed": 2}, kind="test")
    assert store.done == 0
    store.close()


def test_unreadable_partial_file_restarts(tmp_path: Path):
    partial = tmp_path / ".partial" / "a.h5"
    partial.parent.mkdir()
    partial.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)  # a header cut short by a kill
    store = ResumableH5(tmp_path / "a.h5", LAYOUT, 10, {"seed": 1}, kind="test")
    assert store.done == 0
    store.close()


def test_partial_file_with_a_damaged_chunk_restarts(tmp_path: Path, caplog):
    """A kill mid-write can leave a partial file that opens but does not read back."""
    build(tmp_path / "a.h5", stop_after=6)
    partial = tmp_path / ".partial" / "a.h5"
    with h5py.File(partial, "r") as f:
        chunk = f["g/x"].id.get_chunk_info(2)          # an item already marked done
    with partial.open("r+b") as raw:
        raw.seek(chunk.byte_offset)
        raw.write(b"\xff" * chunk.size)
    store = ResumableH5(tmp_path / "a.h5", LAYOUT, 10, {"seed": 1, "spec": {"a": [1, 2]}}, kind="test")
    assert store.done == 0 and "a.h5: the partial file is damaged" in caplog.text
    store.close()
    build(tmp_path / "a.h5")
    build(tmp_path / "whole.h5")
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "whole.h5").read_bytes()


def test_bad_files_are_named(tmp_path: Path):
    with pytest.raises(StoreError, match="absent.h5: no such file"):
        open_store(tmp_path / "absent.h5", "test")
    build(tmp_path / "a.h5")
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes((tmp_path / "a.h5").read_bytes()[:300])
    with pytest.raises(StoreError, match="truncated.h5: not a readable HDF5 file"):
        open_store(truncated, "test")
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(StoreError, match="foreign.h5: expected a taskgeom 'test' file, found None"):
        open_store(foreign, "test")
    with pytest.raises(StoreError, match="a.h5: expected a taskgeom 'world' file, found 'test'"):
        open_store(tmp_path / "a.h5", "world")
