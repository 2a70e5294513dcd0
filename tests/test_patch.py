"""``taskgeom.patch`` / ``unpatch`` on tiny random-weight models of real architectures (timm ViT and
EVA, transformers ViT, DINOv2 with registers, Depth Anything): η = 0 changes nothing, the patched
model's own forward computes what the pipeline's reductions compute, the tokens kept are the ones
a method scores highest, a method that learns nothing computes the same patched with no fit, it
runs under no_grad, inference_mode and bfloat16 autocast, gradients reach the backbone and not the
fit, unpatch restores the model bit for bit, a fit patches its model with other weights and warns,
and every refusal is one line (tests/test_patch_nofit.py: the patch with no fit, fine-tuned weights)."""

from __future__ import annotations

import copy
import dataclasses
import warnings
from pathlib import Path

import pytest
import timm
import torch
from torch import nn

import taskgeom
from taskgeom.fitting import FitMismatch
from taskgeom.fitting.checkpoint import Fitted, write_fit
from taskgeom.fitting.identity import describe
from taskgeom.inspection.hosts import as_host
from taskgeom.metric.head import ImportanceHead
from taskgeom.metric.spn import SpectralPullbackNetwork
from taskgeom.models.vit import Grid
from taskgeom.patching import PatchError, WeightsDiffer, patched
from taskgeom.patching.families import structure
from taskgeom.prune.cls_merge import merged_forward
from taskgeom.prune.llf import pruned_forward
from taskgeom.prune.methods import METHODS, NAMES
from taskgeom.prune.scores import LearnedMetric
from taskgeom.prune.select import num_removed

ARGS = dict(depth=4, embed_dim=32, num_heads=2, img_size=32, patch_size=8, num_classes=5, dynamic_img_size=True)
SCORED = [n for n in NAMES if METHODS[n].score is not None]


def timm_vit(**kw) -> nn.Module:
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, **(ARGS | kw)).eval()


def fitted_for(model: nn.Module, layer: int, decoder: str, grid: Grid, dim: int, *, path: str = "merge",
               spn: bool = True, head: nn.Module | None = None) -> Fitted:
    """A fit of ``model`` with random networks (what patching reads of a fit; the quality is not tested here)."""
    torch.manual_seed(1)
    tokens = grid.prefix + grid.rows * grid.cols
    metric = LearnedMetric(head or ImportanceHead(tokens, dim, 16), grid,
                           SpectralPullbackNetwork(tokens, dim, 4, 16, 1, 2) if spn else None)
    return Fitted(metric, layer, decoder, path, describe(model), {"prefix": grid.prefix, "dim": dim}, {}, {},
                  Path("fit-dir"), {})


@pytest.fixture(scope="module")
def vit():
    return timm_vit(global_pool="token")


@pytest.fixture(scope="module")
def hf_models():
    from transformers import (
        DepthAnythingForDepthEstimation,
        Dinov2WithRegistersConfig,
        Dinov2WithRegistersModel,
        ViTConfig,
        ViTForImageClassification,
    )

    from taskgeom.models.adapters import PAPER_MODELS, depth_anything_config

    torch.manual_seed(0)
    small = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64, image_size=28,
                 patch_size=7)
    return {"vit": ViTForImageClassification(ViTConfig(num_labels=9, **small)).eval(),
            "registers": Dinov2WithRegistersModel(Dinov2WithRegistersConfig(num_register_tokens=2, **small)).eval(),
            "depth": DepthAnythingForDepthEstimation(
                depth_anything_config(**PAPER_MODELS["depth-anything-v2"].tiny)).eval()}


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert text and "\n" not in text
    return text


