"""A source as the stages read it: through the index the ``sources`` stage published.

The index (``data/sources/<name>.json``) records the selected items' keys; a source opened
through it is refused if its selection now differs (params changed since: rerun that stage).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from taskgeom.data.sources import Source, SourceError, open_source


def open_indexed(index: str | Path, sources: Mapping[str, Mapping[str, Any]] | None,
                 resolution: int | None = None) -> Source:
    """The source that the ``sources`` stage indexed into ``index``, opened from ``sources``;
    refused if its selection differs from the index's (params changed since: rerun that stage).
    ``resolution`` picks a world source's render at that side (other kinds are resized by the
    host's preprocessing).

    Args:
        index: the index file (``data/sources/<name>.json``).
        sources: params.yaml's ``sources``.
        resolution: the render side of a world source, or None for its spec's.

    Returns:
        The Source, its selection the index's.

    Raises:
        SourceError: the source cannot be opened (``open_source``), or its selected keys differ
            from the index's (naming the first that differs).
    """
    recorded = json.loads(Path(index).read_text())
    name = recorded["name"]
    if resolution is not None and (sources or {}).get(name, {}).get("kind") == "world":
        sources = {**sources, name: {**sources[name], "resolution": int(resolution)}}
    source = open_source(name, sources)
    if source.describe()["keys_sha256"] != recorded["keys_sha256"]:
        differs = first_difference(recorded["keys"], source)
        raise SourceError(f"sources.{name}: its items differ from {index}'s ({differs}); rerun the sources stage")
    return source


def first_difference(indexed: list[str], source: Source) -> str:
    """The first item key that ``indexed`` and ``source`` do not share, saying where it is missing.

    Args:
        indexed: the keys an index recorded.
        source: the source as opened now.

    Returns:
        A phrase for an error message: a key gone from ``source.root``, one not indexed, or that
        the same items come in another order.
    """
    now = set(source.keys)
    gone = next((k for k in indexed if k not in now), None)
    if gone is not None:
        return f"{gone} is not in {source.root} now"
    was = set(indexed)
    new = next((k for k in source.keys if k not in was), None)
    return f"{new} in {source.root} was not indexed" if new else "the same items in another order"


def open_named(name: str, indexes: list[Path], sources: Mapping[str, Mapping[str, Any]] | None) -> Source:
    """``open_indexed`` of source ``name`` among the index files ``indexes`` (data/sources/<name>.json).

    Args:
        name: the source's key in ``sources``.
        indexes: index files, one named after each source.
        sources: params.yaml's ``sources``.

    Returns:
        The Source, at its spec's resolution.

    Raises:
        SourceError: no index is named after ``name``, or ``open_indexed`` refuses it.
    """
    for index in indexes:
        if Path(index).stem == name:
            return open_indexed(index, sources)
    raise SourceError(f"sources.{name}: no index among {[str(i) for i in indexes]}; rerun the sources stage")
