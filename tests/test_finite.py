"""Non-finite guards: readers name the file and row of a NaN, training stops at the first
non-finite step naming the stage, step and batch, and a non-finite metric is not published."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch
from test_targets import SETTINGS, context, tiny_probe_images

from taskgeom.finite import NonFiniteError, check_metrics, check_step, require_finite
from taskgeom.metric import targets
from taskgeom.metric.fit import fit
from taskgeom.stages import targets as targets_stage


def test_require_finite_names_the_first_bad_item_and_lets_integers_pass():
    values = np.zeros((4, 2, 2), dtype=np.float32)
    values[2, 1, 0] = np.inf
    values[3, 0, 0] = np.nan
    with pytest.raises(NonFiniteError, match=r"depth: f\.h5\[12\] holds a non-finite value"):
        require_finite(values, "depth", lambda i: f"f.h5[{10 + i}]")
    require_finite(np.arange(6).reshape(3, 2), "labels")
    require_finite(torch.ones(3), "ones")


@pytest.fixture
def cache(tmp_path):
    """A finished target cache of 5 images with a NaN written into row 3's features."""
    pm, images = tiny_probe_images()
    path = tmp_path / "train.h5"
    targets_stage.build_split(context(path), "tiny", "test", pm, images, SETTINGS, 4, True)
    with h5py.File(path, "r+") as f:
        f["features"][3, 0, 0] = np.nan
    return targets.TargetFile.open(path)


def test_a_target_cache_with_a_nan_is_refused_naming_the_file_and_row(cache):
    assert cache.read(("features",), slice(0, 3))["features"].shape[0] == 3
    with pytest.raises(NonFiniteError, match=rf"{cache.path}: features: row 3 holds"):
        cache.read(("features",))
    for in_memory in (0, targets.IN_MEMORY_BYTES):  # streamed, and read whole
        batches = targets.stream_batches(cache, ("features",), batch_size=5, steps=1, seed=0, in_memory=in_memory)
        with pytest.raises(NonFiniteError, match="row 3"):
            next(batches)


def test_training_stops_at_the_first_non_finite_step_naming_stage_step_and_rows(cache):
    model = torch.nn.Linear(16, 1)
    calls = []

    def loss(m, b):
        calls.append(1)
        out = m(b["q1/sigma"][:, :1].repeat(1, 16)).mean()
        return out * (float("nan") if len(calls) == 3 else 1.0)

    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(NonFiniteError, match=r"spn x q1 seed 0: non-finite loss \(nan\) at step 3, batch of rows "
                                             rf"\[\d(, \d)*\] of {cache.path}"):
        fit(model, cache, ("q1/sigma",), loss, steps=10, batch_size=2, lr=0.01, seed=0, device="cpu", limit=3,
            stage="spn x q1 seed 0")
    assert len(calls) == 3 and all(torch.isfinite(p).all() for p in model.parameters())
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))   # two steps were taken


def test_a_non_finite_gradient_is_named_and_a_non_finite_metric_is_not_published():
    with pytest.raises(NonFiniteError, match="zoo m: non-finite gradient norm .* at step 7, batch of items"):
        check_step("zoo m", 6, torch.tensor(0.5), torch.tensor(float("inf")), lambda: "of items [1, 2]")
    check_step("zoo m", 6, torch.tensor(0.5), torch.tensor(2.0), lambda: pytest.fail("described a good batch"))
    with pytest.raises(NonFiniteError, match=r"head h seed 1: non-finite metric\(s\) rho_test; nothing"):
        check_metrics("head h seed 1", {"seed": 1, "rho_test": float("nan"), "rho_val": 0.3})
    check_metrics("head h seed 1", {"seed": 1, "rho_test": 0.2, "nested": {"x": [1.0, np.float32(2)]}})
