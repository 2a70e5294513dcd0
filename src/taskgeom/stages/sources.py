"""The ``sources`` stage: index one image source of ``sources`` in params.yaml and check it.

Every selected item is decoded once, and every chunk of a world file read against its checksum
(a corrupt or damaged file stops the pipeline here, before any experiment, naming the file and
what to do), and the index records what the source holds: its settings, the
selected items' keys (relative to the source's root) and labels, each file's sha256 and a
digest of them all (``content_sha256``; ``pipeline/identity.py`` computes the same digest
when it plans, so a changed byte reruns this stage and its readers, and a copy of the files
elsewhere reruns nothing). Nothing in the index depends on where the files lie or on the
machine: its provenance leaves the machine out, so the index is byte-identical on any machine
that holds the same files and runs the same code.
"""

from __future__ import annotations

from taskgeom.artifacts.atomic import write_json
from taskgeom.data.damage import verify_store
from taskgeom.data.digests import Digests, combined
from taskgeom.data.sources import open_source
from taskgeom.pipeline.runtime import StageContext


def run(ctx: StageContext) -> None:
    source = open_source(ctx.wildcard, ctx.params["sources"])
    files = source.files()
    for _, path in files if source.spec["kind"] == "world" else ():
        verify_store(path, "world")  # every chunk, each against its checksum, not only the selected items'
    source.check()
    with Digests() as digests:
        sha = {name: digests.file_sha256(path) for name, path in ctx.progress(files, desc="hash")}
    ctx.log.info("source %s: %d items from %d file(s), %s", ctx.wildcard, len(source), len(files),
                 "labelled" if (source.labels >= 0).any() else "unlabelled")
    provenance = {k: v for k, v in ctx.provenance().items() if k != "machine"}
    write_json(ctx.outputs["index"], {
        **source.describe(), "content_sha256": combined(sha), "classes": source.classes,
        "keys": source.keys, "labels": source.labels.tolist(), "files": sha, "provenance": provenance})