def test_ratio_zero_leaves_every_output_equal(vit, hf_models):
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        ref, feats = vit(x), vit.forward_features(x)
        for method in NAMES:
            taskgeom.patch(vit, fitted_for(vit, 1, "logits", Grid(1, 4, 4), 32), 0.0, method)
            assert torch.equal(vit(x), ref) and torch.equal(vit.forward_features(x), feats)
        taskgeom.unpatch(vit)
        pixels = torch.randn(2, 3, 28, 28)
        for name, model in hf_models.items():
            dense = name == "depth"
            field = "predicted_depth" if dense else "logits" if name == "vit" else "last_hidden_state"
            before = getattr(model(pixel_values=pixels), field)
            fit = fitted_for(model, 0, "depth" if dense else "cls", Grid(3 if name == "registers" else 1, 4, 4), 32,
                             path="prune" if dense else "merge")
            taskgeom.patch(model, fit, 0.0, "importance")
            assert torch.equal(getattr(model(pixel_values=pixels), field), before), name
            taskgeom.unpatch(model)


def same_without_fit(model: nn.Module, fit: Fitted, method: str, output, with_fit: torch.Tensor) -> None:
    """A method that learns nothing, patched with no fit at the fit's block (same ratio, seed 0):
    the first forward computes ``with_fit``, the first forward patched with the fit, bit for bit
    (the same operations on the same tokens; the fit is never read)."""
    if METHODS[method].learned:
        return
    taskgeom.patch(model, ratio=0.5, method=method, layer=fit.layer)
    assert patched(model).fitted is None
    assert torch.equal(output(), with_fit)


@pytest.mark.parametrize("method", NAMES)
def test_the_patched_forward_computes_the_pipelines_reduction(method, vit, hf_models):
    """timm: ``merged_forward`` (prune-cls); DINOv2 with registers: the same through the registry's
    DINOv2 attention blocks; Depth Anything: ``pruned_forward`` with last-layer fusion (prune-dense).
    A method that learns nothing is given the pipeline no metric, and patched with no fit too."""
    from taskgeom.prune.hf_blocks import Dinov2AttentionBlock

    x, pixels = torch.randn(3, 3, 40, 48), torch.randn(2, 3, 28, 42)    # grids other than the fit's
    fit = fitted_for(vit, 1, "logits", Grid(1, 4, 4), 32)
    registers, depth = hf_models["registers"], hf_models["depth"]
    reg_host = as_host(copy.deepcopy(registers))
    reg_host.pruning_block = lambda i, ctx, positions=None: Dinov2AttentionBlock(reg_host.layers[i])
    reg_fit = fitted_for(registers, 0, "cls", Grid(3, 4, 4), 32)
    depth_fit = fitted_for(depth, 1, "depth", Grid(1, 4, 4), 32, path="prune")
    metric = (lambda f: f.metric) if METHODS[method].learned else (lambda f: None)
    run = {"vit": lambda: vit(x), "registers": lambda: registers(pixel_values=pixels).last_hidden_state[:, 0],
           "depth": lambda: depth(pixel_values=pixels).predicted_depth.flatten(1)}
    with torch.no_grad():
        want = merged_forward(as_host(copy.deepcopy(vit)), "logits", x, 1, method, 0.5, metric(fit),
                              torch.Generator().manual_seed(0))
        taskgeom.patch(vit, fit, 0.5, method)
        torch.testing.assert_close(got := run["vit"](), want, atol=1e-5, rtol=1e-4)
        same_without_fit(vit, fit, method, run["vit"], got)
        want = merged_forward(reg_host, "cls", pixels, 0, method, 0.5, metric(reg_fit),
                              torch.Generator().manual_seed(0))
        taskgeom.patch(registers, reg_fit, 0.5, method)
        torch.testing.assert_close(got := run["registers"](), want, atol=1e-5, rtol=1e-4)
        same_without_fit(registers, reg_fit, method, run["registers"], got)
        want = pruned_forward(as_host(copy.deepcopy(depth)), "depth", pixels, [1], method, 0.5, True,
                              metric(depth_fit), torch.Generator().manual_seed(0))
        taskgeom.patch(depth, depth_fit, 0.5, method)
        torch.testing.assert_close(got := run["depth"](), want, atol=1e-6, rtol=1e-4)
        same_without_fit(depth, depth_fit, method, run["depth"], got)
    for model in (vit, registers, depth):
        taskgeom.unpatch(model)


