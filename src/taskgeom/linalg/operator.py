"""The Jacobian operator J = ∂f/∂F of a probe map at one point F, applied to blocks of vectors.

docs/design.md, "Core objects": J = ∂y/∂F is applied to blocks — J·V by batched JVPs, Jᵀ·U by
batched VJPs (torch.func with vmap) — and is never formed. g = JᵀJ is the pullback metric
("Definitions"). Every column of a block counts as one product, so estimators can report
exactly what they spent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import Tensor
from torch.func import jvp, linearize, vjp, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel


@contextlib.contextmanager
def product_mode() -> Iterator[None]:
    """Where the map's products run: outer autograd off (a map closing over parameters that
    require grad records nothing, and nothing it returns requires grad; torch.func's own
    transforms are unaffected), and scaled-dot-product attention on its math path (the fused
    CPU kernels have no forward-AD rule; the math path is the same attention, differentiable
    by torch.func). Both are restored on exit."""
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        yield


class JacobianOperator:
    """J = ∂f/∂F at F, for f: (N, D) -> (M,), applied by batched JVPs and VJPs and never formed.

    ``matvec``  V (k, N, D) -> J V  (k, M)       k JVPs, one vmapped call
    ``rmatvec`` U (k, M)    -> Jᵀ U (k, N, D)    k VJPs, one vmapped call of a single pullback

    Products run in ``product_mode`` (no outer autograd, attention on its math path), whatever
    the caller's parameters and attention settings are.

    The pullback is built once here (one ``torch.func.vjp``), so VJP blocks never re-run the
    forward. The JVP side reuses one jvp function under vmap (f is traced once per block, not
    per product); ``linearize=True`` instead traces the linearised map once, up front, with
    ``torch.func.linearize`` — a fixed cost that long runs amortise.

    Attributes:
        f: the probe map.
        F: the point (N, D), detached.
        y: f(F), detached.
        jvps: JVPs used so far (each column of a block counts once).
        vjps: VJPs used so far.
    """

    def __init__(self, f: Callable[[Tensor], Tensor], F: Tensor, linearize: bool = False):
        """Trace f at F once: one pullback, and the JVP function (or the linearised map).

        Args:
            f: the probe map, (N, D) -> (M,); it must compose with torch.func.jvp, vjp and vmap.
            F: the point (N, D); shapes and dtype come from F and f(F).
            linearize: trace the linearised map once instead of calling jvp per block.
        """
        self.f = f
        self.F = F.detach()
        with product_mode():
            if linearize:
                y, self._jvp_one = _linearized(f, self.F)
            else:
                y = None
                Fp = self.F
                self._jvp_one = lambda v: jvp(f, (Fp,), (v,))[1]
            y_vjp, self._pullback = vjp(f, self.F)
        self.y = (y if y is not None else y_vjp).detach()
        self._jvp_block = vmap(self._jvp_one)
        self._vjp_block = vmap(lambda u: self._pullback(u)[0])
        self.jvps = 0
        self.vjps = 0

    # -- shapes -------------------------------------------------------------------------
    @property
    def in_shape(self) -> tuple[int, int]:
        """(N, D), the shape of F."""
        return tuple(self.F.shape)  # type: ignore[return-value]

    @property
    def in_dim(self) -> int:
        """N·D, the number of columns of J."""
        return self.F.numel()

    @property
    def out_dim(self) -> int:
        """M, the number of rows of J."""
        return self.y.numel()

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of F, which every product takes."""
        return self.F.dtype

    @property
    def device(self) -> torch.device:
        """The device of F, where every product runs."""
        return self.F.device

    @property
    def products(self) -> int:
        """JVPs + VJPs used so far (each column of a block counts once)."""
        return self.jvps + self.vjps

    # -- products -----------------------------------------------------------------------
    def matvec(self, V: Tensor) -> Tensor:
        """J V by k batched JVPs.

        Args:
            V: (k, N, D) tangent vectors, cast to the operator's dtype and device.

        Returns:
            J V, (k, M).

        Raises:
            ValueError: V's trailing shape is not F's.
        """
        V = V.to(dtype=self.dtype, device=self.device)
        if V.shape[1:] != self.F.shape:
            raise ValueError(f"matvec expects (k, {tuple(self.F.shape)}), got {tuple(V.shape)}")
        self.jvps += V.shape[0]
        if V.shape[0] == 0:
            return V.new_zeros(0, self.out_dim)
        with product_mode():
            return self._jvp_block(V).reshape(V.shape[0], self.out_dim)

    def rmatvec(self, U: Tensor) -> Tensor:
        """Jᵀ U by k batched VJPs through the one pullback.

        Args:
            U: (k, M) cotangent vectors, cast to the operator's dtype and device.

        Returns:
            Jᵀ U, (k, N, D).

        Raises:
            ValueError: U is not (k, M).
        """
        U = U.to(dtype=self.dtype, device=self.device)
        if U.ndim != 2 or U.shape[1] != self.out_dim:
            raise ValueError(f"rmatvec expects (k, {self.out_dim}), got {tuple(U.shape)}")
        self.vjps += U.shape[0]
        if U.shape[0] == 0:
            return U.new_zeros(0, *self.F.shape)
        with product_mode():
            return self._vjp_block(U.reshape(U.shape[0], *self.y.shape))

    # Flat views used by the estimators: columns of matrices in R^{N·D} and R^M.
    def mm(self, X: Tensor) -> Tensor:
        """J X for the columns of X: k JVPs.

        Args:
            X: (N·D, k), each column a flattened tangent vector.

        Returns:
            (M, k), J applied to each column.
        """
        return self.matvec(X.T.reshape(X.shape[1], *self.F.shape)).T

    def rmm(self, Y: Tensor) -> Tensor:
        """Jᵀ Y for the columns of Y, a transposed view: k VJPs.

        Args:
            Y: (M, k), each column a cotangent vector.

        Returns:
            (N·D, k), Jᵀ applied to each column, flattened.
        """
        return self.rmatvec(Y.T).reshape(Y.shape[1], self.in_dim).T

    def gram_mm(self, X: Tensor) -> Tensor:
        """g X = Jᵀ J X for the columns of X: k JVPs + k VJPs.

        Args:
            X: (N·D, k), each column a flattened tangent vector.

        Returns:
            (N·D, k), the pullback metric g applied to each column.
        """
        return self.rmm(self.mm(X))


def _linearized(f: Callable[[Tensor], Tensor], F: Tensor) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
    """One trace of the linearised map (torch.func.linearize); its jvp function vmaps."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # const-folding chatter from make_fx, not actionable
        y, jvp_fn = linearize(f, F)
    return y, jvp_fn
