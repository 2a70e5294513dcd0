"""``patch(model, fit=None, ratio, method, *, layer)`` and ``unpatch(model)``: a model made cheaper
in place, its own forward kept (docs/patch.md).

``patch`` checks, in order, each refusal one line (``PatchError`` or the fit's ``FitMismatch``,
both ValueErrors): the ratio (a number in [0, 1)), the method (a name in ``prune.methods``), the
seed, the model (``families.structure``). With a fit (``fitting.load_fitted``; a ``Fitted`` is
taken as it is): that the fit applies to the model (``fitting.check_model``: family, token layout,
architecture; weights that differ are not refused but warned, ``WeightsDiffer``), that the fit's
path is the model's, that a block runs after the fit's block, that ``layer``, if given, is the
fit's, and that the method can run here (importance merges by the fit's SPN; EVA's rotary
embedding needs every running token at one grid position, which ToMe's matched and EViT's fused
tokens are not). With no fit: that the method learns nothing (importance needs a fit's head),
that ``layer`` is a block with one after it that runs (``check_layer``), and the EVA refusal.
The path is the model's own either way (``Structure.path``: merge for pooled outputs, prune for a
dense one), which a fit must share, so a patch with no fit takes the path a fit would.

It then sets each block from ``layer`` on as a ``forwards.BlockForward`` (an instance attribute
over the class's ``forward``: parameter names, state dict and the model's class are unchanged)
and hooks the patch embedding. A method that learns nothing reads nothing of a fit: patched with
or without one, at one block, ratio and seed, the model computes the same. ``unpatch`` puts back
each block's own ``forward`` and removes the hooks; the model then computes exactly what it
computed before.

The fit's networks are frozen (no parameter of theirs requires grad); the model's own parameters
are not touched.
"""

from __future__ import annotations

import numbers
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from taskgeom.fitting import Fitted, check_model, load_fitted
from taskgeom.fitting.identity import WeightsDiffer
from taskgeom.patching.families import PatchError, Structure, structure
from taskgeom.patching.forwards import BlockForward, GridHook, Patch
from taskgeom.prune.methods import METHODS, Method, lookup
from taskgeom.prune.scores import LearnedMetric

ATTRIBUTE = "_taskgeom_patch"


def check_ratio(ratio: Any) -> float:
    """η as a float, or a one-line PatchError.

    Args:
        ratio: the fraction of patch tokens removed.

    Returns:
        float(ratio).
    """
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not 0.0 <= float(ratio) < 1.0:
        raise PatchError(f"ratio={ratio!r}: the fraction of patch tokens removed must be a number in [0, 1)")
    return float(ratio)


def check_method(method: Any) -> Method:
    """The method's record, or a one-line PatchError listing the known names.

    Args:
        method: a name in ``prune.methods.METHODS``.

    Returns:
        Its Method.
    """
    try:
        return lookup(method)
    except ValueError:
        raise PatchError(f"method={method!r}: unknown; known: {', '.join(METHODS)}") from None


def _fitted(fit: Any) -> Any:
    """A Fitted, read from a fit directory when given one (a one-line PatchError otherwise)."""
    if isinstance(fit, Fitted):
        return fit
    if not isinstance(fit, (str, Path)):
        raise PatchError(f"fit={type(fit).__name__}: give the directory `taskgeom fit` wrote, its load_fitted(), or "
                         "None with layer=")
    try:
        return load_fitted(fit)
    except (OSError, ValueError) as err:
        raise PatchError(f"fit={str(fit)!r}: {str(err).strip().splitlines()[0]}") from None


def check_runs(struct: Structure, method: Method) -> None:
    """Refuse a method this model's blocks cannot run: ``fuse`` and ``bipartite`` on EVA, whose
    rotary embedding needs one grid position per running token.

    Args:
        struct: the model's structure.
        method: the method's record.

    Raises:
        PatchError: one line naming the methods that run.
    """
    if struct.family == "timm-eva" and method.merge in ("fuse", "bipartite"):
        raise PatchError(f"method={method.name!r}: its merged tokens have no single grid position, and EVA's rotary "
                         "embedding needs one; use importance, random or tome_score")


