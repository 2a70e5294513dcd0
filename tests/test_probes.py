"""Probe maps of the tiny zoo: f(F) reproduces the model, and its JVP / VJP (also under vmap)
match central finite differences in float64."""

from __future__ import annotations

import pytest
import torch
from torch.func import jvp, vjp, vmap

from taskgeom.models.host import run_decoder
from taskgeom.models.zoo import build
from taskgeom.probes import ProbeMap

CONFIGS = {
    "cls": dict(kind="cls", embed_dim=16, depth=3, num_heads=2, patch_size=8, img_size=32),
    "dpt": dict(kind="dpt", embed_dim=16, depth=4, num_heads=2, patch_size=8, img_size=32,
                read_layers=[0, 1, 2, 3], head_features=8),
    "multiview": dict(kind="multiview", embed_dim=16, depth=4, num_heads=2, patch_size=8, img_size=32,
                      read_layers=[0, 1, 2, 3], head_features=8),
}
# (kind, decoder, probed layers); None = the layers the decoder reads
PROBES = [
    ("cls", "cls", [1]), ("cls", "logits", [0]), ("cls", "cls", [0, 2]),
    ("dpt", "depth", [1]), ("dpt", "depth", [3]), ("dpt", "depth", None),
    ("multiview", "camera", [1]), ("multiview", "depth", [2]), ("multiview", "pointmap", None),
]


def host_and_image(kind: str):
    torch.manual_seed(0)
    host = build(CONFIGS[kind]).double()
    image = torch.randn(2, 3, 32, 32) if kind == "multiview" else torch.randn(3, 32, 32)
    return host, image.double()


def central_difference(f, F: torch.Tensor, v: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return (f(F + eps * v) - f(F - eps * v)) / (2 * eps)


@pytest.mark.parametrize("kind, decoder, layers", PROBES)
def test_probe_reproduces_the_model(kind, decoder, layers):
    host, image = host_and_image(kind)
    probe = ProbeMap(host, decoder, layers).at(image)
    expected = run_decoder(host, decoder, image.unsqueeze(0))[0].flatten()
    torch.testing.assert_close(probe.f(probe.F), expected, rtol=1e-10, atol=1e-10)
    n_layers = len(layers) if layers else len(host.decoder_layers(decoder))
    assert probe.F.shape == (n_layers * probe.tokens_per_layer, CONFIGS[kind]["embed_dim"])


@pytest.mark.parametrize("kind, decoder, layers", PROBES)
def test_jvp_and_vjp_match_finite_differences(kind, decoder, layers):
    host, image = host_and_image(kind)
    probe = ProbeMap(host, decoder, layers).at(image)
    g = torch.Generator().manual_seed(1)
    v = torch.randn(probe.F.shape, generator=g, dtype=torch.float64)
    y, Jv = jvp(probe.f, (probe.F,), (v,))
    fd = central_difference(probe.f, probe.F, v)
    torch.testing.assert_close(Jv, fd, rtol=1e-5, atol=1e-7 * fd.abs().max().item())
    u = torch.randn(y.shape, generator=g, dtype=torch.float64)
    _, pullback = vjp(probe.f, probe.F)
    (JTu,) = pullback(u)
    # adjoint identity <u, J v> = <J^T u, v>, with J v from finite differences
    torch.testing.assert_close(torch.dot(u, fd), (JTu * v).sum(), rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("kind, decoder, layers", [PROBES[0], PROBES[3], PROBES[6]])
def test_batched_products_under_vmap(kind, decoder, layers):
    host, image = host_and_image(kind)
    probe = ProbeMap(host, decoder, layers).at(image)
    V = torch.randn(3, *probe.F.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    JV = vmap(lambda v: jvp(probe.f, (probe.F,), (v,))[1])(V)
    for i in range(3):
        torch.testing.assert_close(JV[i], central_difference(probe.f, probe.F, V[i]), rtol=1e-5, atol=1e-8)
    _, pullback = vjp(probe.f, probe.F)
    U = torch.randn(3, JV.shape[1], dtype=torch.float64)
    JTU = vmap(lambda u: pullback(u)[0])(U)
    torch.testing.assert_close(JTU[1], pullback(U[1])[0])


def test_output_metric_is_applied():
    host, image = host_and_image("multiview")
    L = torch.randn(5, 18, dtype=torch.float64)
    plain = ProbeMap(host, "camera", [2]).at(image)
    metric = ProbeMap(host, "camera", [2], output_metric=L).at(image)
    torch.testing.assert_close(metric.f(metric.F), L @ plain.f(plain.F))


def test_bad_probes_are_rejected():
    host, _ = host_and_image("dpt")
    with pytest.raises(ValueError, match="has no decoder 'cls'"):
        ProbeMap(host, "cls")
    with pytest.raises(ValueError, match="outside 0..3"):
        ProbeMap(host, "depth", [4])


@pytest.mark.parametrize("layers, runs", [(None, []), ([1], [2, 3, 4]), ([1, 3], [4])])
def test_blocks_whose_output_is_overwritten_are_not_run(layers, runs):
    torch.manual_seed(0)
    host = build({**CONFIGS["dpt"], "depth": 5, "read_layers": [0, 1, 3, 4]}).double()
    image = torch.randn(3, 32, 32, dtype=torch.float64)
    probe = ProbeMap(host, "depth", layers).at(image)
    expected = run_decoder(host, "depth", image.unsqueeze(0))[0].flatten()
    ran, block = [], host.block
    host.block = lambda i, h, ctx: ran.append(i) or block(i, h, ctx)
    torch.testing.assert_close(probe.f(probe.F), expected, rtol=1e-10, atol=1e-10)
    assert ran == runs      # block 2's output is not read, and the probed layer 3 replaces what it feeds
