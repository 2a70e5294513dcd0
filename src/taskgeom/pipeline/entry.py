"""The ``taskgeom`` console script. With ``TASKGEOM_SERVER`` set it hands the command to that
stage server (``pipeline/server.py``) and imports nothing else, so the client costs tens of
milliseconds; otherwise it runs the command here (``cli.main``)."""

from __future__ import annotations

import os
import sys


def main() -> int:
    from taskgeom.pipeline import server

    if (path := os.environ.get(server.ENV)) and sys.argv[1:2] != ["serve"]:
        return server.delegate(path, sys.argv[1:])
    from taskgeom.pipeline.cli import main as run_here

    return run_here()
