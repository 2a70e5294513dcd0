"""One module per pipeline stage, named after it (``taskgeom prune-dense`` runs
``stages/prune_dense.py``), each with ``run(ctx: StageContext)``: read the declared inputs,
call the library, write the declared outputs."""
