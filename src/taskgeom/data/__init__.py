"""Datasets: the synthetic RGB-D world, real-dataset readers and HDF5 storage."""
