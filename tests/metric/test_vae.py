"""The VAE bottleneck: shapes round-trip, the latent probe composes with JVP/VJP (float64, against
finite differences) with a Jacobian of rank ≤ K·d, and a few steps lower its loss."""

from __future__ import annotations

import torch

from taskgeom.linalg import JacobianOperator, dense_jacobian
from taskgeom.metric.vae import vae_loss
from taskgeom.models.latent import FeatureVAE, LatentHost, decoder_features, token_layout
from taskgeom.models.zoo import build
from taskgeom.probes import LatentProbeMap

MV = dict(kind="multiview", embed_dim=16, depth=4, num_heads=2, patch_size=8, img_size=32, read_layers=[0, 1, 2, 3],
          head_features=8)


def latent_host(dtype=torch.float64) -> tuple[LatentHost, torch.Tensor]:
    torch.manual_seed(0)
    base = build(MV).to(dtype)
    images = torch.randn(3, 2, 3, 32, 32, dtype=dtype)
    reads = base.decoder_layers("depth")
    with torch.no_grad():
        X, ctx = decoder_features(base, reads, images)
    vae = FeatureVAE(token_layout(ctx, len(reads)), 16, token_dim=3, width=8, stride=2).to(dtype)
    vae.mean.copy_(X.mean(0))
    vae.std.copy_(X.std(0).clamp_min(1e-3))
    return LatentHost(base, "depth", vae), images


def test_registers_round_trip_and_prefix_tokens_decode_to_their_mean():
    host, images = latent_host()
    X, _ = host.features(images)
    assert X.shape == (3, 4 * 2 * (1 + 16), 16)
    mu, logvar = host.vae.encode(X)
    assert mu.shape == logvar.shape == (3, 2 * 2 * 2, 3)        # 2 views × a 2×2 grid of registers
    Xhat = host.vae.decode(mu)
    assert Xhat.shape == X.shape
    prefix = Xhat.reshape(3, 4, 2, 17, 16)[:, :, :, 0]
    torch.testing.assert_close(prefix, host.vae.mean.reshape(4, 2, 17, 16)[:, :, 0].expand(3, -1, -1, -1))


def test_the_latent_probe_has_exact_derivatives_and_rank_at_most_k_times_d():
    host, images = latent_host()
    probe = LatentProbeMap(host, "depth").at(images[0])
    assert probe.F.shape == (8, 3)
    op = JacobianOperator(probe.f, probe.F)
    v = torch.randn(1, 8, 3, dtype=torch.float64)
    eps = 1e-6
    fd = (probe.f(probe.F + eps * v[0]) - probe.f(probe.F - eps * v[0])) / (2 * eps)
    torch.testing.assert_close(op.matvec(v)[0], fd, rtol=1e-5, atol=1e-8)
    J = dense_jacobian(probe.f, probe.F)
    assert J.shape == (2 * 32 * 32, 24)
    assert int(torch.linalg.matrix_rank(J)) <= 24


def test_a_few_steps_lower_the_loss():
    host, images = latent_host(torch.float32)
    with torch.no_grad():
        X, ctx = host.features(images)
        reference = host.decode_features(X, ctx)
    opt = torch.optim.Adam(host.vae.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(100):
        loss, _ = vae_loss(host, X, ctx, reference, beta=0.01, task_weight=1.0, generator=gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5]), losses[::10]


def test_the_frozen_pass_gives_each_batch_what_the_host_gives_it(monkeypatch):
    """stages.vae.frozen_pass, computed once (float32, batches of 4 over 10 groups) and per call
    (a cache budget of 0), against the host run on the batch itself."""
    from taskgeom.stages import vae as stage

    host, _ = latent_host(torch.float32)
    host.eval()  # as the stage loads it: the conv stem's batch norm on its running statistics
    groups = torch.randn(10, 2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    idx = torch.tensor([0, 3, 5, 9])
    with torch.no_grad():
        X, ctx = host.features(groups[idx])
        expected = (X, host.decode_features(X, ctx), ctx)
    for budget in (stage.FROZEN_CACHE_BYTES, 0):
        monkeypatch.setattr(stage, "FROZEN_CACHE_BYTES", budget)
        got = stage.frozen_pass(host, groups, 4, "cpu")(idx)
        torch.testing.assert_close(got[0], expected[0], rtol=0, atol=1e-6)
        torch.testing.assert_close(got[1], expected[1], rtol=1e-6, atol=1e-6)
        assert got[2] == expected[2]
