"""What a running stage gets: its resolved inputs, outputs and parameters, a logger,
progress bars, the device and thread count, and the provenance record of what it writes."""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TypeVar

from tqdm import tqdm

from taskgeom import __version__
from taskgeom.pipeline.code_digest import file_digest, save_digests

T = TypeVar("T")


@cache
def code_version() -> str:
    """Package version plus the git commit of the working tree (with '+dirty' when modified)."""
    try:
        root = Path(__file__).resolve().parents[3]
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", "src"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        return f"{__version__}+g{head}{'.dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        return __version__


@cache
def code_digest(files: tuple[str, ...]) -> str:
    """sha256 over ``files`` (paths relative to the directory that holds the package, as
    ``Stage.code`` lists them), each as its path, its code digest (``code_digest.file_digest``:
    comments, layout and docstrings do not count) and a newline, in sorted order: the code a stage
    imports, whatever commit or working tree it came from."""
    root = Path(__file__).resolve().parents[2].parent
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(f"{rel} {file_digest(root / rel)}\n".encode())
    save_digests()
    return digest.hexdigest()


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
    not the declared one. torch reads the variables only when it loads; if it is loaded already,
    its pool is set as well."""
    threads = int(os.environ.get("OMP_NUM_THREADS") or declared)
    for name in THREAD_VARIABLES:  # read by torch and the BLAS libraries when they load
        os.environ.setdefault(name, str(threads))
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    return threads


def machine(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return f"{platform.node()} {torch.cuda.get_device_name(torch.device(device))}"
    return f"{platform.node()} {platform.machine()} CPU ×{os.cpu_count()}"


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
    threads: int = 1  # the CPU threads it runs with (runtime.use_threads)
    code: tuple[str, ...] = ()  # the source files the stage imports (Stage.code)

    def progress(self, iterable: Iterable[T], desc: str, total: int | None = None) -> Iterable[T]:
        """tqdm on an interactive stderr, silent otherwise (logs stay readable)."""
        return tqdm(iterable, desc=desc, total=total, file=sys.stderr, disable=None, leave=False, dynamic_ncols=True)

    def provenance(self) -> dict:
        """Code version, parameters and machine, recorded with every artifact this stage writes.
        The code version of a stage that knows its code is the package version and the digest of
        that code (``code_digest``), not the git commit, so that a rerun on the same inputs and
        code writes the same bytes at any commit (docs/design.md, "Conventions")."""
        version = f"{__version__}+code.{code_digest(self.code)[:16]}" if self.code else code_version()
        return {
            "stage": self.stage if self.wildcard is None else f"{self.stage}[{self.wildcard}]",
            "code_version": version,
            "params": self.params,
            "device": self.device,
            "machine": machine(self.device),
        }
