"""Every token-reduction method of ``taskgeom.patch`` against the unpatched model, on held-out images
(``taskgeom compare``, docs/patch.md).

``run.compare_model`` patches the model with each method × ratio in turn and measures, through the
model's own forward, the fidelity of its output to the unpatched output in the decoder's own terms
(``fidelity``), per image, with bootstrap intervals and paired tests against importance; the
throughput of each setting timed round-robin, with its speedup called only where the rounds allow
(``timing``); and FLOPs. ``budget`` reads each method's Pareto fronts and its best setting per
FLOP budget off the table; ``output`` writes the table, JSON, per-image values and figure. No
module here imports the pipeline.
"""

from taskgeom.comparing.run import Comparison, compare_model

__all__ = ["Comparison", "compare_model"]
