"""taskgeom: task-induced (pullback) metrics on Vision Transformer features."""

__version__ = "0.1.0"