def check_fit(fitted: Any, struct: Structure, method: Method) -> None:
    """Refuse a fit whose path, block or networks this model and method cannot use (module docstring).

    Args:
        fitted: the fit.
        struct: the model's structure.
        method: the method's record.

    Raises:
        PatchError: one line naming what to change.
    """
    where = f"{fitted.directory}/fit.json"
    if fitted.path != struct.path:
        raise PatchError(f"{where}: a fit for the {fitted.path} path; this model's output takes the {struct.path} "
                         "path (refit through its own decoder)")
    if not 0 <= fitted.layer < struct.last:
        raise PatchError(f"{where}: tokens would go after block {fitted.layer}, and the model's last block that "
                         f"{'runs' if struct.path == 'merge' else 'the decoder reads'} is {struct.last}; refit at an "
                         "earlier block (taskgeom fit --layers)")
    if method.learned and struct.path == "merge" and fitted.metric.spn is None:
        raise PatchError(f"{where}: method='importance' merges tokens by the SPN's pullback distance and this fit "
                         "has no SPN; refit with `taskgeom fit --spn on`")
    check_runs(struct, method)


def check_layer(layer: Any, struct: Structure) -> int:
    """The block after which tokens go in a patch with no fit, or a one-line PatchError.

    A valid block is 0 ≤ layer < ``struct.last``: a block runs reduced after it (merge path), or
    the decoder reads a block after it, before which every token is back (prune path).

    Args:
        layer: the block index the caller gave (None: not given).
        struct: the model's structure.

    Returns:
        int(layer).
    """
    last, count = struct.last, len(struct.blocks)
    valid = f"give 0 ≤ layer < {last}"
    if layer is None:
        raise PatchError(f"layer=None: with no fit, say after which block the tokens go; {valid}")
    if isinstance(layer, bool) or not isinstance(layer, numbers.Integral):
        raise PatchError(f"layer={layer!r}: a block index, an integer; {valid}")
    if not 0 <= layer < count:
        raise PatchError(f"layer={layer}: the model has blocks 0 to {count - 1}; {valid}")
    if layer >= last:
        after = (f"block {last} is the model's last block, and nothing would run after it" if struct.path == "merge"
                 else f"the decoder's last read block is {last}, and every token is back before it")
        raise PatchError(f"layer={layer}: {after}; {valid}")
    return int(layer)


def check_unfitted(layer: Any, struct: Structure, method: Method) -> int:
    """The block of a patch with no fit, once the method learns nothing and can run here.

    Args:
        layer: the block index the caller gave, or None.
        struct: the model's structure.
        method: the method's record.

    Returns:
        The block after which tokens go.

    Raises:
        PatchError: a method that needs a fit, a missing or invalid block, a method EVA cannot run.
    """
    if method.learned:
        unlearned = ", ".join(name for name, m in METHODS.items() if not m.learned)
        raise PatchError(f"method={method.name!r} scores tokens by a fit's importance head: pass fit=, the directory "
                         f"`taskgeom fit` wrote, or a method that learns nothing ({unlearned})")
    layer = check_layer(layer, struct)
    check_runs(struct, method)
    return layer


def check_fitted(fit: Any, model: nn.Module, struct: Structure, method: Method, layer: Any) -> tuple[Any, str | None]:
    """The fit, once it applies to the model, its path, block and networks serve the method, and
    ``layer`` (if given) is its block.

    Args:
        fit: a fit directory or a ``Fitted``.
        model: the model.
        struct: its structure.
        method: the method's record.
        layer: the block the caller gave, or None.

    Returns:
        The Fitted and ``fitting.check_model``'s line on other weights (None: the fitted weights).

    Raises:
        PatchError: one line naming what to change.
        FitMismatch: the fit is for another model or token layout (one line).
    """
    fitted = _fitted(fit)
    note = check_model(fitted, model, warn=False)
    check_fit(fitted, struct, method)
    if layer is not None and (isinstance(layer, bool) or layer != fitted.layer):
        raise PatchError(f"layer={layer!r}: the fit at {fitted.directory} was learned after block {fitted.layer}; "
                         f"leave layer out, or fit after that block (taskgeom fit --layers {layer})")
    return fitted, note


