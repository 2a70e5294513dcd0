"""dvc.lock rendered one stage entry at a time, each entry's text kept while the entry is unchanged.

To record a stage, DVC rewrites the whole lock file (``dvc.dvcfile.Lockfile.dump_stages``,
through ``modify_yaml``), rendered by ruamel's pure-Python round-trip emitter. A lock file lists
every stage's dependencies and outputs with their hashes, so the whole render grows with the DAG
and is repeated once per stage that ``dvc repro`` runs or restores. A lock file is ``schema``
followed by the ``stages`` mapping, and in a block mapping an entry's text depends only on its
key, its value, its depth and, where a value holds one object twice (a YAML alias in params.yaml, recorded among the
stage's parameters), on how many anchors the entries before it used: ruamel names anchors
``id001``, ``id002``, ... in document order. So the document is the render of ``{"schema": ...}``,
then ``stages:``, then each entry rendered alone under ``stages:`` with its anchors renumbered
after those of the entries before it. ``LockRenderer`` renders each entry with DVC's dumper once
per distinct (name, value, aliasing) and joins the texts, so a dump renders only what changed.

Where that decomposition could differ from the whole render, the whole data goes to DVC's dumper:
other top-level keys, no stages, an object shared by two entries, or an entry text whose anchor
and alias marks are not exactly those its aliasing implies. ``tests/test_dvc_lock_dump.py``
compares the two renders on lock files DVC wrote.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Dumper = Callable[[Any, io.StringIO], Any]
STAGES_LINE = "stages:\n"
ANCHOR_MARK = re.compile(r"(?<=[ \n])([&*])id(\d{3,})(?=[ \n])")  # ruamel's ANCHOR_TEMPLATE, id{:03d}


def rendered(data: Any, dumper: Dumper) -> str:
    """``dumper``'s text for ``data``."""
    out = io.StringIO()
    dumper(data, out)
    return out.getvalue()


@dataclass
class Shape:
    """An entry's value seen as the dumper sees it: ``key`` tells apart every two values it may
    write differently (containers by kind, order and aliasing, scalars by type and value);
    ``anchors`` and ``aliases`` count the containers it reaches twice and the repeat visits."""

    key: Any
    anchors: int
    aliases: int
    containers: set[int]


def shape(value: Any) -> Shape:
    """The ``Shape`` of ``value``."""
    first: dict[int, int] = {}
    repeated: set[int] = set()
    aliases = 0

    def walk(v: Any) -> Any:
        nonlocal aliases
        if not isinstance(v, (dict, list, tuple)):
            return (type(v).__name__, repr(v))
        if id(v) in first:
            repeated.add(id(v))
            aliases += 1
            return ("ref", first[id(v)])
        first[id(v)] = len(first)
        if isinstance(v, dict):
            return ("map", tuple((walk(k), walk(c)) for k, c in v.items()))
        return (type(v).__name__, tuple(walk(c) for c in v))

    key = walk(value)
    return Shape(key, len(repeated), aliases, set(first))


class LockRenderer:
    """``dumper``'s text for a lock file's data, the stage entries rendered once each."""

    def __init__(self, dumper: Dumper) -> None:
        self.dumper = dumper
        self.entries: dict[Any, str | None] = {}

    def __call__(self, data: Any) -> str:
        stages = data.get("stages") if isinstance(data, dict) else None
        if not isinstance(stages, dict) or not stages or list(data) != ["schema", "stages"]:
            return rendered(data, self.dumper)
        texts, anchors, seen = [], 0, set()
        for name, value in stages.items():
            entry = shape(value)
            text = None if seen & entry.containers else self.entry(name, value, entry)
            if text is None:
                return rendered(data, self.dumper)
            seen |= entry.containers
            texts.append(renumbered(text, anchors) if entry.anchors else text)
            anchors += entry.anchors
        return rendered({"schema": data["schema"]}, self.dumper) + STAGES_LINE + "".join(texts)

    def entry(self, name: str, value: Any, entry: Shape) -> str | None:
        """The lines of ``name: value`` under ``stages:``, rendered alone (anchors from ``id001``);
        None where the dumper does not write them as expected."""
        key = (name, entry.key)
        if key not in self.entries:
            text = rendered({"stages": {name: value}}, self.dumper)
            marks = ANCHOR_MARK.findall(text)
            expected = sum(m == "&" for m, _ in marks) == entry.anchors and len(marks) == entry.anchors + entry.aliases
            self.entries[key] = text[len(STAGES_LINE):] if text.startswith(STAGES_LINE) and expected else None
        return self.entries[key]


def renumbered(text: str, offset: int) -> str:
    """``text`` with each anchor and alias ``idN`` named ``id(N + offset)``."""
    return ANCHOR_MARK.sub(lambda m: f"{m.group(1)}id{int(m.group(2)) + offset:03d}", text)


_RENDERERS: dict[Dumper, LockRenderer] = {}


def lock_text(data: Any, dumper: Dumper) -> str:
    """``dumper``'s text for lock-file ``data``, through this process's ``LockRenderer`` for it."""
    return _RENDERERS.setdefault(dumper, LockRenderer(dumper))(data)
