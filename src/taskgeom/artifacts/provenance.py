"""Where an artifact came from, recorded inside it.

Every result file a stage writes carries the stage's provenance record
(``StageContext.provenance()``: stage, code version, the parameter values the stage
read, device and machine) in the form that fits the file, so a file pulled from a DVC
remote says where it was made:

========================  ==================================================
JSON                      a top-level ``"provenance"`` key
HDF5                      the root attribute ``provenance`` (JSON)
safetensors               the metadata entry ``provenance`` (JSON)
CSV                       a first line ``# provenance: {...}``
Markdown                  a first line ``<!-- provenance: {...} -->``
LaTeX                     a first line ``% provenance: {...}``
YAML                      a first line ``# provenance: {...}`` (a comment: DVC's metrics and
                          plots read the numbers only, ``artifacts.metrics``)
PNG, PDF                  the image metadata (``provenance`` / ``Subject``)
========================  ==================================================

``read(path)`` gets the record back from any of them (``taskgeom provenance FILE``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

KEY = "provenance"
PDF_FIELD = "Subject"  # PDF's document information has fixed fields; the record goes in Subject
LINE_FORMS = {".csv": ("# ", ""), ".md": ("<!-- ", " -->"), ".tex": ("% ", ""), ".yaml": ("# ", "")}


def encode(record: dict) -> str:
    """A record as compact JSON with sorted keys (values JSON cannot hold as their ``str``).

    Args:
        record: the provenance record.

    Returns:
        One line of JSON.
    """
    return json.dumps(record, sort_keys=True, separators=(",", ":"), default=str)


def header_line(record: dict, suffix: str) -> str:
    """The first line that records ``record`` in a text file of type ``suffix`` (.csv, .md, .tex, .yaml).

    Args:
        record: the provenance record.
        suffix: the file's suffix, a key of ``LINE_FORMS``.

    Returns:
        The line, with its newline.
    """
    start, end = LINE_FORMS[suffix]
    return f"{start}{KEY}: {encode(record)}{end}\n"


def split_header(text: str, suffix: str) -> tuple[dict | None, str]:
    """(record, the rest) of a text file written with ``header_line``; (None, text) without one.

    Args:
        text: the file's text.
        suffix: the file's suffix, a key of ``LINE_FORMS``.

    Returns:
        The record or None, and the text after the header line.
    """
    start, end = LINE_FORMS[suffix]
    first, sep, rest = text.partition("\n")
    prefix = f"{start}{KEY}: "
    if not (first.startswith(prefix) and first.endswith(end)):
        return None, text
    return json.loads(first[len(prefix):len(first) - len(end)]), rest


def figure_metadata(record: dict, fmt: str) -> dict:
    """matplotlib ``savefig`` metadata (no timestamps, so reruns give identical bytes).

    Args:
        record: the provenance record.
        fmt: "png" or "pdf".

    Returns:
        The ``metadata`` argument of ``savefig``.
    """
    if fmt == "pdf":
        return {"CreationDate": None, PDF_FIELD: encode(record)}
    return {KEY: encode(record)}


def _read_png(path: Path) -> dict | None:
    from PIL import Image

    with Image.open(path) as image:
        text = image.info.get(KEY)
    return json.loads(text) if text else None


def _read_pdf(path: Path) -> dict | None:
    # matplotlib writes the info dictionary uncompressed: /Subject (...) with \\, \( and \) escaped
    match = re.search(rb"/" + PDF_FIELD.encode() + rb" \((.*?)(?<!\\)\)", path.read_bytes(), re.S)
    if match is None:
        return None
    text = re.sub(rb"\\([\\()])", rb"\1", match.group(1)).decode()
    return json.loads(text)


def _read_h5(path: Path) -> dict | None:
    import h5py

    with h5py.File(path, "r") as f:
        value = f.attrs.get(KEY)
    return None if value is None else json.loads(value)


def _read_safetensors(path: Path) -> dict | None:
    from safetensors import safe_open

    with safe_open(str(path), "np") as f:
        value = (f.metadata() or {}).get(KEY)
    return None if value is None else json.loads(value)


def read(path: str | Path) -> dict:
    """The provenance record inside ``path``; ValueError naming the file if it has none.

    Args:
        path: a JSON, CSV, Markdown, LaTeX, YAML, HDF5, safetensors, PNG or PDF file.

    Returns:
        The record.

    Raises:
        FileNotFoundError: no such file.
        ValueError: no provenance form for its suffix, or it records none.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".json":
        record = json.loads(path.read_text()).get(KEY)
    elif suffix in LINE_FORMS:
        record, _ = split_header(path.read_text(), suffix)
    elif suffix == ".h5":
        record = _read_h5(path)
    elif suffix == ".safetensors":
        record = _read_safetensors(path)
    elif suffix == ".png":
        record = _read_png(path)
    elif suffix == ".pdf":
        record = _read_pdf(path)
    else:
        raise ValueError(f"{path}: no provenance form for {suffix or 'files without a suffix'}")
    if not isinstance(record, dict):
        raise ValueError(f"{path}: records no provenance (written before provenance was recorded, or by hand)")
    return record
