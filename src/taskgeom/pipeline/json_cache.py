"""A JSON file of computed values keyed by content, shared between processes: what ``codedeps``
(each module's imports) and ``code_digest`` (each module's normalised digest) keep per machine.

The file is read at the first lookup (missing, unreadable or not a JSON object: empty) and
written back atomically by ``save`` only when a lookup added an entry, keeping the newest
``limit`` entries; a failed write is ignored (the values are recomputed next time).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from taskgeom.artifacts.atomic import atomic_path


class JsonCache:
    """Values by key, backed by the JSON file ``file()`` (module docstring)."""

    limit = 4000  # the newest kept: a few per edit of a module

    def __init__(self) -> None:
        self.entries: dict[str, Any] | None = None
        self.added = False

    def file(self) -> Path:
        """The JSON file; each cache names its own."""
        raise NotImplementedError

    def get(self, key: str, compute: Callable[[], Any], valid: Callable[[Any], bool] = lambda v: True) -> Any:
        """The entry at ``key``, computed (and marked for ``save``) when absent or not ``valid``."""
        if self.entries is None:
            try:
                loaded = json.loads(self.file().read_text())
                self.entries = loaded if isinstance(loaded, dict) else {}
            except (OSError, ValueError):
                self.entries = {}
        if key not in self.entries or not valid(self.entries[key]):
            self.entries[key] = compute()
            self.added = True
        return self.entries[key]

    def save(self) -> None:
        """Write the entries back (the newest ``limit``) if any was added; never raises."""
        if not self.added or self.entries is None:
            return
        self.added = False
        keep = dict(list(self.entries.items())[-self.limit:])
        try:
            with atomic_path(self.file()) as tmp:
                tmp.write_text(json.dumps(keep))
        except OSError:
            pass