def test_eva_runs_kept_tokens_with_their_rotary_rows():
    torch.manual_seed(0)
    eva = timm.create_model("eva02_tiny_patch14_224", pretrained=False, depth=3, img_size=28, num_classes=3,
                            global_pool="token", dynamic_img_size=True).eval()
    fit = fitted_for(eva, 0, "logits", Grid(1, 2, 2), eva.embed_dim)
    x = torch.randn(2, 3, 42, 56)
    with torch.no_grad():
        for method in ("importance", "random", "tome_score"):
            want = merged_forward(as_host(copy.deepcopy(eva)), "logits", x, 0, method, 0.5, fit.metric,
                                  torch.Generator().manual_seed(0))
            taskgeom.patch(eva, fit, 0.5, method)
            torch.testing.assert_close(eva(x), want, atol=1e-6, rtol=1e-4)
    for method in ("evit", "tome"):
        for with_fit in (dict(fit=fit), dict(layer=0)):
            with pytest.raises(PatchError) as err:
                taskgeom.patch(eva, ratio=0.5, method=method, **with_fit)
            assert "rotary" in one_line(err)


class FirstFeature(nn.Module):
    """An importance head that scores each token by its first feature."""

    def __init__(self, tokens: int, width: int = 16):
        super().__init__()
        self.pos = nn.Parameter(torch.zeros(tokens, width))

    def forward(self, F, pos=None):
        return F[..., 0] + 0 * pos.sum(-1)


@pytest.mark.parametrize("method", NAMES)
def test_the_tokens_kept_are_the_ones_the_method_scores_highest(method, vit, monkeypatch):
    """Every scored method's score is planted (the first feature of each token the fit's block
    outputs): the kept positions are the N − k best; tome keeps N − k tokens by its matching."""
    planted = lambda h, idx, stats, grid, learned, generator: h[..., 0]        # noqa: E731
    if METHODS[method].score is not None and method != "importance":
        monkeypatch.setitem(METHODS, method, dataclasses.replace(METHODS[method], score=planted))
    fit = fitted_for(vit, 1, "logits", Grid(1, 4, 4), 32, head=FirstFeature(17))
    x = torch.randn(4, 3, 32, 32)
    seen = {}
    hooks = [vit.blocks[1].register_forward_hook(lambda m, a, out: seen.__setitem__("h", out)),
             vit.blocks[2].register_forward_pre_hook(lambda m, a: seen.__setitem__("n", a[0].shape[1]))]
    with torch.no_grad():
        vit(x)
        h = seen["h"]
        taskgeom.patch(vit, fit, 0.5, method)
        vit(x)
    for hook in hooks:
        hook.remove()
    k = num_removed(16, 0.5)
    assert seen["n"] == 17 - k + (method == "evit")
    kept = patched(vit).kept
    if method != "tome":
        best = h[:, 1:, 0].argsort(dim=1, descending=True)[:, :16 - k] + 1
        assert torch.equal(kept[:, 1:], best.sort(dim=1).values) and (kept[:, 0] == 0).all()
    taskgeom.unpatch(vit)


@pytest.mark.parametrize("method", ["importance", "tome"])
def test_it_runs_under_no_grad_inference_mode_and_bfloat16_autocast(method, vit, hf_models):
    fit = fitted_for(vit, 1, "logits", Grid(1, 4, 4), 32)
    x = torch.randn(2, 3, 32, 32)
    taskgeom.patch(vit, fit, 0.5, method)
    with torch.no_grad():
        a = vit(x)
    with torch.inference_mode():
        b = vit(x)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        c = vit(x)
    assert torch.equal(a, b) and c.dtype == torch.bfloat16 and torch.allclose(c.float(), a, atol=0.1)
    taskgeom.unpatch(vit)
    model = hf_models["vit"]
    taskgeom.patch(model, fitted_for(model, 0, "logits", Grid(1, 4, 4), 32), 0.5, method)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(pixel_values=torch.randn(2, 3, 28, 28)).logits.shape == (2, 9)
    taskgeom.unpatch(model)


