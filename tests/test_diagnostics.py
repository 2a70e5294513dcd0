"""diagnose (matrix-free) against diagnose_exact (the dense spectrum) in float64, at the defaults
r = 20, num_probes = 100, power_iters = 2, on planted spectra and on small zoo probes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from taskgeom.diagnostics import Diagnosis, diagnose, diagnose_exact
from taskgeom.linalg import subspace_alignment
from taskgeom.linalg.dense import GRAM_FLOOR

DT = torch.float64
M, N, D = 200, 20, 20
I = torch.arange(1, M + 1, dtype=DT)
CONCENTRATED_TOKENS = [0, 3, 7, 11]

# name -> (σ, where the right singular vectors live); σ has M entries (zeros = rank deficiency)
SPECTRA = {
    "fast": (0.7 ** I, "spread"),
    "moderate": (0.93 ** I, "spread"),                 # κ_cap(20) ≈ 0.95, r90 close to r
    "slow": (I ** -0.5, "spread"),                      # λ_i ∝ 1/i: κ_cap(20) ≈ 0.6
    "flat": (torch.ones(M, dtype=DT), "spread"),
    "rank-deficient": (torch.cat([0.8 ** I[:15], torch.zeros(M - 15, dtype=DT)]), "spread"),
    "token-concentrated": (0.75 ** I[:60], "tokens"),
    "delocalized": (0.85 ** I, "even"),
}


def orthonormal(n: int, k: int, g: torch.Generator) -> torch.Tensor:
    return torch.linalg.qr(torch.randn(n, k, generator=g, dtype=DT)).Q


def planted(name: str, nonlinear: float = 0.0, seed: int = 0):
    """f(F) = A (vec F + c·tanh(vec F)), A = U diag(s) Vᵀ with the planted σ and modes."""
    s, where = SPECTRA[name]
    g = torch.Generator().manual_seed(seed)
    k = s.numel()
    U = orthonormal(M, k, g)
    if where == "tokens":  # modes supported on 4 of the 20 tokens
        V = torch.zeros(N, D, k, dtype=DT)
        V[CONCENTRATED_TOKENS] = orthonormal(len(CONCENTRATED_TOKENS) * D, k, g).reshape(-1, D, k)
        V = V.reshape(N * D, k)
    elif where == "even":
        # the top D modes put exactly 1/N of their mass on every token: block t of mode i is
        # Q_t[:, i] / √N with Q_t a random D×D rotation per token (orthonormal across modes);
        # the remaining modes complete them to an orthonormal set
        top = torch.stack([orthonormal(D, D, g) for _ in range(N)]) / N ** 0.5      # (N, D, D)
        V = torch.linalg.qr(torch.cat([top.reshape(N * D, D), torch.randn(N * D, k - D, generator=g, dtype=DT)],
                                      1)).Q
    else:
        V = orthonormal(N * D, k, g)
    A = U @ torch.diag(s) @ V.T
    F = torch.randn(N, D, generator=g, dtype=DT)

    def f(X: torch.Tensor) -> torch.Tensor:
        x = X.reshape(-1)
        return A @ (x + nonlinear * torch.tanh(x))

    return f, F


def assert_matches(d: Diagnosis, e: Diagnosis, decaying: bool = True, check_cv: bool = True):
    """The tolerances of the brief: κ ±0.02 (decaying spectra), erank and CV within 10%,
    r90 within ±1 when it lies within the sketch's basis; beyond it, r90 comes from the SLQ
    density of the residual (a few nodes per run), held to 10%."""
    assert d.kappa_cap == pytest.approx(e.kappa_cap, abs=0.02 if decaying else 0.05)
    assert d.erank == pytest.approx(e.erank, rel=0.10)
    if check_cv:
        assert d.cv == pytest.approx(e.cv, rel=0.10, abs=1e-3)
    if d.r90_source == "slq":
        assert e.r90 > d.sigma.numel() and abs(d.r90 - e.r90) <= max(1, 0.1 * e.r90)
    else:
        assert abs(d.r90 - e.r90) <= 1
    assert d.frob2 == pytest.approx(e.frob2, rel=0.03)


@pytest.mark.parametrize("nonlinear", [0.0, 0.1], ids=["linear", "tanh"])
@pytest.mark.parametrize("name", list(SPECTRA))
def test_diagnose_matches_exact_on_planted_spectra(name, nonlinear):
    f, F = planted(name, nonlinear)
    d, e = diagnose(f, F, r=20, num_probes=100, power_iters=2, seed=0), diagnose_exact(f, F, r=20)
    flat = name == "flat"
    # a flat spectrum has no distinguished top-20 subspace: its CV depends on an arbitrary basis
    assert_matches(d, e, decaying=not flat, check_cv=not flat)
    if not flat:  # the modes themselves, within J's rank (beyond it any basis of the null space is right)
        k = int((e.sigma > GRAM_FLOOR * e.sigma[0]).sum())   # the reference's floor (linalg.gram_spectrum)
        assert subspace_alignment(e.modes.reshape(N * D, -1)[:, :k], d.modes.reshape(N * D, -1)[:, :k]) > 0.95


def test_planted_token_structure_shows_in_cv():
    conc = diagnose_exact(*planted("token-concentrated"))
    even = diagnose_exact(*planted("delocalized"))
    assert conc.cv > 1.5 and even.cv < 1e-10
    assert torch.all(conc.token_energy[[t for t in range(N) if t not in CONCENTRATED_TOKENS]] < 1e-20)


def test_diagnosis_fields_and_product_budget():
    f, F = planted("slow")
    d = diagnose(f, F)
    assert isinstance(d.kappa_cap, float) and isinstance(d.r90, int) and isinstance(d.erank, float)
    assert d.sigma.shape == (20,) and d.kappa_curve.shape == (20,) and d.token_energy.shape == (N,)
    assert d.modes.shape == (N, D, 20)
    V = d.modes.reshape(N * D, 20)
    torch.testing.assert_close(V.T @ V, torch.eye(20, dtype=DT), rtol=0, atol=1e-10)
    assert torch.all(d.sigma[:-1] >= d.sigma[1:]) and torch.all(d.kappa_curve[1:] >= d.kappa_curve[:-1])
    assert d.kappa_cap == float(d.kappa_curve[-1])
    # block Krylov sketch (2q + 2)·b = 6·20 = 120; SLQ in rounds of 8 starts × 2s = 4 products (Radau);
    # 16 trace-only starts, one VJP each (M < N·D: the output side)
    assert d.budget["sketch"] == 120 and d.budget["slq"] > 0 and d.budget["slq"] % 32 == 0 and d.budget["trace"] == 16
    assert d.products == d.jvps + d.vjps == sum(d.budget.values())
    assert d.vjps - d.jvps == 16                # the runs spend s each way; the trace-only starts are VJPs
    cheap = diagnose(f, F, num_probes=8, power_iters=1, block=10, lanczos_steps=3, trace_probes=4)
    assert cheap.budget == {"sketch": 4 * 10, "slq": 8 * 6, "trace": 4}


def test_adaptive_rounds_stop_early_on_decaying_spectra_and_respect_the_cap():
    f, F = planted("moderate")
    assert diagnose(f, F).budget["slq"] == 32                       # one round meets both tolerances
    f, F = planted("slow")
    strict = diagnose(f, F, kappa_atol=1e-9, entropy_atol=1e-9, num_probes=20)
    assert strict.budget["slq"] == 20 * 4                           # never more than num_probes starts


def test_diagnose_is_reproducible_by_seed():
    f, F = planted("slow", 0.1)
    a, b, c = diagnose(f, F, seed=4), diagnose(f, F, seed=4), diagnose(f, F, seed=5)
    assert (a.kappa_cap, a.erank, a.r90, a.cv) == (b.kappa_cap, b.erank, b.r90, b.cv)
    assert torch.equal(a.modes, b.modes)
    assert a.erank != c.erank


def test_more_budget_converges_to_exact():
    f, F = planted("slow")
    e = diagnose_exact(f, F)
    seeds = range(3)

    def mean_error(attr, **kw):
        return sum(abs(getattr(diagnose(f, F, seed=s, **kw), attr) - getattr(e, attr)) for s in seeds) / 3

    def mode_error(q):
        return sum(1 - subspace_alignment(diagnose(f, F, seed=s, power_iters=q).modes.reshape(N * D, -1),
                                          e.modes.reshape(N * D, -1)) for s in seeds) / 3

    modes = [mode_error(q) for q in (0, 2, 5)]
    assert modes[0] > modes[1] > modes[2] and modes[2] < 0.005
    tight = dict(kappa_atol=1e-4, entropy_atol=1e-3)   # rounds continue until num_probes starts are spent
    kappa = [mean_error("kappa_cap", power_iters=q, num_probes=n, **kw)
             for q, n, kw in ((0, 8, {}), (2, 100, {}), (6, 400, tight))]
    assert kappa[0] > kappa[1] > kappa[2] and kappa[2] < 0.005
    frob = [mean_error("frob2", num_probes=n, **tight) for n in (8, 400)]
    assert frob[1] < 0.5 * frob[0]


def test_rank_and_output_limits_are_handled():
    f, F = planted("rank-deficient")
    d = diagnose(f, F, r=20)                    # r ≥ rank = 15: everything is captured
    assert d.kappa_cap == pytest.approx(1.0, abs=1e-9)
    assert d.sigma[15:].abs().max() < 1e-8 * d.sigma[0]
    small = lambda X: f(X)[:12]                 # r ≥ M = 12: J is read whole, exactly
    d, e = diagnose(small, F, r=20), diagnose_exact(small, F, r=20)
    assert d.exact and d.products == 12 and d.sigma.shape == (12,) and d.modes.shape == (N, D, 12)
    assert d.kappa_cap == pytest.approx(1.0) and d.r90 == e.r90
    assert d.erank == pytest.approx(e.erank, rel=1e-9) and d.cv == pytest.approx(e.cv, rel=1e-6)


sys.path.insert(0, str(Path(__file__).parent))
from test_probes import host_and_image  # noqa: E402  (the zoo's small float64 hosts)


@pytest.mark.parametrize("kind, decoder, layers", [("dpt", "depth", [1]), ("multiview", "depth", [2]),
                                                   ("cls", "cls", [1])])
def test_diagnose_matches_exact_on_zoo_probes(kind, decoder, layers):
    from taskgeom.probes import ProbeMap

    host, image = host_and_image(kind)
    probe = ProbeMap(host, decoder, layers).at(image)
    d, e = diagnose(probe.f, probe.F), diagnose_exact(probe.f, probe.F)
    assert_matches(d, e)
    if kind == "cls":   # M = 16 < r + oversample: read whole, exact
        assert d.exact and d.products == 16


def test_regime_rule_reproduces_the_papers_table1():
    """The rule applied to the paper's own Table 1 numbers gives the paper's regimes."""
    import yaml

    from taskgeom.diagnostics import REGIMES, regime

    table = yaml.safe_load((Path(__file__).parents[1] / "references/paper_numbers.yaml").read_text())
    output_dim = {"camera": 9, "cls": 768, "dpt-depth": 518 * 518, "pointcloud": 3 * 518 * 518, "depth": 518 * 518}
    for row in table["diagnostic_table1"]["rows"]:
        got = regime(row["kappa_cap_20"], row["erank"], 0, row["cv"] or 0.0, output_dim[row["decoder"]])
        assert got == row["regime"], row
    assert set(REGIMES) == {r["regime"] for r in table["diagnostic_table1"]["rows"]}
    # each rule on its own
    assert regime(0.5, 300, 200, 3.0, 10) == "rank-bounded"
    assert regime(0.95, 30, 15, 0.1, 1000) == "low-rank-delocalized"
    assert regime(0.95, 30, 15, 0.1, 1000, kappa_high=0.97) == "rich-spectrum"
    assert regime(0.4, 30, 60, 2.0, 1000) == "marginal-kappa-high-cv"
    assert regime(0.97, 150, 18, 0.5, 1000) == "rich-spectrum"


def test_so3_output_metric_measures_rotation_by_its_geodesic_angle():
    from scipy.spatial.transform import Rotation

    from taskgeom.probes import so3_camera_metric

    q = torch.tensor(Rotation.from_rotvec([0.3, -0.2, 0.5]).as_quat(), dtype=DT) * 1.7   # unnormalised head output
    y0 = torch.cat([torch.tensor([1.0, 2.0, 3.0], dtype=DT), q, torch.tensor([0.8, 0.9], dtype=DT)])
    L = so3_camera_metric(y0)
    dq = 1e-6 * torch.randn(4, dtype=DT, generator=torch.Generator().manual_seed(0))
    angle = lambda a, b: 2 * torch.arccos((a / a.norm() @ (b / b.norm())).abs().clamp(max=1))
    dy = torch.cat([torch.zeros(3, dtype=DT), dq, torch.zeros(2, dtype=DT)])
    assert float((L @ dy).norm()) == pytest.approx(float(angle(q, q + dq)), rel=1e-4)
    # scale: no turn
    assert float((L @ torch.cat([torch.zeros(3, dtype=DT), q, torch.zeros(2, dtype=DT)])).norm()) < 1e-12
    dt = torch.cat([torch.tensor([1e-3, 0, 0], dtype=DT), torch.zeros(6, dtype=DT)])
    assert float((L @ dt).norm()) == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="camera encodings"):
        so3_camera_metric(torch.zeros(10, dtype=DT))


def test_auto_power_iters_stops_when_the_subspace_settles():
    fast, F = planted("fast")
    slow, _ = planted("slow")
    a, b = diagnose(fast, F, power_iters="auto"), diagnose(slow, F, power_iters="auto")
    assert 1 <= a.power_iters < b.power_iters <= 15          # a large gap settles sooner
    assert a.budget["sketch"] == (2 * a.power_iters + 2) * 20
    e = diagnose_exact(slow, F)
    k = subspace_alignment(e.modes.reshape(N * D, -1), b.modes.reshape(N * D, -1))
    assert k > subspace_alignment(e.modes.reshape(N * D, -1), diagnose(slow, F).modes.reshape(N * D, -1))
    with pytest.raises(ValueError, match="power_iters"):
        diagnose(fast, F, power_iters="often")


def _vit_probe(fused: bool, frozen: bool):
    """f: block-1 features (N, D) -> the CLS embedding of a random 3-block timm ViT, closing over
    the model as a user would write it."""
    import timm

    torch.manual_seed(0)
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=3,
                            embed_dim=48, num_heads=2, num_classes=0).eval()
    for m in vit.modules():
        if hasattr(m, "fused_attn"):
            m.fused_attn = fused
    vit.requires_grad_(not frozen)
    with torch.no_grad():
        F = vit.blocks[0](vit._pos_embed(vit.patch_embed(torch.randn(1, 3, 32, 32))))[0]

    def f(F):
        y = F.unsqueeze(0)
        for block in vit.blocks[1:]:
            y = block(y)
        return vit.norm(y)[0, 0]

    return vit, f, F


def test_a_map_over_an_unfrozen_model_with_fused_attention_records_nothing_and_agrees():
    vit, f, F = _vit_probe(fused=True, frozen=False)
    d = diagnose(f, F, r=4, num_probes=8, power_iters=1, seed=0)
    exact = diagnose_exact(f, F, r=4)
    _, g, G = _vit_probe(fused=False, frozen=True)
    reference = diagnose(g, G, r=4, num_probes=8, power_iters=1, seed=0)
    for result in (d, exact):
        tensors = [v for v in vars(result).values() if isinstance(v, torch.Tensor)]
        assert tensors and not any(t.requires_grad for t in tensors)
        assert isinstance(result.kappa_cap, float) and isinstance(result.erank, float)
    assert all(p.grad is None for p in vit.parameters())
    assert d.kappa_cap == pytest.approx(reference.kappa_cap, abs=1e-5)
    assert d.erank == pytest.approx(reference.erank, rel=1e-5)
    torch.testing.assert_close(d.sigma, reference.sigma, rtol=1e-4, atol=1e-6)
    assert torch.is_grad_enabled()  # restored
