"""The importance head learns a per-token target from features alone (held-out Spearman ρ beats
its random init), and its losses behave: the ranking loss prefers the target's order."""

from __future__ import annotations

import numpy as np
import torch

from taskgeom.evaluate.stats import spearman
from taskgeom.metric.head import ImportanceHead, head_loss, ranking_loss, standardized_log


def planted(n: int, N: int = 10, D: int = 8, seed: int = 0):
    """Features and a target that is a nonlinear function of each token's features and of its
    neighbours' (so attention helps, but a token's own features carry most of it)."""
    g = torch.Generator().manual_seed(seed)
    F = torch.randn(n, N, D, generator=g)
    target = torch.exp(2.0 * torch.tanh(F[..., 0] + 0.5 * F[..., 1] * F[..., 2])
                       + 0.3 * F[..., 3].mean(1, keepdim=True))
    return F, target


def mean_rho(head: ImportanceHead, F: torch.Tensor, target: torch.Tensor) -> float:
    with torch.no_grad():
        pred = head(F)
    return float(np.mean([spearman(p, t) for p, t in zip(pred.numpy(), target.numpy())]))


def test_a_few_training_steps_beat_the_random_init_on_held_out_images():
    torch.manual_seed(0)
    head = ImportanceHead(10, 8, width=32, heads=2)
    F_test, t_test = planted(64, seed=1)
    before = mean_rho(head, F_test, t_test)
    opt = torch.optim.Adam(head.parameters(), lr=3e-3)
    for step in range(200):
        F, t = planted(32, seed=100 + step)
        loss = head_loss(head(F), t, w_rank=0.5)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = mean_rho(head, F_test, t_test)
    assert after > 0.75 and after > before + 0.3, (before, after)


def test_ranking_loss_prefers_the_target_order_and_ignores_scale():
    _, t = planted(4)
    z = standardized_log(t)
    assert (float(ranking_loss(10 * z, t)) < float(ranking_loss(torch.zeros_like(z), t))
            < float(ranking_loss(-10 * z, t)))
    torch.testing.assert_close(standardized_log(t * 7.0), z)
