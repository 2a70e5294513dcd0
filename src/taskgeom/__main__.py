import sys

from taskgeom.pipeline.cli import main

sys.exit(main())