@pytest.mark.parametrize("method", ["importance", "evit", "tome"])
def test_gradients_reach_the_backbone_and_not_the_fit(method, vit):
    model = copy.deepcopy(vit).train()
    fit = fitted_for(model, 1, "logits", Grid(1, 4, 4), 32)
    taskgeom.patch(model, fit, 0.5, method)
    model(torch.randn(2, 3, 32, 32)).square().sum().backward()
    for part in (model.patch_embed, model.blocks[0], model.blocks[3], model.head):
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters())
    nets = [*fit.metric.head.parameters(), *fit.metric.spn.parameters()]
    assert all(p.grad is None and not p.requires_grad for p in nets)


def test_unpatch_restores_the_model_bit_for_bit(vit, hf_models):
    x = torch.randn(2, 3, 32, 32)
    keys = list(vit.state_dict())
    with torch.no_grad():
        before = vit(x)
        taskgeom.patch(vit, fitted_for(vit, 1, "logits", Grid(1, 4, 4), 32), 0.5, "importance")
        assert not torch.equal(vit(x), before) and list(vit.state_dict()) == keys
        taskgeom.patch(vit, fitted_for(vit, 2, "logits", Grid(1, 4, 4), 32), 0.25, "random")   # patched again
        taskgeom.unpatch(vit)
        assert torch.equal(vit(x), before) and patched(vit) is None
    assert all("forward" not in b.__dict__ for b in vit.blocks) and not vit.patch_embed._forward_pre_hooks
    assert taskgeom.unpatch(vit) is vit                                          # not patched: left as it is
    depth, pixels = hf_models["depth"], torch.randn(1, 3, 28, 28)
    with torch.no_grad():
        before = depth(pixel_values=pixels).predicted_depth
        taskgeom.patch(depth, fitted_for(depth, 0, "depth", Grid(1, 4, 4), 32, path="prune"), 0.5, "tome")
        depth(pixel_values=pixels)
        taskgeom.unpatch(depth)
        assert torch.equal(depth(pixel_values=pixels).predicted_depth, before)


