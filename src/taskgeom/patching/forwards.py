"""The patched forwards: the model's own blocks, called by the model's own forward, with tokens
reduced after the fit's block.

``Patch`` is what ``taskgeom.patch`` leaves on the model; each call of the model's forward fills
its ``running`` state in order:

1. ``GridHook`` (a forward pre-hook on the patch embedding) reads the images' token grid and starts
   a fresh ``Running``;
2. ``BlockForward`` at the fit's block (role ``reduce``) runs the block (with its attention
   statistics where the method reads them) and reduces its output (``reduce.reduce_merge`` or
   ``reduce.select_prune``);
3. merge path: each later block (role ``merged``) runs on the running tokens with the size bias
   log(size) as its additive attention mask (the fused attention kernels still apply) and, for
   EVA, the rotary rows of their positions; the final block expands its output back to every
   original position (``Reduced.owner``);
   prune path: each block up to the decoder's last read block (role ``pruned``) takes the full
   grid, runs on the running tokens, and gives the full grid back (removed tokens frozen, or
   unmerged); the decoder's last read block and those after it run unpatched on the full grid
   (last-layer fusion).

A forward with nothing to remove (η = 0) calls each block exactly as the unpatched model does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from taskgeom.models.vit import Grid
from taskgeom.patching.families import Call, PatchError, Structure, grid_of
from taskgeom.patching.reduce import Reduced, Selected, reduce_merge, select_prune
from taskgeom.patching.stats import with_stats
from taskgeom.prune.methods import Method
from taskgeom.prune.scores import LearnedMetric
from taskgeom.prune.select import gather_tokens, num_removed, scatter_tokens
from taskgeom.prune.timm_blocks import size_bias


@dataclass
class Running:
    """One forward's state: the images' grid, then the reduction.

    Attributes:
        grid: the token grid of the images in this forward.
        reduced: the merge path's running tokens, until the final block expands them.
        selected: the prune path's running tokens.
    """

    grid: Grid
    reduced: Reduced | None = None
    selected: Selected | None = None


@dataclass
class Patch:
    """What a patched model holds (``model._taskgeom_patch``).

    Attributes:
        fitted: the fit (``taskgeom.fitting.Fitted``).
        method: the method's record.
        ratio: η, the fraction of patch tokens removed.
        seed: seeds random's generator.
        structure: the model's structure.
        root: the patched model.
        learned: the fit's head (and SPN), frozen, on the device last used.
        generator: random's generator (CPU).
        originals: each patched block and the instance ``forward`` it had before (None: its class's).
        handles: the hooks to remove.
        running: the state of the forward in progress, or None.
        kept: (B, K) the positions kept by the scores in the last forward (prefix first), or None.
    """

    fitted: Any
    method: Method
    ratio: float
    seed: int
    structure: Structure
    root: nn.Module
    learned: LearnedMetric
    generator: torch.Generator
    originals: list[tuple[nn.Module, Any]] = field(default_factory=list)
    handles: list[Any] = field(default_factory=list)
    running: Running | None = None
    kept: Tensor | None = None

    def metric_on(self, device: torch.device) -> LearnedMetric:
        """The fit's metric with its networks on ``device`` (moved once, outside inference mode).

        Args:
            device: the tokens' device.

        Returns:
            The LearnedMetric.
        """
        if next(self.learned.head.parameters()).device != device:
            with torch.inference_mode(False), torch.no_grad():
                spn = None if self.learned.spn is None else self.learned.spn.to(device)
                self.learned = LearnedMetric(self.learned.head.to(device), self.learned.base, spn)
        return self.learned


class GridHook:
    """A forward pre-hook on the patch embedding: starts each forward's ``Running`` with the grid."""

    def __init__(self, patch: Patch):
        """Hook for ``patch``.

        Args:
            patch: the model's Patch.
        """
        self.patch = patch

    def __call__(self, module: nn.Module, args: tuple) -> None:
        """Read the images' grid from the patch embedding's input (B, C, H, W).

        Args:
            module: the patch embedding.
            args: its positional arguments, images first.
        """
        struct = self.patch.structure
        self.patch.running = Running(Grid(struct.prefix, *grid_of(struct, tuple(args[0].shape))))


def rope_rows(rope: Tensor, positions: Tensor, prefix: int) -> Tensor:
    """EVA's rotary rows for the running tokens at ``positions`` (B, K, prefix first), as
    ``models.adapters.timm_any`` gives them to pruning: (P, d) -> (B, 1, K', d); per head
    (H, P, d) -> (B, H, K', d); per item (B, H, P, d) -> (B, H, K', d).

    Args:
        rope: the block's rotary embedding of the full patch grid.
        positions: (B, K) grid positions of the running tokens.
        prefix: the prefix tokens (which take no rotary rows).

    Returns:
        The rows of the running patch tokens.
    """
    patches = positions[:, prefix:] - prefix
    if rope.ndim == 2:
        return rope[patches][:, None]
    if rope.ndim == 3:
        return rope[:, patches].movedim(0, 1)
    return rope.gather(2, patches[:, None, :, None].expand(-1, rope.shape[1], -1, rope.shape[-1]))


class BlockForward:
    """A block's patched ``forward`` (module docstring), set as the block's instance attribute."""

    def __init__(self, patch: Patch, index: int, block: nn.Module, role: str, prior: Any = None):
        """The patched forward of block ``index``.

        Args:
            patch: the model's Patch.
            index: the block's index.
            block: the block.
            role: "reduce", "merged" or "pruned" (module docstring).
            prior: the block's instance ``forward`` before patching, or None for its class's.
        """
        self.patch, self.index, self.block, self.role, self.prior = patch, index, block, role, prior
        self.call = Call.of(block)

    def original(self, args: tuple, kwargs: dict) -> Tensor:
        """The block's own forward.

        Args:
            args: positional arguments.
            kwargs: keyword arguments.

        Returns:
            Its output.
        """
        if self.prior is not None:
            return self.prior(*args, **kwargs)
        return type(self.block).forward(self.block, *args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Tensor:
        """The block on the running tokens (module docstring).

        Args:
            *args: the block's positional arguments, as its model's forward passes them.
            **kwargs: its keyword arguments.

        Returns:
            The block's output: the running tokens, or the full sequence where the model reads it.
        """
        run = self.patch.running
        if run is None:
            return self.original(args, kwargs)
        bound = self.call.bind(self.block, args, kwargs)
        if self.role == "reduce":
            return self._reduce(run, bound)
        if self.role == "merged" and run.reduced is not None:
            return self._merged(run, bound)
        if self.role == "pruned" and run.selected is not None:
            return self._pruned(run.selected, bound)
        return self.original(args, kwargs)

    def _rerun(self, bound) -> Tensor:
        return self.original(bound.args[1:], bound.kwargs)

    def _check(self, bound, x: Tensor, grid: Grid) -> None:
        """Refuse what a reduced forward cannot honour: a mask, causal attention, tokens beyond the
        grid, gradient checkpointing (its recomputation would reduce again)."""
        args = bound.arguments
        if args.get(self.call.mask) is not None or args.get("is_causal"):
            raise PatchError("a patched model takes no attention mask and no causal attention; "
                             "taskgeom.unpatch(model) to pass one")
        if x.shape[1] != grid.prefix + grid.rows * grid.cols:
            raise PatchError(f"block {self.index} got {x.shape[1]} tokens; the images' grid has "
                             f"{grid.prefix} + {grid.rows}×{grid.cols} (patch dropout or masked tokens are not "
                             "supported while patched)")
        root = self.patch.root
        if getattr(root, "grad_checkpointing", False) or getattr(root, "is_activation_checkpointing", False):
            raise PatchError("gradient checkpointing re-runs blocks and would reduce the tokens again; turn it off "
                             "while the model is patched")

    def _reduce(self, run: Running, bound) -> Tensor:
        p, grid = self.patch, run.grid
        k = num_removed(grid.rows * grid.cols, p.ratio)
        run.reduced = run.selected = None
        if k == 0:
            return self._rerun(bound)
        x = bound.arguments[self.call.tokens]
        self._check(bound, x, grid)
        learned = p.metric_on(x.device) if p.method.learned else None
        merging = p.structure.path == "merge"
        if p.method.reads_attention(merging=merging):
            out, stats = with_stats(p.structure.family, self.block, x, bound.arguments.get("rope"),
                                    lambda: self._rerun(bound))
        else:
            out, stats = self._rerun(bound), None
        if merging:
            run.reduced = reduce_merge(p.method, out, stats, k, grid, learned, p.generator)
            p.kept = run.reduced.kept
            return run.reduced.h
        run.selected = select_prune(p.method, out, stats, k, grid, learned, p.generator)
        p.kept = run.selected.kept
        return run.selected.full

    def _masked(self, bound, size: Tensor | None, positions: Tensor | None) -> Tensor:
        """The block on the running tokens in ``bound``, with their size bias and rotary rows."""
        args = bound.arguments
        args[self.call.mask] = size_bias(size)
        if self.call.rope is not None and args.get(self.call.rope) is not None:
            args[self.call.rope] = rope_rows(args[self.call.rope], positions, self.patch.structure.prefix)
        return self._rerun(bound)

    def _merged(self, run: Running, bound) -> Tensor:
        red = run.reduced
        out = self._masked(bound, red.size, red.positions)
        if self.index == self.patch.structure.last:
            run.reduced = None
            return gather_tokens(out, red.owner)
        return out

    def _pruned(self, sel: Selected, bound) -> Tensor:
        x = bound.arguments[self.call.tokens]
        bound.arguments[self.call.tokens] = gather_tokens(x, sel.reps)
        out = self._masked(bound, sel.size, sel.reps)
        return scatter_tokens(x, sel.reps, out) if sel.owner is None else gather_tokens(out, sel.owner)
