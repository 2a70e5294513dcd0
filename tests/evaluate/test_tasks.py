"""Task metrics: depth δ1 before and after per-image median scaling."""

import torch

from taskgeom.evaluate.tasks import depth_metrics, median_scaled


def test_median_scaling_removes_each_maps_own_scale_and_only_that():
    torch.manual_seed(0)
    target = 1.0 + 4.0 * torch.rand(3, 8, 8)
    target[0, 0, :] = 100.0  # sky at the far plane: not valid, not in the median
    scales = torch.tensor([2.0, 0.5, 1.6]).view(3, 1, 1)
    pred = target * scales
    assert depth_metrics(pred, target, max_depth=100.0)["delta1"] == 0.0
    torch.testing.assert_close(median_scaled(pred, target, max_depth=100.0), target)
    shaped = pred * (1.0 + 0.5 * (torch.arange(8) % 2)).view(1, 1, 8)  # a shape error scaling cannot undo
    assert depth_metrics(median_scaled(shaped, target, 100.0), target, 100.0)["delta1"] < 1.0
