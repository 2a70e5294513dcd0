# The tiny model zoo: train each model, then tabulate their held-out metrics.
stage_rules("zoo", "zoo-table")
