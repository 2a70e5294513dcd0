"""Effective rank of J by stochastic Lanczos quadrature (SLQ) on g = JᵀJ.

docs/design.md, "Definitions": erank = exp(−Σ p_i log p_i), p_i = σ_i² / ‖J‖_F². With λ_i = σ_i²
and T = tr g = Σ λ_i,  −Σ p_i log p_i = log T − tr(g log g) / T,  so erank needs two traces of
functions of g: tr g and tr φ(g), φ(x) = x log x (φ(0) = 0: zero eigenvalues drop out).

Ubaru, Chen & Saad (2017), "Fast estimation of tr(f(A)) via stochastic Lanczos quadrature":
zᵀ φ(g) z ≈ ‖z‖² Σ_k τ_k² φ(θ_k), θ_k the eigenvalues of the Lanczos tridiagonal T_s started at
z/‖z‖ and τ_k the first components of its eigenvectors (Gauss quadrature; exact for φ(x) = x,
so the same runs also give Hutchinson's estimate of tr g).

Gauss or Gauss–Radau (Golub & Meurant, "Matrices, Moments and Quadrature", 2010, ch. 6): every
even derivative of φ(x) = x log x is positive on x > 0, so an s-node Gauss rule *under*-estimates
zᵀφ(g)z — and the entropy, hence erank, comes out high. Every odd derivative from the third on is
negative, so the Radau rule with one node fixed at 0 (g ⪰ 0) over-estimates it instead, by far
less on spectra whose mass sits away from 0 (``tests/linalg/test_estimators_quadrature.py``
checks that the two rules bracket zᵀφ(g)z run by run). It costs one more block of products (β_s,
from Bᵀ B v_s) and is exact for polynomials of degree 2s.

Deflation (as in Hutch++, Meyer et al. 2021): given an orthonormal basis Q (the power-iteration
sketch) with J Q known, the top part is taken exactly from the Ritz values of J on Q and SLQ only
runs on P g P, P = I − QQᵀ, with starts P z. When Q is (nearly) invariant — the dominant
directions — tr φ(g) ≈ Σ_i φ(ritz_i²) + tr φ(P g P), and the stochastic part only sees the flat
tail, where its variance is small.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from taskgeom.linalg.deflate import project_out
from taskgeom.linalg.operator import JacobianOperator
from taskgeom.linalg.trace import rademacher


@dataclass
class Quadrature:
    """Quadrature rules of m Lanczos runs, Σ_k weights[j, k] φ(nodes[j, k]) ≈ z_jᵀ φ(A) z_j
    (A = P g P, or J P Jᵀ on the output side).

    Attributes:
        nodes: (m, s) ≥ 0, the rules' nodes θ.
        weights: (m, s), τ² ‖z_j‖²; they include ‖z_j‖², so ``weights.sum(1).mean()`` estimates
            the dimension of A's side.
        products: JVPs + VJPs the runs spent.
        gauss: for a Radau quadrature, the same runs read as Gauss rules (s nodes each).
        krylov: with ``keep_vectors``, (X (m, N·D, k), J X (m, M, k)): each run's input-side
            vectors and their images.
        norms: with ``keep_vectors``, (m,) start norms: run j's start is norms[j] · X[j, :, 0].
    """

    nodes: Tensor
    weights: Tensor
    products: int
    gauss: Quadrature | None = None
    krylov: tuple[Tensor, Tensor] | None = None
    norms: Tensor | None = None

    def trace(self, phi: Callable[[Tensor], Tensor]) -> float:
        """The SLQ estimate of tr(P φ(g) P), (1/m) Σ_j Σ_k w_jk φ(θ_jk).

        Args:
            phi: φ, elementwise on a tensor, with φ(0) = 0.

        Returns:
            The mean over the m runs.
        """
        return float((self.weights * phi(self.nodes)).sum(1).mean())

    @classmethod
    def concat(cls, parts: list[Quadrature]) -> Quadrature:
        """The runs of several quadratures as one (rules padded with zero-weight nodes, Krylov
        vectors with zero columns where a round's runs all closed early).

        Args:
            parts: quadratures of m_i runs and s_i nodes each.

        Returns:
            (Σ m_i, max s_i) rules, their products summed; ``gauss``, ``norms`` and ``krylov`` only
            where every part has them.
        """
        s = max(q.nodes.shape[1] for q in parts)
        pad = lambda x, n: torch.nn.functional.pad(x, (0, n - x.shape[-1]))
        gauss = cls.concat([q.gauss for q in parts]) if all(q.gauss is not None for q in parts) else None
        out = cls(nodes=torch.cat([pad(q.nodes, s) for q in parts]),
                  weights=torch.cat([pad(q.weights, s) for q in parts]),
                  products=sum(q.products for q in parts), gauss=gauss)
        if all(q.norms is not None for q in parts):
            out.norms = torch.cat([q.norms for q in parts])
        if all(q.krylov is not None for q in parts):
            k = max(q.krylov[0].shape[2] for q in parts)
            out.krylov = tuple(torch.cat([pad(x, k) for x in xs]) for xs in zip(*(q.krylov for q in parts)))
        return out


def xlogx(x: Tensor) -> Tensor:
    """φ(x) = x log x elementwise, with φ(0) = 0 (the p log p → 0 limit of the entropy).

    Args:
        x: any shape, ≥ 0 where it matters (non-positive entries map to 0).

    Returns:
        φ(x), x's shape.
    """
    return torch.where(x > 0, x * torch.log(torch.where(x > 0, x, torch.ones_like(x))), torch.zeros_like(x))


def smaller_side(op: JacobianOperator) -> str:
    """The side whose Lanczos runs meet fewer zero eigenvalues (P g P on R^{N·D} and J P Jᵀ on
    R^M share their nonzero spectrum).

    Args:
        op: the Jacobian operator.

    Returns:
        "output" when M < N·D, else "input".
    """
    return "output" if op.out_dim < op.in_dim else "input"


def lanczos_quadrature(op: JacobianOperator, starts: Tensor, steps: int, basis: Tensor | None = None,
                       scale: float | None = None, side: str = "input", rule: str = "gauss",
                       keep_vectors: bool = False) -> Quadrature:
    """A block of independent Lanczos runs on A = BᵀB, which has the nonzero spectrum of P g P
    (P = I − QQᵀ, or I without ``basis``).

    Side "input": B = J P; side "output": B = P Jᵀ, so A = J P Jᵀ. Both give tr φ(A) = tr φ(P g P)
    for φ(0) = 0. All m runs advance together: each step is one block of m products for B v
    (α = ‖B v‖²) and, except Gauss's last, one block of m for Bᵀ(B v). Products: m·(2s − 1) for
    ``rule="gauss"`` (s ≤ ``steps`` nodes per run), m·2s for ``rule="radau"`` (s + 1 nodes, one at
    0; the last Bᵀ(B v) gives β_s). Full re-orthogonalisation (s is small) keeps the quadrature
    honest in floating point. A run whose Krylov space closes (β ≈ 0) continues as zeros, adding
    nodes of weight 0; the runs stop early once all have closed.

    Args:
        op: the Jacobian operator.
        starts: (N·D, m) on the input side, (M, m) on the output side; deflated here.
        steps: s, the Lanczos steps per run.
        basis: Q (N·D, ℓ) orthonormal, the deflation basis; None for none.
        scale: the size of g's largest eigenvalue, which sets the threshold for a closed run;
            None to take it from the runs' α.
        side: "input" or "output" (``smaller_side`` wastes fewer nodes on zero eigenvalues).
        rule: "gauss" or "radau".
        keep_vectors: also return each run's input-side vectors whose J-images it computed — the
            Lanczos vectors P v (input side) or B v = P Jᵀ v (output side) — with those images, as
            ``Quadrature.krylov``, and the start norms (``linalg.ritz_density`` reads them).

    Returns:
        The runs' Quadrature (for Radau, with ``gauss`` the same runs' Gauss rules).

    Raises:
        ValueError: an unknown ``rule`` or ``side``, or ``keep_vectors`` on a one-step output-side
            Gauss run, which computes no J-image of an input-side vector.
    """
    if rule not in ("gauss", "radau"):
        raise ValueError(f"rule must be 'gauss' or 'radau', got {rule!r}")
    if keep_vectors and side == "output" and rule == "gauss" and steps < 2:
        raise ValueError("keep_vectors on the output side needs rule='radau' or steps ≥ 2: a one-step Gauss run "
                         "computes no J-image of an input-side vector")
    start_products = op.products
    half, half_t, Z = _halves(op, starts, basis, side)
    norms = Z.norm(dim=0)                                     # (m,)
    alphas, betas, kept = _lanczos_steps(half, half_t, Z, norms, steps, scale, side, rule, keep_vectors)
    T = _jacobi_matrices(alphas, betas)
    gauss = _gauss_rule(T, norms, op.products - start_products)
    if rule == "gauss":
        out = gauss
    else:
        out = _gauss_rule(_radau_at_zero(T, betas[-1]), norms, gauss.products)
        out.gauss = gauss
    if keep_vectors:
        out.krylov = (torch.stack([x for x, _ in kept], 2).transpose(0, 1),
                      torch.stack([y for _, y in kept], 2).transpose(0, 1))
        out.norms = norms
    return out


Apply = Callable[[Tensor], Tensor]


def _halves(op: JacobianOperator, starts: Tensor, basis: Tensor | None, side: str) -> tuple[Apply, Apply, Tensor]:
    """B and Bᵀ of ``lanczos_quadrature`` as block maps, and the starts in P's range (input side)."""

    def project(X: Tensor) -> Tensor:
        return X if basis is None else project_out(basis, X)

    if side == "input":
        half, half_t, Z = (lambda v: op.mm(project(v))), (lambda h: project(op.rmm(h))), project(starts)
    elif side == "output":
        half, half_t, Z = (lambda u: project(op.rmm(u))), (lambda h: op.mm(project(h))), starts
    else:
        raise ValueError(f"side must be 'input' or 'output', got {side!r}")
    return half, half_t, Z


