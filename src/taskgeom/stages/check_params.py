"""The ``check-params`` stage (DVC only): every DVC stage depends on its output, so an invalid
params.yaml stops ``dvc repro`` before any stage deletes its outputs to rerun.

It also makes the directory of every collection that this profile leaves empty (a profile
without VAEs has no ``results/vae``): DVC depends on a collection's directory, and a missing
dependency would stop the stage that collects nothing.

And it writes ``data/identity.yaml``, the content of what each entry reads from outside the
pipeline (``pipeline/identity.py``), an output DVC does not cache: it is recomputed from the
data before DVC or Snakemake decides anything."""

from __future__ import annotations

from pathlib import Path

from taskgeom.artifacts.atomic import write_text
from taskgeom.pipeline import identity
from taskgeom.pipeline.config import get
from taskgeom.pipeline.registry import STAGES
from taskgeom.pipeline.runtime import StageContext
from taskgeom.pipeline.stage import Collect


def empty_collections(params: dict) -> list[Path]:
    """Directories of the registry's collections that hold no item under ``params``."""
    return sorted({Path(d.directory) for s in STAGES for d in s.deps.values()
                   if isinstance(d, Collect) and not get(params, d.over)})


def run(ctx: StageContext) -> None:
    """The CLI has validated params.yaml before calling this.

    The output's content is constant, so stages depending on it rerun only for their
    own inputs and parameter keys.
    """
    for directory in empty_collections(ctx.params):
        directory.mkdir(parents=True, exist_ok=True)
    write_text(ctx.outputs["ok"], "params.yaml is valid against src/taskgeom/params.schema.yaml\n")
    identity.write(identity.compute(ctx.params, identity.recorded()), ctx.outputs["identity"])
