"""The ``check-params`` stage (DVC only): every DVC stage depends on its output, so an invalid
params.yaml stops ``dvc repro`` before any stage deletes its outputs to rerun."""

from __future__ import annotations

from taskgeom.artifacts.atomic import write_text
from taskgeom.pipeline.runtime import StageContext


def run(ctx: StageContext) -> None:
    """The CLI has validated params.yaml before calling this.

    The output's content is constant, so stages depending on it rerun only for their
    own inputs and parameter keys.
    """
    write_text(ctx.outputs["ok"], "params.yaml is valid against src/taskgeom/params.schema.yaml\n")
