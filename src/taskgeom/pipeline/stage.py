"""A pipeline stage as the registry declares it: its inputs, outputs, parameter keys and
resources, the command both front ends run, and the module that runs it.

Paths are templates over the stage's wildcard, written ``{model}``; a ``Collect`` input
gathers one file per value of a parameter list (Snakemake expands it; DVC depends on the
directory that holds them). A stage whose ``foreach`` key holds a mapping (name -> settings,
e.g. the diagnostic's probes) is ``keyed``: the wildcard is the name, and templates may read a
field of the settings, written ``{probe.model}`` (DVC's ``${item.model}``, a Snakemake input
function).

Some outputs are more than files to DVC: ``metrics`` names the outputs that hold a stage's
headline figures (``dvc metrics show``, ``dvc exp show``) and ``plots`` the outputs that hold
rows to draw, with their axes (``Plot``; ``dvc plots show``). Both front ends still make them
as ordinary outputs; only dvc.yaml declares them apart (``dag.dvc_stage``).

``identity`` names the entries of ``data/identity.yaml`` (the content of what the stage reads
from outside the pipeline, ``pipeline/identity.py``) that count as its parameters: DVC reads
them from that file, Snakemake's rule carries them among its params.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from taskgeom.pipeline.codedeps import code_files
from taskgeom.pipeline.config import get

PARAMS_OK = "data/params.ok"  # check-params' output: DVC's guard against invalid params
CODE_RECORD = "data/code/{stage}.txt"  # a stage's code by content (pipeline/code_records.py)


@dataclass(frozen=True)
class Collect:
    """One file per value of the list at params key ``over``, e.g. every zoo model's metrics."""

    template: str  # with one "{item}" placeholder, e.g. "results/zoo/{item}.json"
    over: str      # dotted params key of a list

    @property
    def directory(self) -> str:
        return self.template.split("{item}")[0].rstrip("/")


@dataclass(frozen=True)
class Plot:
    """How DVC draws one plot-data output (rows, ``artifacts.metrics.write_plot``): the field(s)
    ``y`` against the field ``x``. A plot of one field is declared in its stage and titled with
    the item; DVC 3's stage-level plot properties take one y field, so a plot of several fields
    (methods, variants, loss terms) is a top-level definition over the output's directory, which
    must hold only this plot's files (``<dir>/{wildcard}.yaml``): one chart per item."""

    x: str
    y: tuple[str, ...]
    title: str
    x_label: str
    y_label: str

    @property
    def several(self) -> bool:
        return len(self.y) > 1

    def props(self, title: str) -> dict:
        """DVC's plot properties, titled ``title``."""
        return {"x": self.x, "y": list(self.y) if self.several else self.y[0], "title": title,
                "x_label": self.x_label, "y_label": self.y_label}


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
    seconds: float = 1.0                 # expected wall seconds of one job, for job order (schedule.py)
    gpu: bool = False                    # benefits from a GPU (device: auto uses one)
    dvc_only: bool = False               # a stage only DVC needs (see check-params)
    persist: bool = False                # DVC keeps its outputs in place while it reruns it (``persist: true``)
    metrics: tuple[str, ...] = ()        # names of outs that DVC declares as metrics
    plots: dict[str, Plot] = field(default_factory=dict)  # names of outs that DVC draws, and how
    identity: tuple[str, ...] = ()       # keys of data/identity.yaml it reads (pipeline/identity.py)
    recomputed: tuple[str, ...] = ()     # outs DVC neither caches nor restores (cache: false, persist: true)

    def __post_init__(self) -> None:
        for name in (*self.metrics, *self.plots):
            if name not in self.outs:
                raise ValueError(f"stage {self.name}: {name!r} is declared a metric or plot but is not an output")
        for name, plot in self.plots.items():
            path = self.outs[name]
            if plot.several and (not self.wildcard or not path.endswith(f"/{{{self.wildcard}}}.yaml")):
                raise ValueError(f"stage {self.name}: plot {name!r} of several fields must be <dir>/"
                                 f"{{{self.wildcard}}}.yaml, a directory of its own (DVC draws each file in it)")

    @property
    def runner(self) -> str:
        """The module that runs it: ``taskgeom prune-dense`` runs ``taskgeom.stages.prune_dense``."""
        return f"taskgeom.stages.{self.name.replace('-', '_')}"

    @property
    def code(self) -> tuple[str, ...]:
        """Source files whose change reruns the stage: its runner's import closure (``codedeps``)."""
        return code_files(self.runner)

    @property
    def code_record(self) -> str:
        """Its one code dependency: the file that lists ``code`` by content (``code_records``)."""
        return CODE_RECORD.format(stage=self.name)

    @property
    def log(self) -> str:
        return f"logs/{self.name}/{{{self.wildcard}}}.log" if self.wildcard else f"logs/{self.name}.log"

    @property
    def benchmark(self) -> str:
        return self.log.replace("logs/", "logs/benchmarks/", 1).removesuffix(".log") + ".tsv"

    def address(self, item: str | None) -> str:
        """DVC's name of one instance: ``zoo@tiny-cls``, or ``fetch`` for a stage without items."""
        return f"{self.name}@{item}" if item else self.name

    def command(self, wildcard_value: str | None = None, log: str | None = None) -> str:
        """The shell command, with the wildcard written as ``wildcard_value`` (a template string is fine).

        The item's name and its log path are single-quoted, so a name that slipped past the schema's
        safe pattern (``dvc repro -s`` runs a stage without ``check-params``) reaches the stage, which
        refuses it, instead of the shell. The quotes are literal in both front ends' templates, so
        Snakemake's and DVC's expanded commands stay equal strings."""
        parts = ["taskgeom", self.name]
        if self.wildcard:
            value = wildcard_value or f"{{{self.wildcard}}}"
            parts += [f"--{self.wildcard}", f"'{value}'",
                      "--log", f"'{log or self.log.replace(f'{{{self.wildcard}}}', value)}'"]
        else:
            parts += ["--log", log or self.log]
        return " ".join(parts)