def _lanczos_steps(half: Apply, half_t: Apply, Z: Tensor, norms: Tensor, steps: int, scale: float | None,
                   side: str, rule: str, keep_vectors: bool) -> tuple[list[Tensor], list[Tensor], list]:
    """The runs' recurrence from starts Z (n, m) of norms (m,): their α and β, one (m,) per step,
    and with ``keep_vectors`` the (input-side vector, its J-image) pairs, each (·, m)."""
    v = Z / torch.where(norms > 0, norms, torch.ones_like(norms))
    basis_runs = [v]                                          # Lanczos vectors, each (n, m)
    kept: list[tuple[Tensor, Tensor]] = []                    # (input-side vector, its J-image), each (·, m)
    alphas: list[Tensor] = []
    betas: list[Tensor] = []
    v_prev, beta_prev = torch.zeros_like(v), torch.zeros_like(norms)
    closed = norms == 0
    tiny = 1e-12 * (scale if scale else 1.0)
    for step in range(steps):
        Bv = half(v)
        alpha = Bv.pow(2).sum(0)                              # vᵀ A v = ‖B v‖²
        alphas.append(alpha)
        if keep_vectors and side == "input":
            kept.append((v, Bv))
        if step == steps - 1 and rule == "gauss":             # Gauss's last step needs only B v
            break
        BtBv = half_t(Bv)
        if keep_vectors and side == "output":
            kept.append((Bv, BtBv))
        w = BtBv - alpha * v - beta_prev * v_prev
        stack = torch.stack(basis_runs)                       # (s, n, m)
        for _ in range(2):                                    # twice is enough (Kahan–Parlett)
            w = w - torch.einsum("snm,sm->nm", stack, torch.einsum("snm,nm->sm", stack, w))
        beta = w.norm(dim=0)
        if scale is None:
            tiny = 1e-12 * max(float(torch.stack(alphas).abs().max()), 1e-300)
        closed = closed | (beta <= tiny)
        beta = torch.where(closed, torch.zeros_like(beta), beta)
        betas.append(beta)
        if step == steps - 1:                                 # Radau: β_s closes the rule
            break
        v_prev, beta_prev = v, beta
        v = torch.where(closed, torch.zeros_like(w), w / torch.where(closed, torch.ones_like(beta), beta))
        if bool(closed.all()):
            break
        basis_runs.append(v)
    return alphas, betas, kept


