"""Trace of the pullback metric, tr g = ‖J‖_F² (docs/design.md, "Definitions"), from Jacobian products
only: JVPs for input-side starts, VJPs for output-side ones.

Hutchinson (1989): tr g = E_z zᵀ g z = E_z ‖J z‖², z Rademacher.
Hutch++ (Meyer, Musco, Musco & Woodruff 2021): tr g = tr(Qᵀ g Q) + tr(P g P), P = I − QQᵀ; the
first term is exact (‖J Q‖_F²), Hutchinson only sees the residual, whose variance is far smaller
when Q holds the dominant directions. Here Q is *given* — the power-iteration basis — so κ_cap's
numerator (Σ_{i≤r} σ_i² from that sketch) and denominator share one sketch.
Leave-one-out (the exchangeable principle of XTrace, Epperly, Tropp & Webber 2024): the Lanczos
runs on the residual computed J-images of vectors that lean towards its leading directions, so
each sample can count the energy of the *other* runs' vectors exactly and sample only what they
leave — unbiased, since those vectors do not depend on the sample's own start.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from taskgeom.linalg.deflate import project_out
from taskgeom.linalg.operator import JacobianOperator


@dataclass
class TraceEstimate:
    """A trace estimate, estimate = exact_part + residual.

    Attributes:
        estimate: the estimate of tr g.
        exact_part: ‖J Q‖_F² on the deflation basis (0 for plain Hutchinson).
        residual: the mean of the stochastic samples.
        stderr: the standard error of that mean (inf with one sample).
        num_probes: the Rademacher starts used.
        products: JVPs spent.
    """

    estimate: float
    exact_part: float
    residual: float
    stderr: float
    num_probes: int
    products: int


def rademacher(n: int, k: int, seed: int, dtype: torch.dtype = torch.float64,
               device: torch.device | str = "cpu") -> Tensor:
    """Independent ±1 entries, the starts of every stochastic estimator here.

    Args:
        n: rows.
        k: columns.
        seed: seeds a fresh ``torch.Generator`` on ``device``.
        dtype: the result's dtype.
        device: where to draw.

    Returns:
        (n, k), each entry ±1 with probability ½.
    """
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randint(0, 2, (n, k), generator=gen, device=device).to(dtype).mul_(2).sub_(1)


def _mean_and_stderr(samples: Tensor) -> tuple[float, float]:
    """Mean and standard error of the samples (inf for one sample, zeros for none)."""
    k = samples.numel()
    if k == 0:
        return 0.0, 0.0
    err = float(samples.std() / k ** 0.5) if k > 1 else float("inf")
    return float(samples.mean()), err


def hutchinson(op: JacobianOperator, num_probes: int, seed: int = 0) -> TraceEstimate:
    """Hutchinson's estimator (Hutchinson 1989), ‖J‖_F² ≈ (1/m) Σ_j ‖J z_j‖², z_j Rademacher.

    Args:
        op: the Jacobian operator.
        num_probes: m, the starts (N·D,); m JVPs.
        seed: seeds the starts.

    Returns:
        A TraceEstimate with ``exact_part`` 0.
    """
    start = op.products
    Z = rademacher(op.in_dim, num_probes, seed, op.dtype, op.device)  # (N·D, m)
    samples = op.mm(Z).pow(2).sum(0)                                  # (m,)
    mean, err = _mean_and_stderr(samples)
    return TraceEstimate(mean, 0.0, mean, err, num_probes, op.products - start)


def hutchpp(op: JacobianOperator, basis: Tensor, num_probes: int, seed: int = 0,
            J_basis: Tensor | None = None) -> TraceEstimate:
    """Hutch++ (Meyer et al. 2021) on g = JᵀJ with a given orthonormal basis Q.

    tr g = ‖J Q‖_F² + (1/m) Σ_j ‖J (I − QQᵀ) z_j‖², z_j Rademacher.

    Args:
        op: the Jacobian operator.
        basis: Q (N·D, k), orthonormal columns (e.g. ``Sketch.Q``).
        num_probes: m, the Rademacher starts; m JVPs.
        seed: seeds the starts.
        J_basis: J Q (M, k) when already known (e.g. ``Sketch.JQ``, paid for by the power
            iteration); otherwise k JVPs compute it.

    Returns:
        A TraceEstimate with ``exact_part`` = ‖J Q‖_F².
    """
    start = op.products
    JQ = op.mm(basis) if J_basis is None else J_basis
    exact = float(JQ.pow(2).sum())
    Z = rademacher(op.in_dim, num_probes, seed, op.dtype, op.device)
    Z = project_out(basis, Z)                                         # project out the sketch
    samples = op.mm(Z).pow(2).sum(0)
    mean, err = _mean_and_stderr(samples)
    return TraceEstimate(exact + mean, exact, mean, err, num_probes, op.products - start)


def leave_one_out_residuals(X: Tensor, JX: Tensor, norms: Tensor, output_starts: bool, pool: int = 16) -> Tensor:
    """Per-run samples of tr(P g P) that each project out the *other* runs' vectors (the
    exchangeable principle of XTrace, Epperly, Tropp & Webber 2024): no products, less variance.

    Sample j = ‖J W_j‖_F² + (Hutchinson on P_j g P_j, P_j = P − W_j W_jᵀ), W_j an orthonormal basis
    of the other runs' vectors. W_j does not depend on z_j, so every sample is unbiased, and the
    energy the other runs' vectors hold (the residual's leading directions, which carry most of
    Hutchinson's variance) is counted exactly instead of sampled. With one run this is plain
    Hutchinson. All m samples come from one inverse B = (XᵀX)⁻¹: the projector onto the others'
    span is Π − X B[:, j] B[j, j]⁻¹ B[j, :] Xᵀ (Π onto all of them; j's k columns as one block),
    so the distance of s_j from that span is ‖s_j‖ (B[j, j]⁻¹)₀₀^½ and its image
    J X B[:, j] B[j, j]⁻¹ e₀.

    Args:
        X: (m, n, k) run j's input-side vectors in P's range.
        JX: (m, M, k) their images J X.
        norms: (m,) such that run j's start is s_j = norms[j] · X[j, :, 0]: P z_j on the input
            side, P Jᵀ z_j on the output side, z_j Rademacher.
        output_starts: the runs started on the output side.
        pool: runs after the first ``pool`` are deflated by the pool's vectors only
            (``deflated_residuals``), which bounds the cost once the runs are many.

    Returns:
        (m,) the samples, in X's dtype.
    """
    m, n, k = X.shape
    if m > pool:
        later = norms[pool:] * X[pool:, :, 0].T                # the later runs' starts, (n, m − pool)
        J_later = None if output_starts else norms[pool:] * JX[pool:, :, 0].T
        return torch.cat([leave_one_out_residuals(X[:pool], JX[:pool], norms[:pool], output_starts, pool),
                          deflated_residuals(X[:pool], JX[:pool], later, J_later)])
    if m == 1:
        first = (X if output_starts else JX)[0, :, 0]
        return (norms.pow(2) * first.pow(2).sum()).reshape(1)
    Y, JY, c = _orthonormal_runs(X.double(), JX.double(), norms.double())
    Yf, JYf = Y.transpose(0, 1).reshape(n, m * k), JY.transpose(0, 1).reshape(JY.shape[1], m * k)
    A, H = Yf.T @ Yf, JYf.T @ JYf                              # run j: rows/columns j·k … j·k + k − 1
    live = Yf.norm(dim=0) > 0
    A = torch.where(live[:, None] & live[None, :], A, torch.eye(m * k, dtype=A.dtype, device=A.device))
    if float(torch.linalg.eigvalsh(A)[0]) < 1e-8:              # the runs' spans meet: no block inverse
        return _leave_one_out_by_bases(A, H, c, k, output_starts).to(X.dtype)
    B = torch.linalg.inv(A)
    blocks = [slice(j * k, (j + 1) * k) for j in range(m)]
    Bcol = torch.stack([B[:, b] for b in blocks])             # (m, m·k, k) = B[:, j]
    inv_jj = torch.linalg.inv(torch.stack([B[b, b] for b in blocks]))   # (m, k, k) = B[j, j]⁻¹
    # ‖J W_j‖² = tr(Π_j g) = tr(B H) − tr(B[j, j]⁻¹ B[j, :] H B[:, j])
    energy = torch.einsum("ij,ji->", B, H) - torch.einsum("mab,mib,ic,mca->m", inv_jj, Bcol, H, Bcol)
    if output_starts:                                         # ‖P_j u‖² = ‖u‖² (B[j, j]⁻¹)₀₀
        residual = c.pow(2) * inv_jj[:, 0, 0]
    else:                                                     # ‖J (Π − Π_j) s‖², (Π − Π_j) s = c Y B[:, j] B[j, j]⁻¹ e₀
        y = torch.einsum("mib,mb->mi", Bcol, inv_jj[:, :, 0])
        residual = c.pow(2) * torch.einsum("mi,ij,mj->m", y, H, y)
    return (energy + residual.clamp_min(0)).to(X.dtype)


def _orthonormal_runs(X: Tensor, JX: Tensor, norms: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Each run's vectors (m, n, k) made orthonormal in order (Gram–Schmidt, twice), with their
    images; a vector within rounding of its run's earlier ones becomes 0 (a closing Krylov space).
    The first keeps its direction, so start j is c[j] · Y[j, :, 0] with c = norms · ‖X[:, :, 0]‖."""
    Y, JY = X.clone(), JX.clone()
    ref = X[:, :, 0].norm(dim=1, keepdim=True)
    for i in range(X.shape[2]):
        for _ in range(2):
            for p in range(i):
                coef = (Y[:, :, p] * Y[:, :, i]).sum(1, keepdim=True)
                Y[:, :, i] -= coef * Y[:, :, p]
                JY[:, :, i] -= coef * JY[:, :, p]
        size = Y[:, :, i].norm(dim=1, keepdim=True)
        ok = size > 1e-10 * ref
        Y[:, :, i] = torch.where(ok, Y[:, :, i] / torch.where(ok, size, torch.ones_like(size)),
                                 torch.zeros_like(size))
        JY[:, :, i] = torch.where(ok, JY[:, :, i] / torch.where(ok, size, torch.ones_like(size)),
                                  torch.zeros_like(size))
    return Y, JY, norms * ref[:, 0]


def _leave_one_out_by_bases(A: Tensor, H: Tensor, c: Tensor, k: int, output_starts: bool) -> Tensor:
    """``leave_one_out_residuals`` one run at a time, from an orthonormal basis of the others'
    span (their Gram matrix A's eigenvectors above rounding): for runs whose spans meet."""
    m = c.numel()
    samples = []
    for j in range(m):
        others = torch.cat([torch.arange(0, j * k), torch.arange((j + 1) * k, m * k)]).to(A.device)
        d, E = torch.linalg.eigh(A[others][:, others])
        keep = d > 1e-10 * float(d.max())
        C = E[:, keep] * d[keep].rsqrt()                      # W_j = Y_others C
        a = c[j] * (C.T @ A[others, j * k])                   # W_jᵀ s_j
        HW = C.T @ H[others][:, others] @ C
        if output_starts:
            residual = c[j] ** 2 - a @ a
        else:
            residual = c[j] ** 2 * H[j * k, j * k] - 2 * c[j] * (a @ (C.T @ H[others, j * k])) + a @ HW @ a
        samples.append(torch.diagonal(HW).sum() + residual.clamp_min(0))
    return torch.stack(samples)


def deflated_residuals(X: Tensor, JX: Tensor, S: Tensor, JS: Tensor | None = None) -> Tensor:
    """Hutch++ samples of tr(P g P) from extra starts, deflated by the Lanczos runs' vectors.

    Sample i = ‖J W‖_F² + ‖(P − W Wᵀ) Jᵀ z_i‖² or ‖J (P − W Wᵀ) z_i‖², W an orthonormal basis of
    the runs' vectors: one product per sample (paid by the caller), and the runs' leading residual
    directions are counted exactly.

    Args:
        X: (m, n, k) the runs' input-side vectors in P's range (as in
            ``leave_one_out_residuals``, from runs on either side).
        JX: (m, M, k) their images J X.
        S: (n, p) the starts, P Jᵀ z_i (output side) or P z_i (input side), z_i Rademacher and
            independent of the runs.
        JS: (M, p) = J S for input-side starts; None for output-side ones.

    Returns:
        (p,) the samples, in X's dtype.
    """
    m, n, k = X.shape
    Y, JY, _ = _orthonormal_runs(X.double(), JX.double(), torch.ones(m, dtype=torch.float64, device=X.device))
    Yf, JYf = Y.transpose(0, 1).reshape(n, m * k), JY.transpose(0, 1).reshape(JY.shape[1], m * k)
    d, E = torch.linalg.eigh(Yf.T @ Yf)                         # float64, unit columns: a Gram rounding cannot fake
    keep = d > 1e-10 * float(d.max().clamp_min(1e-300))
    C = E[:, keep] * d[keep].rsqrt()                            # W = Y C, orthonormal
    JW = JYf @ C
    S = S.double()
    a = C.T @ (Yf.T @ S)                                        # Wᵀ s_i, (K, p)
    if JS is None:
        residual = S.pow(2).sum(0) - a.pow(2).sum(0)
    else:
        residual = (JS.double() - JW @ a).pow(2).sum(0)
    return (JW.pow(2).sum() + residual.clamp_min(0)).to(X.dtype)