def fill(template: str, stage_: Stage, value: str | None, params: dict | None = None) -> str:
    """Substitute the stage's wildcard (and, for a keyed stage, ``{wildcard.field}`` from the
    item's settings in ``params``) in a path or params-key template."""
    if not stage_.wildcard or value is None:
        return template
    if stage_.keyed and f"{{{stage_.wildcard}." in template:
        for key, field_value in fields(get(params, stage_.foreach)[value]).items():
            template = template.replace(f"{{{stage_.wildcard}.{key}}}", str(field_value))
    return template.replace(f"{{{stage_.wildcard}}}", value)


def fields(item: dict, prefix: str = "") -> dict[str, object]:
    """An item's settings by dotted key, nested mappings flattened: {"sources": {"rgb": "x"}}
    -> {"sources": {...}, "sources.rgb": "x"} (DVC reads ``${item.sources.rgb}`` alike)."""
    flat: dict[str, object] = {}
    for key, v in item.items():
        flat[prefix + key] = v
        if isinstance(v, dict):
            flat.update(fields(v, f"{prefix}{key}."))
    return flat


def param_keys(stage: Stage, params: dict, value: str | None) -> tuple[str, ...]:
    """The dotted params keys one stage instance reads (its wildcard and item fields filled in)."""
    return tuple(fill(k, stage, value, params) for k in stage.params)


def resolve(stage: Stage, params: dict, value: str | None) -> tuple[dict, dict]:
    """(inputs, outputs) of one stage instance as paths, by name; a ``Collect`` input is a list.
    DVC's ``check-params`` guard is left out: the CLI and the Snakefile validate params themselves."""
    inputs: dict = {}
    for name, dep in stage.deps.items():
        if dep == PARAMS_OK:
            continue
        if isinstance(dep, Collect):
            inputs[name] = [Path(dep.template.replace("{item}", v)) for v in get(params, dep.over)]
        else:
            inputs[name] = Path(fill(dep, stage, value, params))
    outputs = {name: Path(fill(p, stage, value)) for name, p in stage.outs.items()}
    return inputs, outputs
