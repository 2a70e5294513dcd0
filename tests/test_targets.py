"""The HDF5 target cache: targets agree with the dense Jacobian (float64), a killed build resumes
to the same bytes, bad files fail naming themselves, and the reader streams exactly the rows asked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from taskgeom.data.hdf5 import StoreError, new_file
from taskgeom.linalg import JacobianOperator, dense_jacobian
from taskgeom.metric import targets
from taskgeom.models.zoo import build
from taskgeom.pipeline.runtime import StageContext
from taskgeom.probes import Probe, ProbeMap
from taskgeom.stages import targets as targets_stage

SETTINGS = {"power_iters": 2, "oversample": 3, "block_norm_probes": 6, "exact": {"max_dim": 100}, "block": 2, "seed": 0}


def small_map(N: int = 5, D: int = 3, M: int = 12, seed: int = 0) -> Probe:
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(M, N * D, generator=g, dtype=torch.float64) * torch.logspace(0, -2, N * D, dtype=torch.float64)
    F = torch.randn(N, D, generator=g, dtype=torch.float64)
    return Probe(F=F, f=lambda X: torch.tanh(A @ X.flatten()), layers=(0,), tokens_per_layer=N)


def test_exact_targets_match_the_dense_jacobian_and_hutchinson_block_norms_converge():
    probe = small_map()
    rows = targets.image_targets(probe, r=4, qs=(1, 2), oversample=3, block_norm_probes=8, seed=0, exact=True)
    J = dense_jacobian(probe.f, probe.F)                                    # (M, N·D)
    block = J.reshape(J.shape[0], 5, 3).pow(2).sum(dim=(0, 2)).numpy()       # ‖J_t‖_F²
    np.testing.assert_allclose(rows["exact/block_norm"], block, rtol=1e-5)
    S = torch.linalg.svdvals(J)
    np.testing.assert_allclose(rows["exact/sigma"], S[:4].numpy(), rtol=1e-5)
    np.testing.assert_allclose(rows["exact/frob2"], float(S.pow(2).sum()), rtol=1e-5)
    assert rows["q2/modes"].shape == (5, 3, 4) and rows["features"].shape == (5, 3)
    op = JacobianOperator(probe.f, probe.F)
    estimate = targets.block_norms(op, 4000, seed=1).numpy()
    np.testing.assert_allclose(estimate, block, rtol=0.1)


def tiny_probe_images():
    torch.manual_seed(0)
    host = build(dict(kind="cls", embed_dim=16, depth=3, num_heads=2, patch_size=8, img_size=32))
    return ProbeMap(host, "cls", [1]), torch.randn(5, 3, 32, 32)


def context(path) -> StageContext:
    return StageContext("targets", {}, {"test": path}, {}, "tiny")


def test_a_killed_build_resumes_to_the_same_bytes(tmp_path, monkeypatch):
    pm, images = tiny_probe_images()
    whole, resumed = tmp_path / "whole" / "test.h5", tmp_path / "resumed" / "test.h5"
    targets_stage.build_split(context(whole), "tiny", "test", pm, images, SETTINGS, 4, True)

    real, calls = targets.image_targets, []
    def dies_on_the_fourth_image(*args, **kw):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*args, **kw)
    monkeypatch.setattr(targets_stage, "image_targets", dies_on_the_fourth_image)
    with pytest.raises(KeyboardInterrupt):
        targets_stage.build_split(context(resumed), "tiny", "test", pm, images, SETTINGS, 4, True)
    assert not resumed.exists() and (resumed.parent / ".partial" / "test.h5").exists()
    monkeypatch.setattr(targets_stage, "image_targets", real)
    targets_stage.build_split(context(resumed), "tiny", "test", pm, images, SETTINGS, 4, True)
    assert resumed.read_bytes() == whole.read_bytes()
    t = targets.TargetFile.open(resumed)
    assert (t.num_items, t.r, t.qs, t.exact, t.tokens, t.dim) == (5, 4, (1, 2), True, 17, 16)
    assert t.sources() == ["exact", "q1", "q2"]


def test_a_rerun_restores_a_split_published_before_the_kill_without_recomputing(tmp_path, monkeypatch):
    pm, images = tiny_probe_images()
    path = tmp_path / "test.h5"
    targets_stage.build_split(context(path), "tiny", "test", pm, images, SETTINGS, 4, True)
    published = path.read_bytes()
    path.unlink()  # a rerun of the stage deletes its declared outputs first
    calls = []
    real = targets.image_targets
    monkeypatch.setattr(targets_stage, "image_targets", lambda *a, **k: calls.append(1) or real(*a, **k))
    targets_stage.build_split(context(path), "tiny", "test", pm, images, SETTINGS, 4, True)
    assert path.read_bytes() == published and len(calls) == 1   # only the first image, for the layout


def test_truncated_and_foreign_files_fail_naming_the_file(tmp_path):
    pm, images = tiny_probe_images()
    path = tmp_path / "test.h5"
    targets_stage.build_split(context(path), "tiny", "test", pm, images[:2], SETTINGS, 3, False)
    cut = tmp_path / "cut.h5"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(StoreError, match="cut.h5"):
        targets.TargetFile.open(cut)
    foreign = tmp_path / "foreign.h5"
    new_file(foreign, {"taskgeom_kind": "world"}, {"rgb": ((2,), "f4")}, 1).close()
    with pytest.raises(StoreError, match=r"foreign\.h5.*'targets'"):
        targets.TargetFile.open(foreign)
    with pytest.raises(StoreError, match="missing.h5"):
        targets.TargetFile.open(tmp_path / "missing.h5")


@pytest.mark.parametrize("in_memory", [0, targets.IN_MEMORY_BYTES], ids=["streamed", "in memory"])
def test_the_reader_gives_the_rows_of_each_step_and_only_those(tmp_path, in_memory):
    pm, images = tiny_probe_images()
    path = tmp_path / "test.h5"
    targets_stage.build_split(context(path), "tiny", "test", pm, images, SETTINGS, 3, False)
    t = targets.TargetFile.open(path)
    whole = t.read(("features", "block_norm"))
    assert targets.rows_bytes(t, ("features",), limit=4) == 4 * whole["features"][0].nbytes
    batches = targets.stream_batches(t, ("features", "block_norm"), 2, 6, seed=3, limit=4, in_memory=in_memory)
    for step, batch in enumerate(batches):
        idx = np.sort(np.random.default_rng([3, step]).choice(4, size=2, replace=False))
        np.testing.assert_array_equal(batch["features"], whole["features"][idx])
        np.testing.assert_array_equal(batch["block_norm"], whole["block_norm"][idx])
    with pytest.raises(KeyError):
        next(targets.stream_batches(t, ("no-such-dataset",), 2, 3, seed=0, in_memory=in_memory))
