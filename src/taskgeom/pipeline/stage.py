"""A pipeline stage as the registry declares it: its inputs, outputs, parameter keys and
resources, the command both front ends run, and the module that runs it.

Paths are templates over the stage's wildcard, written ``{model}``; a ``Collect`` input
gathers one file per value of a parameter list (Snakemake expands it; DVC depends on the
directory that holds them). A stage whose ``foreach`` key holds a mapping (name -> settings,
e.g. the diagnostic's probes) is ``keyed``: the wildcard is the name, and templates may read a
field of the settings, written ``{probe.model}`` (DVC's ``${item.model}``, a Snakemake input
function).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from taskgeom.pipeline.codedeps import code_files
from taskgeom.pipeline.config import get


@dataclass(frozen=True)
class Collect:
    """One file per value of the list at params key ``over``, e.g. every zoo model's metrics."""

    template: str  # with one "{item}" placeholder, e.g. "results/zoo/{item}.json"
    over: str      # dotted params key of a list

    @property
    def directory(self) -> str:
        return self.template.split("{item}")[0].rstrip("/")


@dataclass(frozen=True)
class Stage:
    name: str
    help: str
    deps: dict[str, str | Collect] = field(default_factory=dict)
    outs: dict[str, str] = field(default_factory=dict)
    params: tuple[str, ...] = ()         # dotted params keys, may use the wildcard
    wildcard: str | None = None          # e.g. "model"
    foreach: str | None = None           # params key of the wildcard's values (a list, or a mapping if keyed)
    keyed: bool = False                  # foreach is a mapping; templates may use {wildcard.field}
    threads: int = 1                     # CPU threads it runs with (runtime.use_threads)
    mem_mb: int = 2000
    runtime: int = 10                    # minutes, for cluster schedulers
    gpu: bool = False                    # benefits from a GPU (device: auto uses one)
    dvc_only: bool = False               # a stage only DVC needs (see check-params)

    @property
    def runner(self) -> str:
        """The module that runs it: ``taskgeom prune-dense`` runs ``taskgeom.stages.prune_dense``."""
        return f"taskgeom.stages.{self.name.replace('-', '_')}"

    @property
    def code(self) -> tuple[str, ...]:
        """Source files whose change reruns the stage: its runner's import closure (``codedeps``)."""
        return code_files(self.runner)

    @property
    def log(self) -> str:
        return f"logs/{self.name}/{{{self.wildcard}}}.log" if self.wildcard else f"logs/{self.name}.log"

    @property
    def benchmark(self) -> str:
        return self.log.replace("logs/", "logs/benchmarks/", 1).removesuffix(".log") + ".tsv"

    def command(self, wildcard_value: str | None = None, log: str | None = None) -> str:
        """The shell command, with the wildcard written as ``wildcard_value`` (a template string is fine)."""
        parts = ["taskgeom", self.name]
        if self.wildcard:
            parts += [f"--{self.wildcard}", wildcard_value or f"{{{self.wildcard}}}"]
        parts += ["--log", log or self.log.replace(f"{{{self.wildcard}}}", wildcard_value or "")]
        return " ".join(parts)


def fill(template: str, stage_: Stage, value: str | None, params: dict | None = None) -> str:
    """Substitute the stage's wildcard (and, for a keyed stage, ``{wildcard.field}`` from the
    item's settings in ``params``) in a path or params-key template."""
    if not stage_.wildcard or value is None:
        return template
    if stage_.keyed and f"{{{stage_.wildcard}." in template:
        item = get(params, stage_.foreach)[value]
        for key, field_value in item.items():
            template = template.replace(f"{{{stage_.wildcard}.{key}}}", str(field_value))
    return template.replace(f"{{{stage_.wildcard}}}", value)
