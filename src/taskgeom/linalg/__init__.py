"""Matrix-free linear algebra on the probe Jacobian J = ∂f/∂F (DESIGN.md, "Core objects").

operator  JacobianOperator: J·V by batched JVPs, Jᵀ·U by batched VJPs, product counters
sketch    randomized block power iteration (Halko et al. 2011), block Krylov (Musco & Musco 2015),
          and spectral summaries
trace     Hutchinson and Hutch++ (Meyer et al. 2021) for tr g = ‖J‖_F², and leave-one-out samples that
          deflate each start by the others' vectors (XTrace's principle)
lanczos   stochastic Lanczos quadrature for the effective rank (Ubaru, Chen & Saad 2017)
ritz_density  g's spectral density by Rayleigh–Ritz on the sketch's basis joined with Lanczos runs
deflate   (I − QQᵀ) X, the projection every stage deflates by
dense     the dense Jacobian and its exact SVD, the reference for tests
"""

from taskgeom.linalg.deflate import project_out
from taskgeom.linalg.dense import dense_jacobian, exact_spectrum
from taskgeom.linalg.lanczos import (
                      Quadrature,
                      SLQResult,
                      entropy_from_traces,
                      lanczos_quadrature,
                      slq_erank,
                      smaller_side,
                      xlogx,
)
from taskgeom.linalg.operator import JacobianOperator
from taskgeom.linalg.ritz_density import ritz_density
from taskgeom.linalg.sketch import (
                      Sketch,
                      adaptive_power_iters,
                      block_krylov_svd,
                      cv,
                      exact_sketch,
                      kappa_curve,
                      r90,
                      randomized_svd,
                      randomized_svd_path,
                      subspace_alignment,
                      token_energy,
)
from taskgeom.linalg.trace import (
                      TraceEstimate,
                      deflated_residuals,
                      hutchinson,
                      hutchpp,
                      leave_one_out_residuals,
                      rademacher,
)

__all__ = [
    "JacobianOperator", "dense_jacobian", "exact_spectrum", "project_out",
    "Sketch", "exact_sketch", "randomized_svd", "randomized_svd_path", "adaptive_power_iters", "block_krylov_svd",
    "TraceEstimate", "hutchinson", "hutchpp", "rademacher", "leave_one_out_residuals", "deflated_residuals",
    "Quadrature", "SLQResult", "lanczos_quadrature", "slq_erank", "smaller_side", "entropy_from_traces", "xlogx",
    "ritz_density",
    "kappa_curve", "r90", "token_energy", "cv", "subspace_alignment",
]
