"""Matrix-free linear algebra on the probe Jacobian J = ∂f/∂F (docs/design.md, "Core objects").

operator  JacobianOperator: J·V by batched JVPs, Jᵀ·U by batched VJPs, product counters
sketch    randomized block power iteration (Halko et al. 2011), block Krylov (Musco & Musco 2015),
          and spectral summaries
trace     Hutchinson and Hutch++ (Meyer et al. 2021) for tr g = ‖J‖_F², and leave-one-out samples that
          deflate each start by the others' vectors (XTrace's principle)
lanczos   stochastic Lanczos quadrature for the effective rank (Ubaru, Chen & Saad 2017)
ritz_density  g's spectral density by Rayleigh–Ritz on the sketch's basis joined with Lanczos runs
deflate   (I − QQᵀ) X, the projection every stage deflates by
dense     the dense Jacobian, its exact SVD (the reference for tests) and the spectrum from its Gram
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the submodule that defines it. Loaded on first use (PEP 562), so importing one submodule
# loads only what it imports: a stage's code dependencies (taskgeom.pipeline.codedeps) stay exact.
# The package's own modules import from the defining submodule. ``ritz_density`` is not listed:
# the name is its submodule's, so import the function from ``taskgeom.linalg.ritz_density``.
_EXPORTS: dict[str, str] = {
    "project_out": "deflate",
    "dense_jacobian": "dense",
    "exact_spectrum": "dense",
    "gram_spectrum": "dense",
    "Quadrature": "lanczos",
    "SLQResult": "lanczos",
    "entropy_from_traces": "lanczos",
    "lanczos_quadrature": "lanczos",
    "slq_erank": "lanczos",
    "smaller_side": "lanczos",
    "xlogx": "lanczos",
    "JacobianOperator": "operator",
    "Sketch": "sketch",
    "adaptive_power_iters": "sketch",
    "block_krylov_svd": "sketch",
    "cv": "sketch",
    "exact_sketch": "sketch",
    "kappa_curve": "sketch",
    "r90": "sketch",
    "randomized_svd": "sketch",
    "randomized_svd_path": "sketch",
    "subspace_alignment": "sketch",
    "token_energy": "sketch",
    "TraceEstimate": "trace",
    "deflated_residuals": "trace",
    "hutchinson": "trace",
    "hutchpp": "trace",
    "leave_one_out_residuals": "trace",
    "rademacher": "trace",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
