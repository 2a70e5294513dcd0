"""Path and params-key templates that the registry's stages share.

Templates read an item's fields as ``{item.field}`` (see ``stage.fill``); a stage that reads
images depends on the index that the ``sources`` stage wrote for each source it names, so a
change to a source's files or selection reruns exactly the stages that read it.
"""

from __future__ import annotations

from taskgeom.pipeline.stage import Collect

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
