# Learning the metric: the VAE bottleneck, the HDF5 target cache, then the SPN and the importance heads,
# and their tables and figures.
stage_rules("vae", "targets", "spn", "head", "metric-tables")
