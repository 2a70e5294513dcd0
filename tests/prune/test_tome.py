"""ToMe's bipartite soft matching against a direct re-derivation of the reference algorithm."""

from __future__ import annotations

import math

import pytest
import torch

from taskgeom.prune.tome import bipartite_soft_matching, merge_wavg, tome_score


def reference_merge(metric: torch.Tensor, x: torch.Tensor, r: int, class_token: bool) -> torch.Tensor:
    """One image, written out with loops: alternate tokens into A (even) and B (odd), match each A
    token to its most cosine-similar B token (never the class token out of A), merge the r A tokens
    with the best matches into their partners by averaging (the partner included), and return the
    unmerged A tokens followed by every B token. The unmerged A tokens come in order of decreasing
    best similarity; with a class token, in token order (so the class token stays first)."""
    n = metric.shape[0]
    unit = [metric[i] / metric[i].norm() for i in range(n)]
    a_ids, b_ids = list(range(0, n, 2)), list(range(1, n, 2))
    best = {}
    for i in a_ids:
        sims = [float(unit[i] @ unit[j]) for j in b_ids]
        if class_token and i == 0:
            sims = [-math.inf] * len(b_ids)
        j = max(range(len(b_ids)), key=lambda k: (sims[k], -k))
        best[i] = (sims[j], b_ids[j])
    order = sorted(a_ids, key=lambda i: -best[i][0])
    merged = set(order[:r])
    sums = {j: [x[j].clone()] for j in b_ids}
    for i in merged:
        sums[best[i][1]].append(x[i])
    rest = sorted(order[r:]) if class_token else order[r:]
    unmerged = [x[i] for i in rest]
    dst = [torch.stack(sums[j]).mean(0) for j in b_ids]
    return torch.stack(unmerged + dst)


@pytest.mark.parametrize("class_token", [True, False])
@pytest.mark.parametrize("n,r", [(9, 3), (16, 5), (17, 8)])
def test_merge_matches_the_reference_algorithm(n, r, class_token):
    g = torch.Generator().manual_seed(n * 10 + r)
    metric = torch.randn(3, n, 6, generator=g, dtype=torch.float64)
    x = torch.randn(3, n, 5, generator=g, dtype=torch.float64)
    merge, _ = bipartite_soft_matching(metric, r, class_token=class_token)
    out = merge(x, mode="mean")
    assert out.shape == (3, n - r, 5)
    for b in range(3):
        torch.testing.assert_close(out[b], reference_merge(metric[b], x[b], r, class_token))


def test_class_token_stays_first_and_unmerged():
    g = torch.Generator().manual_seed(0)
    metric = torch.randn(2, 11, 4, generator=g)
    metric[:, 0] = metric[:, 1]  # the class token's best partner is perfect: still protected
    x = torch.randn(2, 11, 3, generator=g)
    merge, _ = bipartite_soft_matching(metric, 5, class_token=True)
    torch.testing.assert_close(merge(x)[:, 0], x[:, 0])


def test_r_zero_is_the_identity_and_r_is_capped():
    x = torch.randn(2, 9, 4)
    merge, unmerge = bipartite_soft_matching(x, 0)
    assert merge(x) is x and unmerge(x) is x
    merge, _ = bipartite_soft_matching(x, 100, class_token=True)
    assert merge(x).shape[1] == 9 - 4  # at most half the unprotected tokens


def test_unmerge_puts_every_token_back_in_place():
    g = torch.Generator().manual_seed(1)
    metric = torch.randn(2, 12, 4, generator=g)
    x = torch.randn(2, 12, 3, generator=g)
    r = 4
    merge, unmerge = bipartite_soft_matching(metric, r)
    merged = merge(x)
    back = unmerge(merged)
    assert back.shape == x.shape
    for b in range(2):
        dst = back[b, 1::2]
        torch.testing.assert_close(dst, merged[b, -6:])  # B tokens at their places, merged values
        moved = [i for i in range(0, 12, 2) if not torch.equal(back[b, i], x[b, i])]
        assert len(moved) == r  # exactly the merged A tokens changed...
        for i in moved:  # ...each now a copy of its destination
            assert any(torch.equal(back[b, i], d) for d in dst)


def test_size_weighted_average_keeps_mass():
    g = torch.Generator().manual_seed(2)
    metric = torch.randn(1, 10, 4, generator=g)
    x = torch.randn(1, 10, 3, generator=g, dtype=torch.float64)
    size = torch.randint(1, 4, (1, 10, 1), generator=g).double()
    merge, _ = bipartite_soft_matching(metric, 4)
    merged, new_size = merge_wavg(merge, x, size)
    torch.testing.assert_close((merged * new_size).sum(1), (x * size).sum(1))
    assert float(new_size.sum()) == float(size.sum())


def test_tome_score_is_one_minus_the_best_other_cosine():
    keys = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])
    torch.testing.assert_close(tome_score(keys), torch.tensor([[0.0, 0.0, 1.0]]))
