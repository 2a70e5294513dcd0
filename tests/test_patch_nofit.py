"""``taskgeom.patch`` with no fit, and with a fit on its model fine-tuned, on a small random-weight
timm ViT (8×8 patch grid, 4 blocks): a method that learns nothing, patched with no fit, computes
bit for bit what it computes patched with a fit at the same block, and what the pipeline's
prune-cls reduction computes given no learned metric; importance and a missing or unusable block
are refused in one line; a fit patches its model with other weights and warns ``WeightsDiffer``
naming both digests, and is refused (``FitMismatch`` naming the field) by another architecture or
token layout."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import timm
import torch
from test_patch import fitted_for, one_line
from torch import nn

import taskgeom
from taskgeom.fitting import FitMismatch, check_model, load_fitted
from taskgeom.fitting.checkpoint import write_fit
from taskgeom.fitting.identity import describe
from taskgeom.inspection.hosts import as_host
from taskgeom.models.vit import Grid
from taskgeom.patching import PatchError, WeightsDiffer, patched
from taskgeom.prune.cls_merge import merged_forward
from taskgeom.prune.methods import METHODS
from taskgeom.prune.select import num_removed

SMALL = dict(depth=4, embed_dim=64, num_heads=2, img_size=32, patch_size=4, num_classes=20)
GRID = Grid(1, 8, 8)
UNLEARNED = [name for name, m in METHODS.items() if not m.learned]
VALID = "give 0 ≤ layer < 3"


def small(**kw) -> nn.Module:
    """The small ViT (``SMALL``, changed by ``kw``), its weights drawn from seed 0."""
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, **(SMALL | kw)).eval()


@pytest.fixture(scope="module")
def fit_dir(tmp_path_factory) -> Path:
    """A fit directory of ``small()`` at block 1 (random networks), as ``taskgeom fit`` writes one."""
    fit, directory = fitted_for(small(), 1, "logits", GRID, 64), tmp_path_factory.mktemp("fit")
    arch = {"head": {"kind": "importance_head", "tokens": 65, "dim": 64, "width": 16, "heads": 2, "layers": 1},
            "spn": {"kind": "spn", "tokens": 65, "dim": 64, "rank": 4, "width": 16, "depth": 1, "heads": 2}}
    record = {"layer": 1, "decoder": "logits", "path": "merge", "model": fit.model, "quality": {},
              "layout": {"prefix": 1, "rows": 8, "cols": 8, "tokens": 65, "dim": 64}}
    write_fit(directory, record, {"head": (fit.metric.head, arch["head"]), "spn": (fit.metric.spn, arch["spn"])},
              {"stage": "test"})
    return directory


def tokens_after(model: nn.Module, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The model's output on x and the number of tokens entering block ``layer + 1``."""
    seen = {}
    hook = model.blocks[layer + 1].register_forward_pre_hook(lambda m, a: seen.__setitem__("n", a[0].shape[1]))
    try:
        with torch.no_grad():
            return model(x), seen["n"]
    finally:
        hook.remove()


