"""Training from a cached target file: a head trained for a few steps on a tiny cache beats its
random initialisation on held-out images, and V1 of an SPN whose modes are the exact subspace is 1."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from taskgeom.metric import targets
from taskgeom.metric.fit import fit, predict
from taskgeom.metric.head import ImportanceHead, head_loss
from taskgeom.metric.spn import PredictedMetric
from taskgeom.models.zoo import build
from taskgeom.pipeline.runtime import StageContext
from taskgeom.probes import ProbeMap
from taskgeom.stages import targets as targets_stage
from taskgeom.stages.head import rho_per_image
from taskgeom.stages.spn import v1_per_image

SETTINGS = {"power_iters": 1, "oversample": 2, "block_norm_probes": 4, "exact": {"max_dim": 100}, "block": 8, "seed": 0}


def tiny_cache(tmp_path, split: str, images: torch.Tensor) -> targets.TargetFile:
    torch.manual_seed(0)
    host = build(dict(kind="cls", embed_dim=16, depth=3, num_heads=2, patch_size=8, img_size=32))
    path = tmp_path / f"{split}.h5"
    targets_stage.build_split(StageContext("targets", {}, {split: path}, {}, "tiny"), "tiny", split,
                              ProbeMap(host, "cls", [1]), images, SETTINGS, 4, True)
    return targets.TargetFile.open(path)


def test_a_head_trained_a_few_steps_on_a_tiny_cache_beats_its_random_init(tmp_path):
    g = torch.Generator().manual_seed(1)
    train = tiny_cache(tmp_path, "train", torch.randn(24, 3, 32, 32, generator=g))
    test = tiny_cache(tmp_path, "test", torch.randn(8, 3, 32, 32, generator=g))
    key = "exact/importance"
    truth = test.read((key,))[key]
    torch.manual_seed(0)
    head = ImportanceHead(train.tokens, train.dim, width=16, heads=2)
    score = lambda m, F: m(F)
    before = rho_per_image(predict(head, test, score, "cpu"), truth).mean()
    curve = fit(head, train, ("features", key), lambda m, b: head_loss(m(b["features"]), b[key], 0.5), steps=80,
                batch_size=8, lr=3e-3, seed=0, device="cpu")
    after = rho_per_image(predict(head, test, score, "cpu"), truth).mean()
    assert after > before + 0.2 and after > 0.5, (before, after)
    assert curve.points[-1][1] < curve.points[0][1]


class ExactModes(nn.Module):
    """An 'SPN' that returns each image's exact modes, looked up by its features."""

    def __init__(self, cache: targets.TargetFile):
        super().__init__()
        rows = cache.read(("features", "exact/modes"))
        self.table = {f.tobytes(): torch.as_tensor(v).flatten(0, 1)
                      for f, v in zip(rows["features"], rows["exact/modes"])}

    def forward(self, F: torch.Tensor) -> PredictedMetric:
        U = torch.stack([self.table[f.numpy().astype(np.float32).tobytes()] for f in F])
        return PredictedMetric(U=U, lam=torch.ones(len(F), U.shape[-1]), eps=torch.ones(len(F)))


def test_v1_of_modes_set_to_the_exact_subspace_is_one(tmp_path):
    test = tiny_cache(tmp_path, "test", torch.randn(6, 3, 32, 32, generator=torch.Generator().manual_seed(2)))
    reference = test.read(("exact/modes",))["exact/modes"]
    v1 = v1_per_image(ExactModes(test), test, reference, "cpu")
    np.testing.assert_allclose(v1, 1.0, atol=1e-5)
