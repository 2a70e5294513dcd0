"""The pipeline layer: the stage registry and the two front ends drawn from it (dvc.yaml and
the Snakemake rules), the ``taskgeom`` command, parameter validation, and what a running stage
gets (``runtime.StageContext``). Nothing in the library packages imports it."""