def _jacobi_matrices(alphas: list[Tensor], betas: list[Tensor]) -> Tensor:
    """The runs' Lanczos tridiagonals (m, s, s) from s diagonals α and the off-diagonals β (m,)."""
    s = len(alphas)
    T = torch.diag_embed(torch.stack(alphas, 1))              # (m, s, s)
    if s > 1:
        off = torch.stack(betas[: s - 1], 1)                  # (m, s-1)
        T = T + torch.diag_embed(off, 1) + torch.diag_embed(off, -1)
    return T


def _gauss_rule(T: Tensor, norms: Tensor, products: int) -> Quadrature:
    """Jacobi matrices T (m, k, k), start norms (m,) -> nodes θ (eigenvalues) and weights τ² ‖z‖²."""
    theta, S = torch.linalg.eigh(T)
    return Quadrature(nodes=theta.clamp_min(0), weights=S[:, 0, :].pow(2) * norms.pow(2)[:, None], products=products)


def _radau_at_zero(T: Tensor, beta: Tensor) -> Tensor:
    """T (m, s, s) Lanczos tridiagonals, β_s (m,) -> (m, s+1, s+1) Gauss–Radau matrices with one
    eigenvalue at 0: the new diagonal entry is δ_s from T δ = β_s² e_s (Golub & Meurant 2010,
    §6.2). A closed run (β_s = 0) decouples the new node with weight 0, i.e. keeps Gauss."""
    m, s, _ = T.shape
    open_ = beta > 0
    rhs = torch.zeros(m, s, 1, dtype=T.dtype, device=T.device)
    rhs[:, -1, 0] = beta.pow(2)
    eye = torch.eye(s, dtype=T.dtype, device=T.device)
    delta = torch.linalg.solve(torch.where(open_[:, None, None], T, eye), rhs)[:, -1, 0]  # T ≻ 0 on open runs
    R = torch.nn.functional.pad(T, (0, 1, 0, 1))
    R[:, s - 1, s] = R[:, s, s - 1] = beta
    R[:, s, s] = torch.where(open_, delta, torch.zeros_like(delta))
    return R


