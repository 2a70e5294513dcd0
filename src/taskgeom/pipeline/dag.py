"""Both front ends of the stage registry: dvc.yaml (generated text) and Snakemake rule
arguments (read by rules/*.smk).

In dvc.yaml a stage's metrics and plots (``Stage.metrics``, ``Stage.plots``) leave its ``outs``
for its ``metrics`` and ``plots``, DVC 3's stage-level outputs. They stay cached like every
other output (``cache: false`` would keep them out of ``dvc push``/``pull`` and the run-cache
round trip, and git ignores results/), so ``dvc exp show`` and ``dvc metrics diff`` read them from
the cache by each revision's dvc.lock. A plot of several fields is a top-level ``plots``
definition over its directory (``stage.Plot``).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from taskgeom.pipeline import config
from taskgeom.pipeline.identity import IDENTITY, value_at
from taskgeom.pipeline.registry import PARAMS_OK, STAGES
from taskgeom.pipeline.schedule import job_name
from taskgeom.pipeline.stage import Collect, Stage, fill, param_keys

DVC_HEADER = "# Generated from src/taskgeom/pipeline/registry.py by `taskgeom dvc-yaml`; do not edit by hand.\n"


def dvc_path(template: str, stage: Stage) -> str:
    """A registry template in DVC's foreach syntax: ``${item}`` over a list; ``${key}`` and
    ``${item.field}`` over a mapping."""
    if not stage.wildcard:
        return template
    if stage.keyed:
        return template.replace(f"{{{stage.wildcard}.", "${item.").replace(f"{{{stage.wildcard}}}", "${key}")
    return template.replace(f"{{{stage.wildcard}}}", "${item}")


def dvc_stage(stage: Stage) -> dict:
    deps = list(dict.fromkeys(d.directory if isinstance(d, Collect) else dvc_path(d, stage)
                              for d in stage.deps.values()))
    name = "${key}" if stage.keyed else "${item}"
    body = {"cmd": stage.command(name) if stage.wildcard else stage.command(), "deps": [*deps, stage.code_record]}
    if stage.params or stage.identity:
        body["params"] = [dvc_path(k, stage) for k in stage.params]
        body["params"] += [{IDENTITY: [dvc_path(k, stage) for k in stage.identity]}] if stage.identity else []
    staged_plots = {k: plot for k, plot in stage.plots.items() if not plot.several}
    declared = set(stage.metrics) | set(staged_plots)
    body["outs"] = [{dvc_path(p, stage): {"cache": False, "persist": True}} if k in stage.recomputed
                    else {dvc_path(p, stage): {"persist": True}} if stage.persist else dvc_path(p, stage)
                    for k, p in stage.outs.items() if k not in declared]
    if stage.metrics:
        body["metrics"] = [dvc_path(stage.outs[k], stage) for k in stage.metrics]
    if staged_plots:
        item = f"{{{stage.wildcard}}}" if stage.wildcard else ""
        body["plots"] = [{dvc_path(stage.outs[k], stage): plot.props(dvc_path(f"{stage.name} {item}: {plot.title}",
                                                                               stage))}
                         for k, plot in staged_plots.items()]
    return {"foreach": f"${{{stage.foreach}}}", "do": body} if stage.foreach else body


def dvc_top_plots() -> list[dict]:
    """Top-level plots: each plot of several fields over the directory of its files."""
    return [{posixpath.dirname(s.outs[k]): plot.props(f"{s.name}: {plot.title}")}
            for s in STAGES for k, plot in s.plots.items() if plot.several]


def dvc_yaml_text() -> str:
    stages = {s.name: dvc_stage(s) for s in STAGES}
    document = {"stages": stages} | ({"plots": top} if (top := dvc_top_plots()) else {})
    return DVC_HEADER + yaml.safe_dump(document, sort_keys=False, width=120, allow_unicode=True)


@dataclass
class SnakemakeRule:
    """Keyword arguments of one Snakemake rule, as rules/*.smk spread them."""

    input: dict
    output: dict
    params: dict
    log: str
    benchmark: str
    threads: int
    resources: dict
    shell: str
    priority: Callable[[Any], int]


PARAMS_FILE = "params.yaml"  # where DVC reads a stage's ``params`` keys


def dvc_values(s: Stage, params: dict, value: str | None, identity: dict) -> dict[str, dict]:
    """A job's parameters as dvc.lock records them: params file -> {dotted key: value}, the
    params keys it reads under ``PARAMS_FILE`` and its entries of ``identity`` under ``IDENTITY``."""
    out = {PARAMS_FILE: {k: config.get(params, k) for k in param_keys(s, params, value)}} if s.params else {}
    if s.identity:
        out[IDENTITY] = {key: value_at(identity, key) for key in (fill(k, s, value, params) for k in s.identity)}
    return out


def rule_values(s: Stage, params: dict, value: str | None, identity: dict) -> str:
    """A job's ``values`` param: the params keys it reads, with their values, and its entries of
    ``identity`` (``pipeline/identity.py``) under ``"identity"``; Snakemake reruns the job when it changes."""
    values = config.select(params, param_keys(s, params, value))
    if s.identity:
        values["identity"] = {key: value_at(identity, key) for key in (fill(k, s, value, params) for k in s.identity)}
    return json.dumps(values, sort_keys=True)


def snakemake_rule(name: str, params: dict, priorities: Mapping[str, int] | None = None,
                   identity: dict | None = None) -> SnakemakeRule:
    """The rule of stage ``name``; its jobs' priorities from ``priorities`` (``schedule.priorities``,
    by ``schedule.job_name``), 0 for a job it lacks; the content of what it reads from outside the
    pipeline from ``identity`` (``identity.refresh``)."""
    from taskgeom.pipeline.registry import stage as lookup

    s = lookup(name)
    inputs: dict = {}
    for key, dep in s.deps.items():
        if isinstance(dep, Collect):
            inputs[key] = [dep.template.replace("{item}", v) for v in config.get(params, dep.over)]
        elif dep == PARAMS_OK:  # DVC's stand-in for the Snakefile's validate(config)
            continue
        elif s.keyed and f"{{{s.wildcard}." in dep:  # reads the item's settings: an input function
            inputs[key] = lambda wildcards, dep=dep: fill(dep, s, getattr(wildcards, s.wildcard), params)
        else:
            inputs[key] = dep
    inputs["code"] = s.code_record

    def values(wildcards) -> str:
        return rule_values(s, params, getattr(wildcards, s.wildcard) if s.wildcard else None, identity or {})

    resources = {"mem_mb": s.mem_mb, "runtime": s.runtime}
    if s.gpu and params["device"] != "cpu":  # a scheduler may place it on a GPU node
        resources["gpu"] = 1

    def priority(wildcards) -> int:
        return (priorities or {}).get(job_name(s.name, getattr(wildcards, s.wildcard) if s.wildcard else None), 0)

    command = s.command(f"{{wildcards.{s.wildcard}}}", "{log}") if s.wildcard else s.command(log="{log}")
    return SnakemakeRule(inputs, dict(s.outs), {"values": values}, s.log, s.benchmark, s.threads, resources, command,
                         priority)


def empty_collections(params: dict) -> list[Path]:
    """Directories of the registry's collections that hold no item under ``params`` (a profile
    without VAEs has no ``results/vae``). DVC depends on a collection's directory, and neither git
    nor DVC carries an empty one, so whoever runs DVC makes them first (``check-params``, and the
    ``dvc`` launcher before a command that reads the workspace)."""
    return sorted({Path(d.directory) for s in STAGES for d in s.deps.values()
                   if isinstance(d, Collect) and not config.get(params, d.over)})