def frozen(learned: LearnedMetric) -> LearnedMetric:
    """The fit's networks in eval mode with no parameter requiring grad (in place).

    Args:
        learned: the fit's metric.

    Returns:
        ``learned``.
    """
    for net in (learned.head, learned.spn):
        if net is not None:
            net.eval().requires_grad_(False)
    return learned


def install(model: nn.Module, fitted: Any, ratio: float, method: Method, seed: int = 0, *,
            layer: int | None = None) -> nn.Module:
    """Patch ``model`` without the checks of ``patch`` (a caller that checked once, e.g. ``compare``).

    Args:
        model: a supported model, the fitted one.
        fitted: its fit, or None (a method that learns nothing, at ``layer``).
        ratio: η in [0, 1).
        method: the method's record.
        seed: seeds random's generator.
        layer: the block after which tokens go where there is no fit (a fit's is ``fitted.layer``).

    Returns:
        ``model``, patched.
    """
    unpatch(model)
    struct = structure(model)
    learned = None if fitted is None else frozen(fitted.metric)
    p = Patch(fitted, method, ratio, seed, struct, model, learned, torch.Generator().manual_seed(seed))
    layer = layer if fitted is None else fitted.layer
    role = "merged" if struct.path == "merge" else "pruned"
    for i in range(layer, struct.last + (struct.path == "merge")):
        block = struct.blocks[i]
        prior = block.__dict__.get("forward")
        p.originals.append((block, prior))
        block.forward = BlockForward(p, i, block, "reduce" if i == layer else role, prior)
    p.handles.append(struct.patch_embed.register_forward_pre_hook(GridHook(p)))
    object.__setattr__(model, ATTRIBUTE, p)
    return model


def patch(model: nn.Module, fit: Any = None, ratio: float = 0.5, method: str = "importance", *,
          layer: int | None = None, seed: int = 0) -> nn.Module:
    """Make ``model``'s own forward reduce its tokens after block ``layer`` (the fit's), in place.

    Args:
        model: a timm or transformers model (docs/patch.md, "Models"); with a fit, one the fit
            applies to: its architecture and token layout (other weights are warned, ``WeightsDiffer``).
        fit: the directory ``taskgeom fit`` wrote, or its ``taskgeom.fitting.load_fitted``; None for a
            method that learns nothing (random, tome_score, evit, tome), at ``layer``.
        ratio: η, the fraction of patch tokens removed, in [0, 1); 0 leaves the outputs unchanged.
        method: importance (the fit's head; merged by its SPN for pooled outputs), random,
            tome_score, evit or tome (``prune.methods``).
        layer: the block after which tokens go: required with no fit, the fit's (or left out) with one.
        seed: seeds random's draws.

    Returns:
        ``model`` (patched again if it was: the new settings replace the old).

    Raises:
        PatchError: a ratio, method, layer, model or fit it cannot use (one line).
        FitMismatch: the fit is for another model or token layout (one line).
    """
    ratio, m = check_ratio(ratio), check_method(method)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise PatchError(f"seed={seed!r}: an integer ≥ 0")
    struct = structure(model)
    if fit is None:
        return install(model, None, ratio, m, seed, layer=check_unfitted(layer, struct, m))
    fitted, note = check_fitted(fit, model, struct, m, layer)
    if note is not None:
        warnings.warn(note, WeightsDiffer, stacklevel=2)
    return install(model, fitted, ratio, m, seed)


def unpatch(model: nn.Module) -> nn.Module:
    """Undo ``patch``: every block's own forward back, the hooks removed (a model not patched is left as it is).

    Args:
        model: a model.

    Returns:
        ``model``.
    """
    p = model.__dict__.pop(ATTRIBUTE, None)
    if p is None:
        return model
    for handle in p.handles:
        handle.remove()
    for block, prior in p.originals:
        if prior is None:
            block.__dict__.pop("forward", None)
        else:
            block.forward = prior
    return model


def patched(model: nn.Module) -> Patch | None:
    """The model's Patch (settings, the fit, the last forward's kept positions), or None.

    Args:
        model: a model.

    Returns:
        Its Patch, or None when it is not patched.
    """
    return model.__dict__.get(ATTRIBUTE)
