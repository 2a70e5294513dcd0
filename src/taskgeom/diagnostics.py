"""The tractability diagnostic (paper §4.1, §4.3): κ_cap(r), effective rank, r_0.90 and token CV
of a probe's Jacobian, matrix-free (``diagnose``) or from the dense Jacobian (``diagnose_exact``),
and the regime they place the probe in (``regime``).

Definitions (docs/design.md, "Definitions"): g = JᵀJ, tr g = ‖J‖_F², σ_i descending;
κ_cap(r) = Σ_{i≤r} σ_i² / ‖J‖_F²; erank = exp(−Σ p_i log p_i), p_i = σ_i² / ‖J‖_F²;
r_0.90 = smallest r with κ_cap(r) ≥ 0.90; e_t = Σ_{i≤r} σ_i² ‖V_{t,i}‖²; CV = std_t(e)/mean_t(e).

How ``diagnose`` spends its products (b = ``block``, default r; q = ``power_iters``; s = ``lanczos_steps``):

1. Sketch — randomized block Krylov (Musco & Musco 2015; ``linalg.block_krylov_svd``): q rounds
   of block power iteration from JᵀΩ, re-orthonormalised each round, keeping every block:
   (2q + 2)·b products for a (q + 1)·b-column basis K with J K known exactly. It gives σ_1..σ_r,
   the modes, and Hutch++'s exact part ‖J K‖_F² (Meyer et al. 2021): κ_cap's numerator and
   denominator share one sketch. When the basis would reach min(M, N·D), J is read whole with
   min(M, N·D) products and everything is exact (κ_cap = 1 once r ≥ rank); no stochastic stage runs.
2. Residual — stochastic Lanczos quadrature (Ubaru, Chen & Saad 2017; ``linalg.lanczos``) on the
   deflated operator P g P, P = I − KKᵀ, run on the smaller of the input and output sides, in
   rounds of ``probes_per_round`` Rademacher starts × s steps closed by a Gauss–Radau rule with a
   node at 0 (2s products per start), plus ``trace_probes`` trace-only starts, one VJP each
   (P Jᵀz). Rounds stop once the standard errors of κ_cap (≤ ``kappa_atol``) and of the entropy
   −Σ p log p (≤ ``entropy_atol`` nats) are small enough, or when ``num_probes`` starts (the
   paper's m) are spent. A Lanczos run whose Krylov space closes (a rank-deficient J) stops early.
   - ‖J‖_F² = ‖J K‖_F² + the mean of the residual's samples (``linalg.trace``): each run's
     Hutchinson sample with the other runs' vectors projected out and their energy counted exactly
     (leave-one-out, the exchangeable principle of XTrace; Epperly, Tropp & Webber 2024), and the
     trace-only starts' deflated by all runs' vectors. The runs' vectors hold the residual's
     leading directions, which carry most of Hutchinson's variance, so these samples spread less
     than plain Hutchinson samples, at no extra products.
   - tr(g log g) = Σ_i φ(ritz_i²) + SLQ of the residual, whose plain Hutchinson trace serves as a
     ratio control variate for it -> erank. Radau, not Gauss: x log x has positive even
     derivatives, so a Gauss rule under-estimates tr(g log g) and erank comes out high; the Radau
     rule errs the other way, by less on spectra whose mass sits away from 0 (``linalg.lanczos``).
   At the defaults (r = 20, q = 2, s = 2, 8 starts per round, 16 trace-only starts) one round costs
   120 + 32 + 16 = 168 products, and each further round 32 more.
3. r_0.90 — from the Ritz values when no stochastic stage ran; otherwise counted in g's Ritz
   density on the basis joined with the SLQ runs' vectors (``linalg.ritz_density``; the runs already
   computed their J-images, so it costs no products), its residual energy calibrated to the
   residual trace above. It keeps the coupling between basis and residual that the pinched
   spectrum (Ritz values ⊕ the residual's nodes) drops — g's spectrum majorizes the pinched one, so
   the latter's count can only come out high. Near r_0.90 each eigenvalue holds a small share of
   ‖J‖_F², so the count follows the trace's error: the reason for the deflated trace above. Beyond
   the basis the deep tail is counted from the quadrature nodes (``_r90_from_density``).
   ``r90_source``: "exact" for an exact sketch, "sketch" when the Ritz values alone reach 0.90,
   else "slq".
4. Ceilings — J has rank at most min(M, N·D), which bounds erank and r_0.90 (``within_rank``); a
   stochastic estimate beyond its bound is clamped to it, and ``Diagnosis.clamped`` names it.

``tests/test_diagnostics.py`` checks ``diagnose`` against ``diagnose_exact`` on planted spectra and
zoo probes; ``benchmarks/diagnose_cost.py`` measures its cost in forward-equivalents and its errors
against the dense reference on every probe (``results/benchmarks/diagnose_cost*.md``, stamped
with the commit).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from taskgeom.linalg.deflate import project_out
from taskgeom.linalg.dense import dense_jacobian, gram_spectrum
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
    """One probe's diagnostic at one point F (r is clipped to min(M, N·D)).

    Attributes:
        kappa_cap: κ_cap(r).
        frob2: ‖J‖_F², exact or estimated.
        erank: the effective rank.
        r90: r_0.90.
        cv: the token CV of ``token_energy`` (0 when it is all zero).
        sigma: (r,) the top singular values, descending.
        modes: (N, D, r) the orthonormal right singular vectors.
        token_energy: (N,) e_t.
        products: JVPs + VJPs used.
        kappa_curve: (r,) κ_cap(1..r).
        jvps: JVPs used.
        vjps: VJPs used.
        power_iters: the q the sketch used.
        r90_source: "exact", "sketch" or "slq" (see the module docstring).
        exact: every value is exact (the dense reference, or a sketch that read J whole).
        budget: products by stage: "sketch", "slq", "trace" (``diagnose``) or "dense".
        clamped: the estimates clamped to their ceiling (``within_rank``): "erank", "r90", both or none.
    """

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
    clamped: tuple[str, ...] = ()


def within_rank(erank: float, r90: int, ceiling: int) -> tuple[float, int, tuple[str, ...]]:
    """(erank, r_0.90, the names of those clamped) within what rank J = k ≤ ``ceiling`` = min(M, N·D) allows:
    erank ≤ k, r_0.90 ≤ ⌈0.90·k⌉ (the largest ⌈0.90·k⌉ of k eigenvalues hold ≥ 0.90 of their sum)."""
    top = (float(ceiling), max(1, math.ceil(R90_LEVEL * ceiling - 1e-9)))
    clamped = tuple(name for name, value, bound in zip(("erank", "r90"), (erank, r90), top) if value > bound)
    return min(erank, top[0]), min(r90, top[1]), clamped


def _summaries(sigma: Tensor, V: Tensor, frob2: float, N: int, D: int) -> dict:
    """Shared tail of both diagnoses: κ curve, modes, token energy and CV from top-r triplets."""
    curve = cumulative_capture(sigma, frob2) if frob2 > 0 else torch.ones_like(sigma)
    curve = curve.clamp(max=1.0)  # rounding only: Σ_{i≤r} σ_i² ≤ ‖J‖_F²
    e = token_energy(sigma, V, N, D)
    return dict(kappa_cap=float(curve[-1]), kappa_curve=curve, sigma=sigma, modes=V.reshape(N, D, -1),
                token_energy=e, cv=coefficient_of_variation(e) if float(e.mean()) > 0 else 0.0)


def diagnose_exact(f: Callable[[Tensor], Tensor], F: Tensor, r: int = 20) -> Diagnosis:
    """The diagnostic from the dense Jacobian (M, N·D) and its full spectrum — the reference
    (``linalg.gram_spectrum``: every singular value, the top-r right singular vectors).

    erank, r_0.90 and ‖J‖_F² use the full spectrum; κ_cap, the modes, e_t and CV the top r.

    Args:
        f: the probe map, (N, D) -> (M,).
        F: the point, (N, D).
        r: the rank of κ_cap(r) and of the modes (clipped to min(M, N·D)).

    Returns:
        The Diagnosis, ``exact=True``; products = M (jacrev's VJPs).
    """
    N, D = F.shape
    J = dense_jacobian(f, F)
    r = min(r, *J.shape)
    S, V = gram_spectrum(J, r)
    lam = S.pow(2)
    frob2 = float(lam.sum())
    p = lam / frob2 if frob2 > 0 else lam
    erank = math.exp(-float(xlogx(p).sum())) if frob2 > 0 else 0.0
    full_curve = torch.cumsum(lam, 0) / frob2 if frob2 > 0 else torch.ones_like(lam)
    out = _summaries(S[:r], V, frob2, N, D)
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
    """r_0.90 and its source (module docstring, item 3) from the Ritz values ritz2 (ℓ,) = σ̂_i² and,
    when a stochastic stage ran, g's Ritz density. When the density puts r_0.90 beyond the basis's
    ℓ columns, where its Rayleigh–Ritz space no longer resolves g, the deep tail is counted from the
    runs' quadrature nodes instead — the even mixture of their Radau and Gauss rules, which err on
    x log x in opposite directions (``linalg.lanczos``), after the Ritz values."""
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
    """Matrix-free diagnostic of a probe map at F: κ_cap(r), ‖J‖_F², erank, r_0.90 and token CV.

    The sketch, the stochastic stage and their product budget are described in the module docstring.

    Args:
        f: the probe map, (N, D) -> (M,); it must compose with torch.func.jvp, vjp and vmap.
        F: the point, (N, D).
        r: the rank of κ_cap(r) and of the modes (clipped to min(M, N·D)).
        num_probes: the most SLQ starts (the paper's m); 0 skips the stochastic stage.
        power_iters: q, the sketch's Krylov rounds; "auto" adds rounds until the top-r subspace
            moves by less than 1e-3 (at most 15).
        seed: the sketch draws from ``seed``, the SLQ and trace-only starts from ``seed + 1``.
        block: b, the columns per Krylov block (default r).
        lanczos_steps: s, Lanczos steps per SLQ start; 0 skips the stochastic stage.
        probes_per_round: SLQ starts per round; the stopping rule is checked after each round.
        kappa_atol: the standard error of κ_cap(r) to reach.
        entropy_atol: the standard error of the entropy −Σ p log p (nats) to reach.
        trace_probes: trace-only starts, one VJP each.
        linearize: trace the linearised map once (``JacobianOperator``).

    Returns:
        The Diagnosis; ``power_iters`` is the q used, ``budget`` the products by stage.

    Raises:
        ValueError: ``power_iters`` is neither an integer ≥ 0 nor "auto".
    """
    op = JacobianOperator(f, F, linearize=linearize)
    return diagnose_operator(op, r=r, num_probes=num_probes, power_iters=power_iters, seed=seed, block=block,
                             lanczos_steps=lanczos_steps, probes_per_round=probes_per_round,
                             kappa_atol=kappa_atol, entropy_atol=entropy_atol, trace_probes=trace_probes)


def _tail_rounds(op: JacobianOperator, basis: Tensor, J_basis: Tensor, top: Tensor, r: int, num_probes: int,
                 steps: int, per_round: int, trace_probes: int, seed: int, kappa_atol: float,
                 entropy_atol: float) -> tuple[Quadrature, float, float, Quadrature]:
    """The stochastic stage on the residual P g P (P = I − QQᵀ, Q = ``basis``, J Q = ``J_basis``;
    ``top`` (ℓ,): the sketch's Ritz values σ̂², the exact part of both traces), as the module
    docstring describes. tr(P g P) is the equal-weight mean of all the deflated samples (weights
    from estimated variances would favour the low samples of a positive quantity); the runs' SLQ of
    tr(P g log g P) takes their Hutchinson trace as a ratio control variate, since a run's x log x
    and x samples move together. Returns the runs' quadrature, tr(P g P), tr(P g log g P) and g's
    Ritz density (for r_0.90)."""
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
        tail = Quadrature.concat(rounds)
        plain = (tail.weights * tail.nodes).sum(1)             # the runs' Hutchinson samples of tr(PgP)
        pool = tuple(x[:LOO_POOL] for x in tail.krylov)         # the runs whose vectors deflate the samples
        samples = torch.cat([leave_one_out_residuals(*tail.krylov, tail.norms, side == "output", LOO_POOL),
                             deflated_residuals(*pool, S)])
        T = T0 + float(samples.mean())
        var_T = float(samples.var()) / samples.numel() if samples.numel() > 1 else math.inf
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


def diagnose_operator(op: JacobianOperator, r: int = 20, num_probes: int = 100, power_iters: int | str = 2,
                      seed: int = 0, *, block: int | None = None, lanczos_steps: int = 2,
                      probes_per_round: int = 8, kappa_atol: float = 0.005,
                      entropy_atol: float = 0.02, trace_probes: int = 16) -> Diagnosis:
    """``diagnose`` on an existing JacobianOperator, whose counters keep running.

    Args:
        op: J of the probe map at the point, ``in_shape`` (N, D) (in place of ``diagnose``'s f, F and
            ``linearize``).
        r: the rank of κ_cap(r) and of the modes.
        num_probes: the most SLQ starts (the paper's m); 0 skips the stochastic stage.
        power_iters: q, the sketch's Krylov rounds, or "auto" (``diagnose``).
        seed: the sketch draws from ``seed``, the SLQ and trace-only starts from ``seed + 1``.
        block: b, the columns per Krylov block (default r).
        lanczos_steps: s, Lanczos steps per SLQ start; 0 skips the stochastic stage.
        probes_per_round: SLQ starts per round; the stopping rule is checked after each round.
        kappa_atol: the standard error of κ_cap(r) to reach.
        entropy_atol: the standard error of the entropy −Σ p log p (nats) to reach.
        trace_probes: trace-only starts, one VJP each.

    Returns:
        The Diagnosis; its product counts are this call's only.

    Raises:
        ValueError: ``power_iters`` is neither an integer ≥ 0 nor "auto".
    """
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
    erank, r90, clamped = within_rank(erank, r90, min(op.out_dim, N * D))
    if sk.exact:
        source = "exact"
    out = _summaries(sk.sigma, sk.V, frob2, N, D)
    return Diagnosis(frob2=frob2, erank=erank, r90=r90, products=op.products - jvps0 - vjps0,
                     jvps=op.jvps - jvps0, vjps=op.vjps - vjps0, r90_source=source, exact=sk.exact,
                     power_iters=sk.power_iters, clamped=clamped,
                     budget={"sketch": sk.products, "slq": tail.products if tail else 0, "trace": traced}, **out)


# -- regimes (paper §4.3, Table 1) --------------------------------------------------------------

REGIMES: dict[str, str] = {
    "rank-bounded": "none to learn: J has at most M ≤ r rows, so the exact metric JᵀJ costs M VJPs per image",
    "low-rank-delocalized": "Spectral Pullback Network with cross-token attention "
                            "(rank-r modes spread over all tokens)",
    "marginal-kappa-high-cv": "token-importance head distilled from e_t (sensitivity sits on few tokens)",
    "rich-spectrum": "VAE bottleneck on the decoder's input, then an SPN in its latent space",
}


def regime(kappa_cap: float, erank: float, r90: int, cv: float, output_dim: int, r: int = 20, *,
           kappa_high: float = 0.9, cv_high: float = 1.0, erank_rich: float = 5.0) -> str:
    """Sort a probe into the paper's four regimes (§4.3); ``REGIMES[name]`` is the architecture it
    calls for.

    In order, the first rule that holds (the examples are the paper's Table 1 rows,
    ``references/paper_numbers.yaml``):
    1. rank-bounded — output_dim M ≤ r: rank J ≤ r, so κ_cap(r) = 1 whatever the features.
    2. marginal-kappa-high-cv — κ_cap(r) < kappa_high and CV ≥ cv_high: a rank-r metric misses
       much of the sensitivity, but the sensitivity is concentrated on few tokens, so per-token
       importance carries it (DINOv2 CLS: κ 0.33, CV 4.06).
    3. rich-spectrum — erank > erank_rich·r, or r_0.90 > erank_rich·r: the energy is spread over
       far more than r directions (VGGT dense heads: erank 212–282, even at κ_cap 0.97).
    4. low-rank-delocalized — κ_cap(r) ≥ kappa_high (so r_0.90 ≤ r): a rank-r metric suffices and
       CV < cv_high says its modes spread over tokens (DPT depth: κ 0.96, CV 0.03, erank 20–34).
    Otherwise (κ_cap below kappa_high with low CV and moderate erank) the spectrum is still too
    spread for rank r: rich-spectrum.

    Args:
        kappa_cap: κ_cap(r).
        erank: the effective rank.
        r90: r_0.90.
        cv: the token CV.
        output_dim: M, the probe's output dimension.
        r: the rank budget.
        kappa_high: the κ_cap(r) a rank-r metric needs.
        cv_high: the CV from which sensitivity counts as concentrated on few tokens.
        erank_rich: erank or r_0.90 above erank_rich·r is a rich spectrum.

    Returns:
        The regime's name, a key of ``REGIMES``.
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
