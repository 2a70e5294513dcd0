"""Adapters for the paper's models, on tiny configs of the same architectures with random weights.

Nothing here may reach a model hub: the hub is switched offline before anything imports it, and
the loading tests forbid sockets outright.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before huggingface_hub reads it at import

import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import Tensor, nn
from torch.func import jvp, vjp, vmap

from taskgeom.models.adapters import PAPER_MODELS, build_paper_model, load_paper_model
from taskgeom.models.host import run_decoder
from taskgeom.probes import ProbeMap

# (model, decoder, probed layer, one input without the batch axis)
CASES = [
    ("dinov2-b14", "cls", 1, (3, 42, 42)),
    ("clip-b16", "cls", 1, (3, 48, 48)),
    ("depth-anything-v2", "depth", 1, (3, 42, 42)),
    ("vggt", "camera", 5, (2, 3, 28, 28)),
    ("vggt", "depth", 2, (2, 3, 28, 28)),
    ("vggt", "pointmap", 3, (2, 3, 28, 28)),
]
IDS = [f"{m}-{d}" for m, d, _, _ in CASES]


def tiny_host(name: str, dtype: torch.dtype = torch.float32, seed: int = 0) -> nn.Module:
    """The tiny random model, re-drawn with PyTorch's default layer init.

    The libraries' own inits (std 0.02, layer scale 1e-5) leave the outputs nearly constant
    (Depth Anything's depth is ~1e-7); default-scale weights make every derivative check bite.
    """
    if name == "vggt":
        pytest.importorskip("vggt", reason="the upstream vggt package is not installed")
    torch.manual_seed(seed)
    host = build_paper_model(name, tiny=True)
    for m in host.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
            m.reset_parameters()
    if name == "depth-anything-v2":
        nn.init.constant_(host.model.head.conv3.bias, 1.0)  # keep the relative-depth head's final ReLU open
    return host.to(dtype)


def own_output(host: nn.Module, name: str, decoder: str, images: Tensor) -> Tensor:
    """The wrapped model's own forward, flattened to (B, M) like the decoder output."""
    if name in ("dinov2-b14", "clip-b16"):
        return host.vit(images)
    if name == "depth-anything-v2":
        return host.model(pixel_values=images).predicted_depth.flatten(1)
    out = host.model(images)
    key = {"camera": "pose_enc", "depth": "depth", "pointmap": "world_points"}[decoder]
    return out[key].flatten(1)


def rel_err(a: Tensor, b: Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


@pytest.mark.parametrize(("name", "decoder", "layer", "shape"), CASES, ids=IDS)
def test_unprobed_output_equals_model_forward(name: str, decoder: str, layer: int, shape: tuple[int, ...]):
    host = tiny_host(name)
    images = torch.rand(2, *shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = run_decoder(host, decoder, images)
        ref = own_output(host, name, decoder, images)
    assert y.shape == ref.shape
    assert ref.abs().max() > 1e-3  # a non-degenerate output
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=0)


def central_differences(f: Callable[[Tensor], Tensor], F: Tensor, V: Tensor, eps: float = 1e-6) -> Tensor:
    """(k, N, D) tangents -> (k, M) central differences of f at F."""
    return torch.stack([(f(F + eps * v) - f(F - eps * v)) / (2 * eps) for v in V])


@pytest.mark.parametrize(("name", "decoder", "layer", "shape"), CASES, ids=IDS)
def test_probe_map_derivatives_match_finite_differences(name: str, decoder: str, layer: int,
                                                        shape: tuple[int, ...]):
    host = tiny_host(name, torch.float64)
    gen = torch.Generator().manual_seed(2)
    image = torch.rand(*shape, generator=gen, dtype=torch.float64)
    probe = ProbeMap(host, decoder, layers=[layer]).at(image)
    f, F = probe.f, probe.F

    with torch.no_grad():
        y = f(F)
        ref = run_decoder(host, decoder, image.unsqueeze(0))[0]
    torch.testing.assert_close(y, ref, atol=1e-10, rtol=1e-10)

    V = torch.randn(3, *F.shape, generator=gen, dtype=torch.float64)
    U = torch.randn(3, y.numel(), generator=gen, dtype=torch.float64)
    with torch.no_grad():
        fd = central_differences(f, F, V)
    assert fd.norm() > 0

    # J·v: one tangent, then a vmapped batch
    assert rel_err(jvp(f, (F,), (V[0],))[1], fd[0]) < 1e-5
    jv = vmap(lambda v: jvp(f, (F,), (v,))[1])(V)
    for i in range(len(V)):
        assert rel_err(jv[i], fd[i]) < 1e-5

    # Jᵀ·u: <Jᵀu_i, v_j> = <u_i, J v_j> for every pair, one cotangent and a vmapped batch
    _, pullback = vjp(f, F)
    uJ = vmap(pullback)(U)[0]
    assert rel_err(pullback(U[0])[0], uJ[0]) < 1e-12
    lhs = torch.einsum("ind,jnd->ij", uJ, V)
    rhs = U @ fd.T
    assert rel_err(lhs, rhs) < 1e-5


# --------------------------------------------------------------------------- loading


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a network connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.parametrize("name", sorted(PAPER_MODELS))
def test_missing_weights_fail_at_once_naming_the_model(name: str, tmp_path: Path, no_network: None):
    for path in (None, tmp_path / "not-there" / "model.safetensors"):
        with pytest.raises(FileNotFoundError) as err:
            load_paper_model(name, None if path is None else str(path))
        message = str(err.value)
        assert repr(name) in message
        assert f"adapter: {name}" in message


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(KeyError, match="dinov2-b14"):
        build_paper_model("dinov3")


def _hub_cache(root: Path, repo: str, files: dict[str, Path]) -> Path:
    """Lay ``files`` out as a Hugging Face hub cache of ``repo`` under ``root``; returns root."""
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    snap = repo_dir / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text("0123abcd")
    for name, src in files.items():
        (snap / name).write_bytes(src.read_bytes())
    return root


@pytest.mark.parametrize("name", ["dinov2-b14", "clip-b16"])
def test_timm_round_trip(name: str, tmp_path: Path, no_network: None):
    spec = PAPER_MODELS[name]
    host = tiny_host(name)
    weights = tmp_path / "ckpt" / "model.safetensors"
    weights.parent.mkdir()
    save_file({k: v.contiguous() for k, v in host.vit.state_dict().items()}, str(weights))
    cache = _hub_cache(tmp_path / "hub", spec.hf_repo, {"model.safetensors": weights})

    size = spec.tiny["img_size"]
    images = torch.rand(2, 3, size, size, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = run_decoder(host, "cls", images)
        for path in (weights, weights.parent, cache):  # a file, a directory, a hub cache
            loaded = load_paper_model(name, str(path), **spec.tiny)
            assert torch.equal(run_decoder(loaded, "cls", images), ref), path
    assert not loaded.training
    assert all(not m.fused_attn for m in loaded.modules() if hasattr(m, "fused_attn"))


def test_depth_anything_round_trip(tmp_path: Path, no_network: None):
    name = "depth-anything-v2"
    spec = PAPER_MODELS[name]
    host = tiny_host(name)
    host.model.save_pretrained(str(tmp_path / "ckpt"))

    images = torch.rand(2, 3, 42, 42, generator=torch.Generator().manual_seed(4))
    loaded = load_paper_model(name, str(tmp_path / "ckpt"), **spec.tiny)
    with torch.no_grad():
        torch.testing.assert_close(run_decoder(loaded, "depth", images), run_decoder(host, "depth", images),
                                   atol=0, rtol=0)
    assert loaded.model.config._attn_implementation == "eager"
    assert loaded.model.backbone.config._attn_implementation == "eager"
    assert not loaded.training

    # the checkpoint's config.json fixes the architecture
    with pytest.raises(ValueError, match="hidden_size"):
        load_paper_model(name, str(tmp_path / "ckpt"), **{**spec.tiny, "hidden_size": 64})


def test_depth_anything_reads_the_configured_layers():
    host = build_paper_model("depth-anything-v2", tiny=True)
    # out_indices count the embedding as stage 0: stage k is the output of block k - 1
    assert host.decoder_layers("depth") == tuple(i - 1 for i in PAPER_MODELS["depth-anything-v2"].tiny["out_indices"])


def test_vggt_without_the_package_says_how_to_install(tmp_path: Path):
    try:
        import vggt  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the upstream vggt package is installed")
    with pytest.raises(ImportError, match="pip install"):
        build_paper_model("vggt", tiny=True)
    weights = tmp_path / "model.pt"
    weights.write_bytes(b"")
    with pytest.raises(ImportError, match="github.com/facebookresearch/vggt"):
        load_paper_model("vggt", str(weights))


def test_vggt_round_trip(tmp_path: Path, no_network: None):
    host = tiny_host("vggt")
    weights = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in host.model.state_dict().items()}, str(weights))
    images = torch.rand(1, 2, 3, 28, 28, generator=torch.Generator().manual_seed(5))
    loaded = load_paper_model("vggt", str(tmp_path), **PAPER_MODELS["vggt"].tiny)
    with torch.no_grad():
        for decoder in loaded.decoders:
            assert torch.equal(run_decoder(loaded, decoder, images), run_decoder(host, decoder, images)), decoder
