"""Aggregates over images: mean, std and a bootstrap interval that covers the mean."""

from __future__ import annotations

import numpy as np
import pytest

from taskgeom.evaluate.stats import spearman, summarize


def test_summary_holds_the_mean_and_an_interval_that_shrinks_with_n():
    rng = np.random.default_rng(0)
    small, large = summarize(rng.normal(1.0, 1.0, 20)), summarize(rng.normal(1.0, 1.0, 2000))
    for s in (small, large):
        assert s.low < s.mean < s.high
    assert (large.high - large.low) < 0.3 * (small.high - small.low)
    assert large.low < 1.0 < large.high and large.std == pytest.approx(1.0, rel=0.1)
    assert summarize([1, 2, 3], seed=4) == summarize([1, 2, 3], seed=4)            # seeded


def test_degenerate_and_bad_inputs():
    one = summarize([0.5])
    assert (one.mean, one.std, one.low, one.high, one.n) == (0.5, 0.0, 0.5, 0.5, 1)
    same = summarize([1.0, 1.0, 1.0])
    assert same.low == same.high == 1.0
    with pytest.raises(ValueError, match="non-finite"):
        summarize([1.0, float("nan")])
    with pytest.raises(ValueError, match="no values"):
        summarize([])


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="shapes"):
        spearman([1, 2], [1, 2, 3])
