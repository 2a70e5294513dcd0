"""The ``sources`` stage: index one image source of ``sources`` in params.yaml and check it.

Every selected item is decoded once, and every chunk of a world file read against its checksum
(a corrupt or damaged file stops the pipeline here, before any experiment, naming the file and
what to do), and the index records what the source holds: its settings, the selected items'
keys and labels, and a sha256 of the content of every file behind them. Stages
that read the source depend on this index, so a source whose selection or content changes
reruns its readers, and one that does not leaves them alone. Data sets outside the pipeline are
taken as fixed releases: after replacing their files, rerun this stage (``snakemake -R sources``
or ``dvc repro -f sources@<name>``).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from taskgeom.artifacts.atomic import write_json
from taskgeom.data.hdf5 import verify_store
from taskgeom.data.sources import Source, open_source
from taskgeom.pipeline.runtime import StageContext

CHUNK = 1 << 20


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def backing_files(source: Source) -> list[Path]:
    """The files the selected items come from (an item key ``file[i]`` is row i of ``file``) and
    the source's auxiliary files (devkit labels and meta, NYU's splits)."""
    files = {Path(re.sub(r"\[\d+\]$", "", key)) for key in source.keys}
    files |= {Path(source.spec[k]) for k in ("labels", "meta", "splits") if source.spec.get(k)}
    return sorted(files)


def run(ctx: StageContext) -> None:
    source = open_source(ctx.wildcard, ctx.params["sources"])
    files = backing_files(source)
    for path in files if source.spec["kind"] == "world" else ():
        verify_store(path, "world")  # every chunk, each against its checksum, not only the selected items'
    source.check()
    content = hashlib.sha256("".join(f"{p}\t{file_digest(p)}\n" for p in ctx.progress(files, desc="hash")).encode())
    ctx.log.info("source %s: %d items from %d file(s), %s", ctx.wildcard, len(source), len(files),
                 "labelled" if (source.labels >= 0).any() else "unlabelled")
    write_json(ctx.outputs["index"], {
        **source.describe(), "content_sha256": content.hexdigest(), "classes": source.classes,
        "keys": source.keys, "labels": source.labels.tolist(), "provenance": ctx.provenance()})
