"""A user's own model fitted with the project's learned metric (``taskgeom fit``, docs/fit.md).

``run.fit_model`` logs what the fit will cost before it starts (``estimate``), computes the
spectral Jacobian targets of the user's images at one layer (``targets``: a resumable HDF5 cache
keyed by content), trains the importance head and, where the model's path needs it, the SPN
(``train``), judges the head on held-out images against the position-only floor, and writes a
self-describing fit directory (``checkpoint``). ``load_fitted`` reads one back as a
``LearnedMetric``; ``check_model`` refuses a model other than the fitted one (``identity``). No
module here imports the pipeline.
"""

from taskgeom.fitting.checkpoint import Fitted, load_fitted
from taskgeom.fitting.identity import FitMismatch, check_model

__all__ = ["FitMismatch", "Fitted", "check_model", "load_fitted"]