@pytest.mark.parametrize("layer, ratio", [(1, 0.5), (2, 0.25)])
@pytest.mark.parametrize("method", UNLEARNED)
def test_a_method_that_learns_nothing_patches_with_no_fit_as_with_one_and_as_the_pipeline(method, layer, ratio):
    """Bit for bit against the patch with a fit (the same blocks run the same operations; the fit
    is never read); to float tolerance against ``merged_forward`` given no metric, whose host runs
    the blocks through its own attention code rather than the model's forward."""
    model, x = small(), torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        full = model(x)
        want = merged_forward(as_host(copy.deepcopy(model)), "logits", x, layer, method, ratio, None,
                              torch.Generator().manual_seed(0))
    taskgeom.patch(model, fitted_for(model, layer, "logits", GRID, 64), ratio, method)
    with_fit, _ = tokens_after(model, layer, x)
    assert taskgeom.patch(model, ratio=ratio, method=method, layer=layer) is model
    without, running = tokens_after(model, layer, x)
    assert patched(model).fitted is None
    assert running == 65 - num_removed(64, ratio) + (method == "evit")          # EViT's fused token
    assert torch.equal(without, with_fit)
    torch.testing.assert_close(without, want, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(without, full, atol=1e-4)
    taskgeom.unpatch(model)
    with torch.no_grad():
        assert torch.equal(model(x), full)


def test_importance_with_no_fit_is_refused_in_one_line():
    model = small()
    for call in (dict(method="importance", layer=1), dict(layer=1), dict()):
        with pytest.raises(PatchError) as err:
            taskgeom.patch(model, ratio=0.5, **call)
        assert "method='importance'" in one_line(err) and "`taskgeom fit`" in str(err.value)
    assert patched(model) is None


def test_with_no_fit_the_layer_is_required_and_a_block_with_one_after_it():
    model = small()
    cases = ((None, "layer=None: with no fit"), (4, "the model has blocks 0 to 3"), (-1, "blocks 0 to 3"),
             (3, "block 3 is the model's last block"), ("1", "an integer"), (True, "an integer"), (1.0, "an integer"))
    for layer, words in cases:
        with pytest.raises(PatchError) as err:
            taskgeom.patch(model, ratio=0.5, method="tome_score", layer=layer)
        assert words in one_line(err) and VALID in str(err.value), layer
    assert patched(model) is None
    taskgeom.patch(model, ratio=0.5, method="tome_score", layer=2)
    assert patched(model).structure.blocks[2].forward.role == "reduce"


def test_with_a_fit_layer_is_the_fits_or_left_out(fit_dir):
    model = small()
    for layer in (2, True):
        with pytest.raises(PatchError) as err:
            taskgeom.patch(model, fit_dir, 0.5, "tome_score", layer=layer)
        assert "learned after block 1" in one_line(err)
    assert patched(model) is None
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        taskgeom.patch(model, fit_dir, 0.5, layer=1)
        given = model(x)
        taskgeom.patch(model, str(fit_dir), 0.5)                       # positional, as before
        assert torch.equal(model(x), given)


def test_a_fit_patches_its_model_fine_tuned_and_warns_that_the_weights_differ(fit_dir):
    model, x = small(), torch.randn(2, 3, 32, 32)
    tuned = copy.deepcopy(model)
    with torch.no_grad():
        tuned.blocks[2].mlp.fc1.weight[0, 0] += 0.5                   # one weight changed
    fitted = load_fitted(fit_dir)
    with torch.no_grad():                                              # the fit's networks on the new weights
        want = merged_forward(as_host(copy.deepcopy(tuned)), "logits", x, 1, "importance", 0.5, fitted.metric)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                 # its own weights: no warning
        taskgeom.patch(model, fit_dir)
        assert check_model(fitted, tuned, warn=False) is not None        # compare's call: the line, unwarned
        assert check_model(fitted, model) is None
    with pytest.warns(WeightsDiffer) as caught:
        taskgeom.patch(tuned, fit_dir, 0.5)
    (warning,) = caught
    text, then, now = str(warning.message), describe(model)["state_sha256"], describe(tuned)["state_sha256"]
    assert "\n" not in text and warning.filename == __file__
    assert f"weights differ from the fitted timm vit_tiny_patch16_224's (state sha256 {then} at fit time, {now} now)" \
        in text and "importance head and SPN were learned on the fitted weights" in text
    with torch.no_grad():
        torch.testing.assert_close(tuned(x), want, atol=1e-5, rtol=1e-4)
    with pytest.warns(WeightsDiffer):
        assert check_model(fitted, tuned) == text


def test_a_fit_is_refused_by_another_architecture_or_token_layout(fit_dir):
    cases = {"other architecture: this model has 3 blocks, the fitted timm vit_tiny_patch16_224 4 blocks":
             small(depth=3),
             "other token layout: this model has tokens of width 32": small(embed_dim=32),
             "other architecture: this model has 4 attention heads": small(num_heads=4),
             "other token layout: this model has 2 prefix tokens": small(reg_tokens=1),
             "other architecture: this model has outputs 10": small(num_classes=10)}
    for words, model in cases.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")                             # refused, with nothing warned
            with pytest.raises(FitMismatch) as err:
                taskgeom.patch(model, fit_dir, 0.5, "tome_score")
        assert words in one_line(err)
        assert patched(model) is None
