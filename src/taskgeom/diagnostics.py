"""The tractability diagnostic: κ_cap(r), effective rank, r_0.90 and token CV of a probe's
Jacobian, matrix-free (``diagnose``) or from the dense Jacobian (``diagnose_exact``).

Definitions (DESIGN.md, "Definitions"): g = JᵀJ, tr g = ‖J‖_F², σ_i descending;
κ_cap(r) = Σ_{i≤r} σ_i² / ‖J‖_F²; erank = exp(−Σ p_i log p_i), p_i = σ_i² / ‖J‖_F²;
r_0.90 = smallest r with κ_cap(r) ≥ 0.90; e_t = Σ_{i≤r} σ_i² ‖V_{t,i}‖²; CV = std_t(e)/mean_t(e).

How ``diagnose`` spends its products (b = ``block``, default r; q = power_iters; s = lanczos_steps):

1. Sketch — randomized block Krylov (Musco & Musco 2015; ``linalg.block_krylov_svd``): q rounds
   of block power iteration from JᵀΩ, re-orthonormalised each round, keeping every block:
   (2q + 2)·b products for a (q + 1)·b-column basis K with J K known exactly. Gives σ_1..σ_r, the
   modes, and Hutch++'s exact part ‖J K‖_F² (Meyer et al. 2021): κ_cap's numerator and denominator
   share one sketch.
2. Residual — stochastic Lanczos quadrature (Ubaru, Chen & Saad 2017) on the deflated operator
   (P g P, P = I − KKᵀ, run on the smaller of the input and output sides), in rounds of
   ``probes_per_round`` Rademacher starts × s steps, closed by a Gauss–Radau rule with a node at 0
   (``linalg.lanczos``), 2s products per start, plus ``trace_probes`` trace-only starts, one VJP
   each (P Jᵀz). Rounds stop once the standard errors of
   κ_cap (≤ kappa_atol) and of the entropy −Σ p log p (≤ entropy_atol nats) are small enough, or
   when ``num_probes`` starts (the paper's m) are spent.
   - ‖J‖_F² = ‖J K‖_F² + the mean of the residual's samples: each run's Hutchinson sample with
     the other runs' vectors projected out and their energy counted exactly (leave-one-out, the
     exchangeable principle of XTrace; Epperly, Tropp & Webber 2024), and the trace-only starts'
     deflated by all runs' vectors (``linalg.trace``). The runs' vectors hold the residual's
     leading directions, which carry most of Hutchinson's variance: on the tiny DPT's spread
     probes this cut the error of ‖J‖_F² from 0.59–0.61% to 0.26–0.30% (rms over 120 runs).
   - tr(g log g) = Σ_i φ(ritz_i²) + SLQ of the residual, whose plain Hutchinson trace serves as a
     ratio control variate for it -> erank.
Defaults (r = 20, q = 2, s = 2, 8 starts per round, 16 trace-only starts): 120 + 32 + 16 = 168
products when one round suffices, 32 more per further round. Radau, not Gauss: x log x
has positive even derivatives, so a Gauss rule under-estimates tr(g log g) and erank comes out high
(10–12% on the tiny DPT's layer-1 and decoder-input probes with three Gauss nodes); the Radau rule
errs the other way and by less (within 3% there, with two steps). Runs stop early when every Lanczos run
closes (a rank-deficient J). When the basis would reach min(M, N·D), J is read whole with
min(M, N·D) products and everything is exact (κ_cap = 1 once r ≥ rank); no stochastic stage runs.

r_0.90: from the Ritz values when no stochastic stage ran (an exact sketch);
otherwise counted in g's Ritz density on the basis joined with the SLQ runs' vectors
(``linalg.ritz_density``: the runs already computed their J-images, so it costs no products), which
keeps the coupling between the basis and the residual, with the residual's energy calibrated to
the residual trace above. The pinched spectrum — Ritz values ⊕ the residual's quadrature
nodes — drops that coupling, and since g's spectrum majorizes the pinched one, its count can only
come out high (+2 to +4 on the tiny DPT's shallow probes, where r_0.90 is 34–51). Near r_0.90 there
each eigenvalue holds about 0.4% of ‖J‖_F², so the trace's error moves the count: within ±1 in
92–97% of 120 runs with the deflated trace above, 78–79% with plain Hutchinson samples (dense
float32 references, 3 images × 40 seeds). What is left is still mostly the trace's: per image,
the count's error and ‖J‖_F²'s relative error (sd 0.20–0.34%) correlate at 0.74–0.87, on top of
the density's own mean offset, −0.4 to +0.3 depending on the image. Beyond the
basis's ℓ columns the deep tail is counted from the quadrature nodes (``_r90_from_density``).
``r90_source`` is ``"sketch"`` when the Ritz values alone reach 0.90, else ``"slq"``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from taskgeom.linalg.deflate import project_out
from taskgeom.linalg.dense import dense_jacobian
from taskgeom.linalg.lanczos import Quadrature, entropy_from_traces, lanczos_quadrature, smaller_side, xlogx
from taskgeom.linalg.operator import JacobianOperator
from taskgeom.linalg.ritz_density import ritz_density
from taskgeom.linalg.sketch import block_krylov_svd, token_energy
from taskgeom.linalg.sketch import cv as coefficient_of_variation
from taskgeom.linalg.sketch import kappa_curve as cumulative_capture
from taskgeom.linalg.sketch import r90 as first_reaching
from taskgeom.linalg.trace import deflated_residuals, leave_one_out_residuals, rademacher

R90_LEVEL = 0.90
LOO_POOL = 16  # runs whose vectors deflate the trace samples (linalg.leave_one_out_residuals)
AUTO_TOL, AUTO_MAX_ITERS = 1e-3, 15  # power_iters="auto": the paper raises q until the subspace settles


@dataclass
class Diagnosis:
    """One probe's diagnostic. sigma (r,) descending; modes (N, D, r) orthonormal right singular
    vectors; token_energy (N,); kappa_curve (r,) = κ_cap(1..r); products = JVPs + VJPs used.
    r is clipped to min(M, N·D). ``budget`` splits products by stage; ``power_iters`` is the q used."""

    kappa_cap: float
    frob2: float
    erank: float
    r90: int
    cv: float
    sigma: Tensor
    modes: Tensor
    token_energy: Tensor
    products: int
    kappa_curve: Tensor
    jvps: int = 0
    vjps: int = 0
    power_iters: int = 0
    r90_source: str = "exact"
    exact: bool = False
    budget: dict[str, int] = field(default_factory=dict)


def _summaries(sigma: Tensor, V: Tensor, frob2: float, N: int, D: int) -> dict:
    """Shared tail of both diagnoses: κ curve, modes, token energy and CV from top-r triplets."""
    curve = cumulative_capture(sigma, frob2) if frob2 > 0 else torch.ones_like(sigma)
    curve = curve.clamp(max=1.0)  # rounding only: Σ_{i≤r} σ_i² ≤ ‖J‖_F²
    e = token_energy(sigma, V, N, D)
    return dict(kappa_cap=float(curve[-1]), kappa_curve=curve, sigma=sigma, modes=V.reshape(N, D, -1),
                token_energy=e, cv=coefficient_of_variation(e) if float(e.mean()) > 0 else 0.0)


def diagnose_exact(f: Callable[[Tensor], Tensor], F: Tensor, r: int = 20) -> Diagnosis:
    """The diagnostic from the dense Jacobian (M, N·D) and its full SVD — the reference.
    erank, r90 and frob2 use the full spectrum. products = M (jacrev's VJPs)."""
    N, D = F.shape
    J = dense_jacobian(f, F)
    _, S, Vh = torch.linalg.svd(J, full_matrices=False)
    r = min(r, S.numel())
    lam = S.pow(2)
    frob2 = float(lam.sum())
    p = lam / frob2 if frob2 > 0 else lam
    erank = math.exp(-float(xlogx(p).sum())) if frob2 > 0 else 0.0
    full_curve = torch.cumsum(lam, 0) / frob2 if frob2 > 0 else torch.ones_like(lam)
    out = _summaries(S[:r], Vh[:r].T, frob2, N, D)
    return Diagnosis(frob2=frob2, erank=erank, r90=first_reaching(full_curve, R90_LEVEL) or S.numel(),
                     products=J.shape[0], vjps=J.shape[0], exact=True, r90_source="exact",
                     budget={"dense": J.shape[0]}, **out)


def _count_to_090(theta: Tensor, counts: Tensor, frob2: float) -> int:
    """How many eigenvalues a density — counts[k] eigenvalues of size theta[k] — needs, largest
    first, to hold 0.90 of ‖J‖_F² (the fractional count rounded up); all of them when it holds less."""
    keep = theta > 1e-12 * float(theta.max())     # zero eigenvalues hold no energy (and null directions)
    theta, counts = theta[keep], counts[keep]
    order = torch.argsort(theta, descending=True, stable=True)
    theta, counts = theta[order], counts[order]
    energy = torch.cumsum(theta * counts, 0)
    need = R90_LEVEL * frob2
    k = int(torch.searchsorted(energy, torch.tensor(need, dtype=energy.dtype)))
    if k >= theta.numel():
        return math.ceil(float(counts.sum()))
    before = float(energy[k - 1]) if k > 0 else 0.0
    return max(1, math.ceil(float(counts[:k].sum()) + (need - before) / float(theta[k]) - 1e-9))


def _r90_from_density(ritz2: Tensor, tail: Quadrature | None, density: Quadrature | None,
                      frob2: float) -> tuple[int, str]:
    """r_0.90 from the Ritz values ritz2 (ℓ,) = σ̂_i² when no stochastic stage ran; else from g's
    Ritz density on the basis joined with the runs (``linalg.ritz_density``), which keeps their
    coupling and so does not over-count as the pinched spectrum (Ritz values ⊕ the residual's
    nodes) does. That density resolves g as far as its Rayleigh–Ritz space reaches; when it puts
    r_0.90 beyond the basis's ℓ columns, the deep tail is counted from the runs' quadrature
    nodes instead — the even mixture of their Radau and Gauss rules, which err on x log x in
    opposite directions (``linalg.lanczos``), after the Ritz values: on the planted 1/i spectrum
    (r_0.90 = 111, ℓ = 60) the Ritz density counts 2–11% too many, the mixture 1–7%.
    ``"sketch"`` when the Ritz values alone reach 0.90 (r_0.90 lies within the basis), else ``"slq"``."""
    if frob2 <= 0:
        return 1, "sketch"
    within = first_reaching(torch.cumsum(ritz2, 0) / frob2, R90_LEVEL)
    if tail is None or density is None:  # an exact sketch, or no stochastic stage
        return (within if within is not None else ritz2.numel() + 1), "sketch"
    source = "sketch" if within is not None else "slq"
    r90 = _count_to_090(density.nodes.flatten(), density.weights.flatten() / density.nodes.shape[0], frob2)
    if r90 <= ritz2.numel():
        return r90, source
    runs = [tail] if tail.gauss is None else [tail, tail.gauss]
    theta = torch.cat([ritz2] + [q.nodes.flatten() for q in runs])
    counts = torch.cat([torch.ones_like(ritz2)] + [q.weights.flatten() / (q.nodes.shape[0] * len(runs)) for q in runs])
    return _count_to_090(theta, counts, frob2), source


def diagnose(f: Callable[[Tensor], Tensor], F: Tensor, r: int = 20, num_probes: int = 100,
             power_iters: int | str = 2, seed: int = 0, *, block: int | None = None, lanczos_steps: int = 2,
             probes_per_round: int = 8, kappa_atol: float = 0.005, entropy_atol: float = 0.02,
             trace_probes: int = 16, linearize: bool = False) -> Diagnosis:
    """Matrix-free diagnostic of f: (N, D) -> (M,) at F (N, D); see the module docstring for the
    product budget. Seeds: the sketch draws from ``seed``, the SLQ and trace-only starts from ``seed + 1``.
    ``power_iters="auto"``: add Krylov rounds until the top-r subspace moves by less than 1e-3
    (at most 15; the chosen q is ``Diagnosis.power_iters``)."""
    op = JacobianOperator(f, F, linearize=linearize)
    return diagnose_operator(op, r=r, num_probes=num_probes, power_iters=power_iters, seed=seed, block=block,
                             lanczos_steps=lanczos_steps, probes_per_round=probes_per_round,
                             kappa_atol=kappa_atol, entropy_atol=entropy_atol, trace_probes=trace_probes)


def _tail_rounds(op: JacobianOperator, basis: Tensor, J_basis: Tensor, top: Tensor, r: int, num_probes: int,
                 steps: int, per_round: int, trace_probes: int, seed: int, kappa_atol: float,
                 entropy_atol: float) -> tuple[Quadrature, float, float, Quadrature]:
    """The stochastic stage on the residual P g P (P = I − QQᵀ, Q = ``basis``, J Q = ``J_basis``;
    ``top`` (ℓ,): the sketch's Ritz values σ̂², the exact part of both traces).

    ``trace_probes`` trace-only starts (one product each) and SLQ rounds of ``per_round`` starts
    until the standard errors of κ_cap(r) and of the entropy −Σ p log p (nats) fall below
    ``kappa_atol`` and ``entropy_atol``, or ``num_probes`` starts are spent.
    - tr(P g P): the mean of the runs' leave-one-out samples and of the trace-only starts' samples,
      both deflated by the runs' vectors (``linalg.trace``; an equal-weight mean, since weights
      from estimated variances favour the low samples of a positive quantity).
    - tr(P g log g P): the runs' SLQ with their Hutchinson trace as a ratio control variate: a
      run's x log x and x samples move together, so what the sharper trace knows of the
      residual's scale carries over.
    Returns the runs' quadrature, tr(P g P), tr(P g log g P) and g's Ritz density (for r_0.90)."""
    T0, G0 = float(top.sum()), float(xlogx(top).sum())
    kappa_r = float(top[:r].sum()) / T0 if T0 > 0 else 0.0   # an upper bound on κ_cap(r) is enough
    scale = float(top[0]) if top.numel() else None
    side = smaller_side(op)
    n = op.out_dim if side == "output" else op.in_dim
    draws = rademacher(n * num_probes + op.out_dim * trace_probes, 1, seed, op.dtype, op.device).flatten()
    Z = draws[:n * num_probes].reshape(n, num_probes)        # Lanczos starts
    # trace-only starts on the output side whatever side the runs take: P Jᵀ z costs one VJP,
    # the cheaper product, and its samples spread as input-side ones (the same nonzero spectrum)
    S = op.rmm(draws[n * num_probes:].reshape(op.out_dim, trace_probes))
    S = project_out(basis, S)
    rounds: list[Quadrature] = []
    used = 0
    while used < num_probes:
        k = min(per_round, num_probes - used)
        rounds.append(lanczos_quadrature(op, Z[:, used:used + k], steps, basis, scale, side, rule="radau",
                                         keep_vectors=True))
        used += k
        tail = _concat(rounds)
        plain = (tail.weights * tail.nodes).sum(1)             # the runs' Hutchinson samples of tr(PgP)
        pool = tuple(x[:LOO_POOL] for x in tail.krylov)         # the runs whose vectors deflate the samples
        samples = torch.cat([leave_one_out_residuals(*tail.krylov, tail.norms, side == "output", LOO_POOL),
                             deflated_residuals(*pool, S)])
        T, var_T = T0 + float(samples.mean()), float(samples.var()) / samples.numel() if samples.numel() > 1 else math.inf
        g = (tail.weights * xlogx(tail.nodes)).sum(1)          # samples of tr(PgP log PgP)
        beta = float(g.mean() / plain.mean()) if float(plain.mean()) > 0 else 0.0
        g = g - beta * (plain - (T - T0))
        G = G0 + float(g.mean())
        if used < 2 or T <= 0 or not math.isfinite(var_T):
            continue
        # H = log T − G/T: the error T's carries, plus g's own once the control variate took T's out
        se_H = math.sqrt((1 / T + G / T ** 2 - beta / T) ** 2 * var_T + float(g.var()) / used / T ** 2)
        if kappa_r * math.sqrt(var_T) / T <= kappa_atol and se_H <= entropy_atol:   # SE(κ) = κ·SE(T)/T
            break
    density = ritz_density(J_basis, tail, output_starts=side == "output", residual_trace=T - T0)
    return tail, T - T0, float(g.mean()), density


def _concat(parts: list[Quadrature]) -> Quadrature:
    """The runs of several quadratures as one (rules padded with zero-weight nodes, Krylov vectors
    with zero columns where a round's runs all closed early)."""
    s = max(q.nodes.shape[1] for q in parts)
    pad = lambda x, n: torch.nn.functional.pad(x, (0, n - x.shape[-1]))
    gauss = _concat([q.gauss for q in parts]) if all(q.gauss is not None for q in parts) else None
    out = Quadrature(nodes=torch.cat([pad(q.nodes, s) for q in parts]), weights=torch.cat([pad(q.weights, s) for q in parts]),
                     products=sum(q.products for q in parts), gauss=gauss)
    if all(q.norms is not None for q in parts):
        out.norms = torch.cat([q.norms for q in parts])
    if all(q.krylov is not None for q in parts):
        k = max(q.krylov[0].shape[2] for q in parts)
        out.krylov = tuple(torch.cat([pad(x, k) for x in xs]) for xs in zip(*(q.krylov for q in parts)))
    return out


def diagnose_operator(op: JacobianOperator, r: int = 20, num_probes: int = 100, power_iters: int | str = 2,
                      seed: int = 0, *, block: int | None = None, lanczos_steps: int = 2,
                      probes_per_round: int = 8, kappa_atol: float = 0.005,
                      entropy_atol: float = 0.02, trace_probes: int = 16) -> Diagnosis:
    """``diagnose`` on an existing JacobianOperator (its counters keep running)."""
    N, D = op.in_shape
    jvps0, vjps0 = op.jvps, op.vjps
    if power_iters == "auto":
        sk = block_krylov_svd(op, r, block=block, seed=seed, tol=AUTO_TOL, max_iters=AUTO_MAX_ITERS)
    elif isinstance(power_iters, int) and power_iters >= 0:
        sk = block_krylov_svd(op, r, block=block, power_iters=power_iters, seed=seed)
    else:
        raise ValueError(f"power_iters must be an integer ≥ 0 or 'auto', got {power_iters!r}")
    ritz2 = sk.ritz.pow(2)
    frob2, glogg = float(ritz2.sum()), float(xlogx(ritz2).sum())
    tail = density = None
    traced = 0
    if not sk.exact and num_probes > 0 and lanczos_steps > 0:
        tail, residual, residual_glogg, density = _tail_rounds(
            op, sk.Q, sk.JQ, ritz2, r, num_probes, lanczos_steps, probes_per_round, trace_probes, seed + 1,
            kappa_atol, entropy_atol)
        frob2 += residual
        glogg += residual_glogg
        traced = trace_probes
    erank = math.exp(entropy_from_traces(frob2, glogg)) if frob2 > 0 else 0.0
    r90, source = _r90_from_density(ritz2, tail, density, frob2)
    if sk.exact:
        source = "exact"
    out = _summaries(sk.sigma, sk.V, frob2, N, D)
    return Diagnosis(frob2=frob2, erank=erank, r90=r90, products=op.products - jvps0 - vjps0,
                     jvps=op.jvps - jvps0, vjps=op.vjps - vjps0, r90_source=source, exact=sk.exact,
                     power_iters=sk.power_iters, budget={"sketch": sk.products, "slq": tail.products if tail else 0, "trace": traced},
                     **out)


# -- regimes (paper §4.3, Table 1) --------------------------------------------------------------

REGIMES: dict[str, str] = {
    "rank-bounded": "none to learn: J has at most M ≤ r rows, so the exact metric JᵀJ costs M VJPs per image",
    "low-rank-delocalized": "Spectral Pullback Network with cross-token attention (rank-r modes spread over all tokens)",
    "marginal-kappa-high-cv": "token-importance head distilled from e_t (sensitivity sits on few tokens)",
    "rich-spectrum": "VAE bottleneck on the decoder's input, then an SPN in its latent space",
}


def regime(kappa_cap: float, erank: float, r90: int, cv: float, output_dim: int, r: int = 20, *,
           kappa_high: float = 0.9, cv_high: float = 1.0, erank_rich: float = 5.0) -> str:
    """Sort a probe into the paper's four regimes; ``REGIMES[name]`` is the architecture it calls for.

    In order, the first rule that holds:
    1. rank-bounded — output_dim M ≤ r: rank J ≤ r, so κ_cap(r) = 1 whatever the features.
    2. marginal-kappa-high-cv — κ_cap(r) < kappa_high and CV ≥ cv_high: a rank-r metric misses
       much of the sensitivity, but the sensitivity is concentrated on few tokens, so per-token
       importance carries it (the paper's DINOv2 CLS: κ 0.33, CV 4.06).
    3. rich-spectrum — erank > erank_rich·r, or r_0.90 > erank_rich·r: the energy is spread over
       far more than r directions (VGGT dense heads: erank 212–282, even at κ_cap 0.97).
    4. low-rank-delocalized — κ_cap(r) ≥ kappa_high (so r_0.90 ≤ r): a rank-r metric suffices and
       CV < cv_high says its modes spread over tokens (DPT depth: κ 0.96, CV 0.03, erank 20–34).
    Otherwise (κ_cap below kappa_high with low CV and moderate erank) the spectrum is still too
    spread for rank r: rich-spectrum.
    """
    if output_dim <= r:
        return "rank-bounded"
    if kappa_cap < kappa_high and cv >= cv_high:
        return "marginal-kappa-high-cv"
    if erank > erank_rich * r or r90 > erank_rich * r:
        return "rich-spectrum"
    if kappa_cap >= kappa_high:
        return "low-rank-delocalized"
    return "rich-spectrum"
