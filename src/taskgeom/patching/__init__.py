"""A fitted model made cheaper in place, its own forward kept (docs/patch.md).

``patch(model, fit, ratio, method)`` reduces the tokens of a timm or transformers model after the
block its fit (``taskgeom fit``) learned at, by any method of ``prune.methods``: importance-guided
merging for pooled, CLS or classifier outputs, hard pruning with last-layer fusion for dense ones;
``unpatch(model)`` undoes it exactly. ``families`` says which models and how their blocks are
called, ``reduce`` is the reduction, ``forwards`` the patched blocks, ``patch`` the checks and
the installing. No module here imports the pipeline.
"""

from taskgeom.patching.families import PatchError
from taskgeom.patching.patch import patch, patched, unpatch

__all__ = ["PatchError", "patch", "patched", "unpatch"]
