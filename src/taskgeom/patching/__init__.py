"""A model made cheaper in place, its own forward kept (docs/patch.md).

``patch(model, fit, ratio, method)`` reduces the tokens of a timm or transformers model after the
block its fit (``taskgeom fit``) learned at, by any method of ``prune.methods``: importance-guided
merging for pooled, CLS or classifier outputs, hard pruning with last-layer fusion for dense ones.
A method that learns nothing (random, tome_score, evit, tome) needs no fit:
``patch(model, ratio=η, method=name, layer=L)`` reduces after block L on the model's own path. A
fit applies to its model fine-tuned (other weights, ``WeightsDiffer`` warned) but not to another
architecture or token layout (``FitMismatch``). ``unpatch(model)`` undoes it exactly.
``families`` says which models and how their blocks are called, ``reduce`` is the reduction,
``forwards`` the patched blocks, ``patch`` the checks and the installing. No module here imports
the pipeline.
"""

from taskgeom.fitting.identity import WeightsDiffer
from taskgeom.patching.families import PatchError
from taskgeom.patching.patch import patch, patched, unpatch

__all__ = ["PatchError", "WeightsDiffer", "patch", "patched", "unpatch"]
