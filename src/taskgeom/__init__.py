"""taskgeom: task-induced (pullback) metrics on Vision Transformer features."""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> the submodule that defines it, loaded on first use (PEP 562): importing the package stays
# free of torch, and a stage's code dependencies (taskgeom.pipeline.codedeps) stay exact.
_EXPORTS: dict[str, str] = {"patch": "patching.patch", "unpatch": "patching.patch"}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
