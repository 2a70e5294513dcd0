"""What a running stage gets: its resolved inputs, outputs and parameters, a logger,
progress bars, the device, and atomic output writing."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from . import __version__
from .provenance import header_line

T = TypeVar("T")
UMASK = os.umask(0)
os.umask(UMASK)


@cache
def code_version() -> str:
    """Package version plus the git commit of the working tree (with '+dirty' when modified)."""
    try:
        root = Path(__file__).resolve().parents[2]
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", "src"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        return f"{__version__}+g{head}{'.dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        return __version__


def resolve_device(name: str) -> str:
    """``auto`` picks CUDA when present."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device: {name!r} requested but CUDA is not available on this machine")
    return name


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def use_threads(declared: int) -> int:
    """Run on the threads a stage declares. Snakemake exports OMP_NUM_THREADS for each job (its
    ``threads``, or ``--set-threads``); DVC exports nothing, and torch would then take every core.
    Training and reductions depend on the thread count in their last bits, so without this
    ``dvc repro`` and Snakemake would write different bytes on any machine whose core count is
    not the declared one."""
    threads = int(os.environ.get("OMP_NUM_THREADS") or declared)
    for name in THREAD_VARIABLES:  # read by torch and the BLAS libraries when they load
        os.environ.setdefault(name, str(threads))
    return threads


def machine(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return f"{platform.node()} {torch.cuda.get_device_name(torch.device(device))}"
    return f"{platform.node()} {platform.machine()} CPU ×{os.cpu_count()}"


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~UMASK)  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_text(path: str | Path, text: str, provenance: dict | None = None) -> None:
    """Write ``text`` atomically; with ``provenance``, a first line records it (.csv, .md, .tex)."""
    if provenance is not None:
        text = header_line(provenance, Path(path).suffix) + text
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


@dataclass
class StageContext:
    """A stage's view of the world: only its declared inputs, outputs and parameter keys."""

    stage: str
    inputs: dict[str, Path]
    outputs: dict[str, Path]
    params: dict
    wildcard: str | None = None
    device: str = "cpu"
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("taskgeom"))

    def progress(self, iterable: Iterable[T], desc: str, total: int | None = None) -> Iterable[T]:
        """tqdm on an interactive stderr, silent otherwise (logs stay readable)."""
        return tqdm(iterable, desc=desc, total=total, file=sys.stderr, disable=None, leave=False, dynamic_ncols=True)

    def provenance(self) -> dict:
        """Code version, parameters and machine, recorded with every artifact this stage writes."""
        return {
            "stage": self.stage if self.wildcard is None else f"{self.stage}[{self.wildcard}]",
            "code_version": code_version(),
            "params": self.params,
            "device": self.device,
            "machine": machine(self.device),
        }
