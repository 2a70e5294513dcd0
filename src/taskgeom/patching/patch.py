"""``patch(model, fit, ratio, method)`` and ``unpatch(model)``: a fitted model made cheaper in place,
its own forward kept (docs/patch.md).

``patch`` checks, in order, each refusal one line (``PatchError`` or the fit's ``FitMismatch``,
both ValueErrors): the ratio (a number in [0, 1)), the method (a name in ``prune.methods``), the
model (``families.structure``), the fit (``fitting.load_fitted``; a ``Fitted`` is taken as it is),
that the model is the fitted one (``fitting.check_model``: family, token layout, architecture,
weights), that the fit's path is the model's, that a block runs after the fit's block, and that
the method can run here (importance merges by the fit's SPN; EVA's rotary embedding needs every
running token at one grid position, which ToMe's matched and EViT's fused tokens are not). It then
sets each block from the fit's block on as a ``forwards.BlockForward`` (an instance attribute
over the class's ``forward``: parameter names, state dict and the model's class are unchanged)
and hooks the patch embedding. ``unpatch`` puts back each block's own ``forward`` and removes
the hooks; the model then computes exactly what it computed before.

The fit's networks are frozen (no parameter of theirs requires grad); the model's own parameters
are not touched.
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any

import torch
from torch import nn

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
    """A Fitted, read from a fit directory when given one."""
    from taskgeom.fitting import Fitted, load_fitted

    if isinstance(fit, Fitted):
        return fit
    if not isinstance(fit, (str, Path)):
        raise PatchError(f"fit={type(fit).__name__}: give the directory `taskgeom fit` wrote, or its load_fitted()")
    try:
        return load_fitted(fit)
    except (OSError, ValueError) as err:
        raise PatchError(f"fit={str(fit)!r}: {str(err).strip().splitlines()[0]}") from None


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
    if struct.family == "timm-eva" and method.merge in ("fuse", "bipartite"):
        raise PatchError(f"method={method.name!r}: its merged tokens have no single grid position, and EVA's rotary "
                         "embedding needs one; use importance, random or tome_score")


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


def install(model: nn.Module, fitted: Any, ratio: float, method: Method, seed: int = 0) -> nn.Module:
    """Patch ``model`` without the checks of ``patch`` (a caller that checked once, e.g. ``compare``).

    Args:
        model: a supported model, the fitted one.
        fitted: its fit.
        ratio: η in [0, 1).
        method: the method's record.
        seed: seeds random's generator.

    Returns:
        ``model``, patched.
    """
    unpatch(model)
    struct = structure(model)
    p = Patch(fitted, method, ratio, seed, struct, model, frozen(fitted.metric), torch.Generator().manual_seed(seed))
    layer = fitted.layer
    role = "merged" if struct.path == "merge" else "pruned"
    for i in range(layer, struct.last + (struct.path == "merge")):
        block = struct.blocks[i]
        prior = block.__dict__.get("forward")
        p.originals.append((block, prior))
        block.forward = BlockForward(p, i, block, "reduce" if i == layer else role, prior)
    p.handles.append(struct.patch_embed.register_forward_pre_hook(GridHook(p)))
    object.__setattr__(model, ATTRIBUTE, p)
    return model


def patch(model: nn.Module, fit: Any, ratio: float = 0.5, method: str = "importance", *, seed: int = 0) -> nn.Module:
    """Make ``model``'s own forward reduce its tokens after the fit's block, in place.

    Args:
        model: the timm or transformers model ``fit`` was fitted to (docs/patch.md, "Models").
        fit: the directory ``taskgeom fit`` wrote, or its ``taskgeom.fitting.load_fitted``.
        ratio: η, the fraction of patch tokens removed, in [0, 1); 0 leaves the outputs unchanged.
        method: importance (the fit's head; merged by its SPN for pooled outputs), random,
            tome_score, evit or tome (``prune.methods``).
        seed: seeds random's draws.

    Returns:
        ``model`` (patched again if it was: the new settings replace the old).

    Raises:
        PatchError: a ratio, method, model or fit it cannot use (one line).
        FitMismatch: the fit is for another model or token layout (one line).
    """
    from taskgeom.fitting import check_model

    ratio, m = check_ratio(ratio), check_method(method)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise PatchError(f"seed={seed!r}: an integer ≥ 0")
    struct = structure(model)
    fitted = _fitted(fit)
    check_model(fitted, model)
    check_fit(fitted, struct, m)
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
