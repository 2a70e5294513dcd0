"""J·V without forward-mode AD: the JVP as the transpose of the pullback (``TransposedOperator``).

The pullback u ↦ Jᵀu is linear, so its own pullback, taken at any point (here u = 0), is
v ↦ (Jᵀ)ᵀv = J v. A block of JVPs then runs as a vmapped backward pass through the pullback's
graph (reverse over reverse) instead of a vmapped forward-mode pass: the same products, in the
kernels the VJPs already use. Where the map holds an operation without a second derivative, the
first block that needs one falls back to ``JacobianOperator``'s forward-mode JVPs for the rest of
the operator's life, and so does every later block; each column still counts as one JVP.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.func import vjp, vmap

from taskgeom.linalg.operator import JacobianOperator


class TransposedOperator(JacobianOperator):
    """A ``JacobianOperator`` whose ``matvec`` blocks are VJPs of the pullback (module docstring);
    ``rmatvec`` and the product counts are the parent's. The transposed pullback is traced at the
    first ``matvec`` (one pass through the pullback), so an operator that only takes VJPs pays
    nothing for it.

    Attributes:
        transposed: whether the JVP blocks run as transposed VJPs (False once they fell back).
    """

    def __init__(self, f: Callable[[Tensor], Tensor], F: Tensor):
        """``JacobianOperator(f, F)``, its forward-mode JVP block kept as the fallback.

        Args:
            f: the probe map, (N, D) -> (M,).
            F: the point (N, D).
        """
        super().__init__(f, F)
        self._forward_block = self._jvp_block
        self._jvp_block = self._first_block
        self.transposed = True

    def _first_block(self, V: Tensor) -> Tensor:
        """Trace the transpose of the pullback, then run the block with it."""
        _, transpose = vjp(lambda u: self._pullback(u)[0], torch.zeros_like(self.y))
        self._jvp_block = vmap(lambda v: transpose(v)[0])
        return self._jvp_block(V)

    def matvec(self, V: Tensor) -> Tensor:
        """J V by k transposed VJPs (forward-mode JVPs where the map has no second derivative).

        Args:
            V: (k, N, D) tangent vectors.

        Returns:
            J V, (k, M).
        """
        try:
            return super().matvec(V)
        except (RuntimeError, NotImplementedError):
            if not self.transposed:
                raise
            self.jvps -= V.shape[0]
            self._jvp_block, self.transposed = self._forward_block, False
            return super().matvec(V)
