"""``taskgeom inspect``: the tractability diagnostic of a user's own model on a folder of images.

A model as users name it (a timm model name with local weights, or a local Hugging Face
directory) becomes a probe host (``hosts``); the images go through the model's own preprocessing
(``inputs``); ``run.inspect_model`` runs ``diagnostics.diagnose`` on each image at each probed
layer and aggregates the values with bootstrap intervals; ``reading`` says what the regime means
and which tool fits it (paper §4–6), naming the zoo adapter the model is (``zoo``, by architecture);
``output`` writes the terminal table, the JSON and the figure.
docs/inspect.md is the user's guide.
"""
