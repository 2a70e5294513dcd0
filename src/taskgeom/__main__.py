import sys

from taskgeom.pipeline.entry import main

sys.exit(main())