def test_a_fit_for_another_model_or_token_layout_is_refused_in_one_line(vit):
    deeper = timm_vit(depth=5, global_pool="token")
    wider = timm_vit(embed_dim=48, global_pool="token")
    registers = timm_vit(reg_tokens=2, global_pool="token")
    fit = fitted_for(vit, 1, "logits", Grid(1, 4, 4), 32)
    for model, words in ((deeper, "other architecture: this model has 5 blocks"),
                         (wider, "other token layout: this model has tokens of width 48"),
                         (registers, "other token layout: this model has 3 prefix tokens")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")                  # refused before anything is warned
            with pytest.raises(FitMismatch) as err:
                taskgeom.patch(model, fit)
        assert words in one_line(err)
        assert patched(model) is None


def test_a_fit_patches_its_model_with_other_weights_and_warns_in_one_line(vit):
    other_weights = timm_vit(global_pool="token")
    with torch.no_grad():
        other_weights.head.bias.add_(1.0)
    fit = fitted_for(vit, 1, "logits", Grid(1, 4, 4), 32)
    with pytest.warns(WeightsDiffer) as caught:
        taskgeom.patch(other_weights, fit)
    (warning,) = caught
    assert warning.filename == __file__ and "\n" not in str(warning.message)
    assert f"{describe(other_weights)['state_sha256']} now" in str(warning.message)
    assert patched(other_weights).fitted is fit


def test_with_no_fit_a_dense_model_takes_the_prune_path_before_its_last_read_block(hf_models):
    depth = hf_models["depth"]
    last = structure(depth).last
    with pytest.raises(PatchError) as err:
        taskgeom.patch(depth, ratio=0.5, method="tome", layer=last)
    assert f"the decoder's last read block is {last}, and every token is back before it" in one_line(err)
    taskgeom.patch(depth, ratio=0.5, method="tome", layer=last - 1)
    assert patched(depth).structure.path == "prune" and patched(depth).fitted is None
    taskgeom.unpatch(depth)


def test_bad_settings_models_and_fits_are_refused_in_one_line(vit, hf_models, tmp_path):
    fit = fitted_for(vit, 1, "logits", Grid(1, 4, 4), 32)
    for ratio in (1.0, -0.1, "0.5", True, float("nan")):
        with pytest.raises(PatchError) as err:
            taskgeom.patch(vit, fit, ratio)
        assert "must be a number in [0, 1)" in one_line(err)
    with pytest.raises(PatchError) as err:
        taskgeom.patch(vit, fit, 0.5, "nearest")
    assert "known: random, tome_score, evit, tome, importance" in one_line(err)
    with pytest.raises(PatchError) as err:
        taskgeom.patch(nn.Linear(3, 3), fit)
    assert "supported: timm VisionTransformer" in one_line(err)
    cases = ((fitted_for(vit, 3, "logits", Grid(1, 4, 4), 32), "importance", "refit at an earlier block"),
             (fitted_for(vit, 1, "logits", Grid(1, 4, 4), 32, spn=False), "importance", "--spn on"),
             (fitted_for(vit, 1, "logits", Grid(1, 4, 4), 32, path="prune"), "random", "the merge path"))
    for bad, method, words in cases:
        with pytest.raises(PatchError) as err:
            taskgeom.patch(vit, bad, 0.5, method)
        assert words in one_line(err)
    with pytest.raises(PatchError) as err:
        taskgeom.patch(vit, tmp_path / "no-fit")
    assert "no such file" in one_line(err)
    assert patched(vit) is None


def test_patch_from_the_directory_a_fit_writes(vit, tmp_path):
    fit = fitted_for(vit, 1, "logits", Grid(1, 4, 4), 32)
    arch = {"head": {"kind": "importance_head", "tokens": 17, "dim": 32, "width": 16, "heads": 2, "layers": 1},
            "spn": {"kind": "spn", "tokens": 17, "dim": 32, "rank": 4, "width": 16, "depth": 1, "heads": 2}}
    record = {"layer": 1, "decoder": "logits", "path": "merge", "model": fit.model, "quality": {},
              "layout": {"prefix": 1, "rows": 4, "cols": 4, "tokens": 17, "dim": 32}}
    write_fit(tmp_path, record, {"head": (fit.metric.head, arch["head"]), "spn": (fit.metric.spn, arch["spn"])},
              {"stage": "test"})
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        taskgeom.patch(vit, fit, 0.5)
        want = vit(x)
        taskgeom.patch(vit, str(tmp_path), 0.5)
        torch.testing.assert_close(vit(x), want)
        twin = copy.deepcopy(vit)                       # a copy is patched on its own
        taskgeom.unpatch(vit)
        torch.testing.assert_close(twin(x), want)
    assert patched(twin).root is twin and patched(vit) is None


def test_the_pullback_distance_is_the_one_the_spn_predicts(monkeypatch):
    """``patching.pullback`` gives ``prune.soft_merge.pullback_distance``'s values for ``spn(x)``, by
    Cholesky on the moment Gram and by its QR fallback."""
    from taskgeom.patching import pullback
    from taskgeom.prune.select import split_lowest
    from taskgeom.prune.soft_merge import pullback_distance

    torch.manual_seed(0)
    spn, grid = SpectralPullbackNetwork(17, 32, 4, 16, 1, 2).eval(), Grid(1, 4, 4)
    x = torch.randn(3, 17, 32)
    keep, drop = split_lowest(torch.randn(3, 17), 8, 1)
    with torch.no_grad():
        want = pullback_distance(x, spn(x), keep, drop, 1)
        tol = dict(rtol=1e-4, atol=1e-5 * float(want.abs().max()))
        torch.testing.assert_close(pullback.pullback_distance(spn, grid, grid, x, keep, drop, 1), want, **tol)
        monkeypatch.setattr(pullback, "_factor", lambda spn, z: None)
        torch.testing.assert_close(pullback.pullback_distance(spn, grid, grid, x, keep, drop, 1), want, **tol)