@dataclass
class SLQResult:
    """The effective rank of J by (deflated) SLQ.

    Attributes:
        erank: exp(entropy).
        entropy: −Σ p_i log p_i, from ``entropy_from_traces``.
        frob2: the estimate of tr g = ‖J‖_F².
        top: (k,) the exact eigenvalues taken from the basis.
        tail: the quadrature of the deflated residual (None when nothing was left to estimate).
        products: JVPs + VJPs spent.
    """

    erank: float
    entropy: float
    frob2: float
    top: Tensor
    tail: Quadrature | None
    products: int


def entropy_from_traces(trace_g: float, trace_glogg: float) -> float:
    """The spectral entropy −Σ p_i log p_i, p_i = λ_i / T, from two traces: log T − tr(g log g)/T.

    Args:
        trace_g: T = tr g.
        trace_glogg: tr(g log g).

    Returns:
        The entropy in nats; 0 when T ≤ 0.
    """
    if trace_g <= 0:
        return 0.0
    return math.log(trace_g) - trace_glogg / trace_g


def slq_erank(op: JacobianOperator, num_probes: int, steps: int = 10, seed: int = 0,
              basis: Tensor | None = None, J_basis: Tensor | None = None) -> SLQResult:
    """Effective rank of J by SLQ on g = JᵀJ (Ubaru, Chen & Saad 2017), optionally deflated.

    With a basis Q, the top k eigenvalues of QᵀgQ come from J Q and SLQ runs on P g P (see the
    module docstring). Both tr g and tr(g log g) come from the same runs, so errors in the
    normaliser and in the entropy sum are correlated and partly cancel in the ratio.

    Args:
        op: the Jacobian operator.
        num_probes: Rademacher starts (N·D,); num_probes·(2·steps − 1) products (Gauss rules).
        steps: Lanczos steps per start.
        seed: seeds the starts.
        basis: Q (N·D, k) orthonormal, or None for plain SLQ.
        J_basis: J Q (M, k) to reuse a sketch's products; otherwise k JVPs compute it.

    Returns:
        The SLQResult.
    """
    start = op.products
    if basis is not None:
        JQ = op.mm(basis) if J_basis is None else J_basis
        top = torch.linalg.svdvals(JQ).pow(2)
    else:
        top = torch.zeros(0, dtype=op.dtype, device=op.device)
    tail = None
    trace_g, trace_glogg = float(top.sum()), float(xlogx(top).sum())
    if num_probes > 0 and steps > 0 and (basis is None or basis.shape[1] < op.in_dim):
        Z = rademacher(op.in_dim, num_probes, seed, op.dtype, op.device)
        scale = float(top[0]) if top.numel() else None
        tail = lanczos_quadrature(op, Z, steps, basis, scale)
        trace_g += tail.trace(lambda x: x)
        trace_glogg += tail.trace(xlogx)
    H = entropy_from_traces(trace_g, trace_glogg)
    return SLQResult(erank=math.exp(H), entropy=H, frob2=trace_g, top=top, tail=tail,
                     products=op.products - start)
