"""The power table's gap: σ_{r+p}/σ_r of the sketch, 1 where J's rank is below r (float64, a linear
probe whose singular values are known)."""

from __future__ import annotations

import pytest
import torch

from taskgeom.probes import Probe
from taskgeom.stages.diagnose import POWER_OVERSAMPLE, power_errors


def linear_probe(sigma: torch.Tensor, N: int = 8, D: int = 8) -> Probe:
    """f(F) = U diag(σ) Vᵀ vec(F): J's singular values are σ."""
    g = torch.Generator().manual_seed(0)
    U = torch.linalg.qr(torch.randn(len(sigma), len(sigma), generator=g, dtype=torch.float64))[0]
    V = torch.linalg.qr(torch.randn(N * D, len(sigma), generator=g, dtype=torch.float64))[0]
    J = U @ torch.diag(sigma) @ V.T
    return Probe(torch.randn(N, D, generator=g, dtype=torch.float64), lambda F: J @ F.reshape(-1), (0,), N)


def test_the_gap_is_the_sketchs_last_ritz_value_over_the_rth():
    sigma = 0.8 ** torch.arange(40, dtype=torch.float64)
    errors = power_errors(linear_probe(sigma), 4, [0, 2], None, 8, seed=0)
    # the last Ritz value at q = 2 estimates σ_{r+p} from below, to well within 1%
    assert errors["gap"] == pytest.approx(float(sigma[4 + POWER_OVERSAMPLE - 1] / sigma[3]), rel=1e-2)
    assert errors["q2"] < errors["q0"]


def test_a_jacobian_of_rank_below_r_has_no_gap():
    sigma = torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)
    assert power_errors(linear_probe(sigma), 4, [0, 2], None, 8, seed=0)["gap"] == 1.0
