"""k-NN classification, FLOP counting, paired tests."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from taskgeom.evaluate.cost import count_flops, interleaved_wall_clock
from taskgeom.evaluate.knn import knn_correct
from taskgeom.evaluate.stats import wilcoxon_p


def test_knn_votes_by_similarity():
    bank = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    labels = torch.tensor([0, 0, 1, 1])
    queries = torch.tensor([[1.0, 0.05], [0.05, 1.0], [1.0, 0.0]])
    truth = torch.tensor([0, 1, 1])
    assert knn_correct(bank, labels, queries, truth, k=2).tolist() == [True, True, False]


def test_flops_of_a_linear_layer_and_of_attention():
    layer = nn.Linear(8, 4)
    assert count_flops(lambda: layer(torch.randn(3, 8))) == 2 * 3 * 8 * 4
    from timm.models.vision_transformer import Attention

    attn = Attention(16, num_heads=2).eval()
    x = torch.randn(1, 10, 16)
    projections = 2 * 10 * 16 * (3 * 16) + 2 * 10 * 16 * 16
    assert count_flops(lambda: attn(x), attn) == projections + 2 * (2 * 2 * 10 * 10 * 8)
    assert attn.fused_attn  # restored after counting


def test_flops_of_a_torch_transformer_layer_on_its_fast_path():
    """nn.TransformerEncoderLayer in eval mode under no_grad takes torch's fused fast path (the
    importance head and the SPN do); every matrix product and the attention still count."""
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True).eval()
    x = torch.randn(1, 10, 16)
    projections = 2 * 10 * 16 * (3 * 16) + 2 * 10 * 16 * 16
    mlp = 2 * 10 * 16 * 32 * 2
    attention = 2 * (2 * 2 * 10 * 10 * 8)
    assert count_flops(lambda: layer(x)) == projections + mlp + attention
    assert torch.backends.mha.get_fastpath_enabled()  # restored after counting


def test_wall_clock_runs_every_function():
    calls = {"a": 0, "b": 0}
    times = interleaved_wall_clock({k: (lambda k=k: calls.__setitem__(k, calls[k] + 1)) for k in calls}, repeats=3)
    assert calls == {"a": 4, "b": 4} and all(t >= 0 for t in times.values())


def test_wilcoxon_detects_a_consistent_shift():
    rng = np.random.default_rng(0)
    a = rng.normal(size=40)
    assert wilcoxon_p(a, a + 0.5 + 0.01 * rng.normal(size=40)) < 1e-6
    assert math.isnan(wilcoxon_p(a, a))
