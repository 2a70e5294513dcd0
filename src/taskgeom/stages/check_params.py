"""The ``check-params`` stage (DVC only): every DVC stage depends on its output, so an invalid
params.yaml stops ``dvc repro`` before any stage deletes its outputs to rerun.

It also makes the directory of every collection that this profile leaves empty (a profile
without VAEs has no ``results/vae``): DVC depends on a collection's directory, and a missing
dependency would stop the stage that collects nothing.

And it writes ``data/identity.yaml``, the content of what each entry reads from outside the
pipeline (``pipeline/identity.py``), an output DVC does not cache: it is recomputed from the
data before DVC or Snakemake decides anything."""

from __future__ import annotations

from taskgeom.artifacts.atomic import write_text
from taskgeom.pipeline import identity
from taskgeom.pipeline.dag import empty_collections
from taskgeom.pipeline.runtime import StageContext


def run(ctx: StageContext) -> None:
    """The CLI has validated params.yaml before calling this.

    The output's content is constant, so stages depending on it rerun only for their
    own inputs and parameter keys.
    """
    for directory in empty_collections(ctx.params):
        directory.mkdir(parents=True, exist_ok=True)
    write_text(ctx.outputs["ok"], "params.yaml is valid against src/taskgeom/params.schema.yaml\n")
    identity.write(identity.compute(ctx.params, identity.recorded()), ctx.outputs["identity"])
