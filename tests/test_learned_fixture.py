"""The learned fixture models (``fixtures.learned_vit``): each learned its task (held-out top-1 at
least 8× chance), the accuracy it records is the model's own, and the cache trains once."""

from __future__ import annotations

import json

import pytest
import torch

from taskgeom.fixtures import learned_vit


@pytest.mark.long
@pytest.mark.parametrize("arch", sorted(learned_vit.ARCHITECTURES))
def test_each_learned_fixture_classifies_the_world_well_above_chance(arch):
    """Trains once per machine when not cached (minutes), then re-measures the recorded accuracy."""
    learned = learned_vit.learned_model(arch)
    assert learned.accuracy >= 8 * learned_vit.CHANCE
    assert learned_vit.held_out_accuracy(learned.model) == pytest.approx(learned.accuracy, abs=1e-9)


def test_the_cache_trains_once_and_keys_by_recipe(tmp_path, monkeypatch):
    monkeypatch.setenv("TASKGEOM_FIXTURE_CACHE", str(tmp_path))
    monkeypatch.setattr(learned_vit, "RECIPE", dict(learned_vit.RECIPE, scenes=8, steps=2, batch=4))
    monkeypatch.setattr(learned_vit, "HELD_OUT", 8)
    first = learned_vit.learned_model("deit", seed=3)
    assert first.weights.parent == tmp_path and len(list(tmp_path.glob("deit-seed3-*"))) == 2
    record = json.loads(first.weights.with_suffix(".json").read_text())
    assert record["accuracy"] == first.accuracy and record["recipe"]["steps"] == 2

    def no_training(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(learned_vit, "train", no_training)
    again = learned_vit.learned_model("deit", seed=3)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(again.model(x), first.model(x), rtol=0, atol=0)
    assert again.accuracy == first.accuracy
    monkeypatch.setattr(learned_vit, "RECIPE", dict(learned_vit.RECIPE, steps=3))
    with pytest.raises(AssertionError, match="trained again"):
        learned_vit.learned_model("deit", seed=3)
    with pytest.raises(ValueError, match="arch 'convnet' unknown"):
        learned_vit.learned_model("convnet")
