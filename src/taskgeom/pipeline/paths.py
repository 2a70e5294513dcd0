"""Path and params-key templates that the registry's stages share.

Templates read an item's fields as ``{item.field}`` (see ``stage.fill``); a stage that reads
images depends on the index that the ``sources`` stage wrote for each source it names, so a
change to a source's files or selection reruns exactly the stages that read it.
"""

from __future__ import annotations

from taskgeom.pipeline.stage import Collect

DIAGNOSTIC_TABLES = ("table1", "power_iterations", "output_metric", "accuracy")
METRIC_TABLES = ("importance", "head_ablations", "table13", "vae")
METRIC_FIGURES = ("importance_maps", "training_curves")
PRUNE_TABLES = ("table2", "resolutions", "schedules", "second_domain", "baselines", "accuracy", "speed")
PRUNE_FIGURES = ("prune_degradation", "prune_maps")
RETRIEVAL_TABLES = ("table14", "table15", "ablation", "two_stage")
RETRIEVAL_FIGURES = ("retrieval_distances", "retrieval_examples")
TABLE_CSVS = {  # the tables stages' CSVs by <stage>_<table>
    f"{stage}_{t}": f"results/{stage}/{t}.csv" for stage, names in (
    ("diagnose", DIAGNOSTIC_TABLES), ("metric", METRIC_TABLES), ("prune", PRUNE_TABLES),
    ("retrieval", RETRIEVAL_TABLES)) for t in names}
SOURCE_INDEX = "data/sources/{source}.json"  # stages/sources.py
ALL_SOURCES = Collect(SOURCE_INDEX.replace("{source}", "{item}"), over="sources")  # tables: images named by results


def headline(stage: str, wildcard: str) -> str:
    """A stage's headline figures, a DVC metric."""
    return f"results/metrics/{stage}/{{{wildcard}}}.yaml"


def plot_data(plot: str, wildcard: str) -> str:
    """The rows of one plot of one item, in a directory per plot."""
    return f"results/plots/{plot}/{{{wildcard}}}.yaml"


def reads(item: str, *roles: str) -> dict[str, str]:
    """Inputs ``source_<role>``: the index of each source the item names under ``sources.<role>``."""
    return {f"source_{r}": SOURCE_INDEX.format(source=f"{{{item}.sources.{r}}}") for r in roles}


def source_params(item: str, *roles: str) -> tuple[str, ...]:
    """The params keys of those sources' definitions."""
    return tuple(f"sources.{{{item}.sources.{r}}}" for r in roles)


def tables(directory: str, names: tuple[str, ...]) -> dict[str, str]:
    """Outputs ``<name>_<ext>``: each table as ``results/<directory>/<name>.{csv,md,tex}``."""
    return {f"{t}_{ext}": f"results/{directory}/{t}.{ext}" for t in names
            for ext in ("csv", "md", "tex")}


def figures(names: tuple[str, ...]) -> dict[str, str]:
    """Outputs ``<name>_<ext>``: each figure as ``results/figures/<name>.{png,pdf}``."""
    return {f"{fig}_{ext}": f"results/figures/{fig}.{ext}" for fig in names for ext in ("png", "pdf")}
