"""Models: the tiny zoo, its heads, and adapters for the paper's backbones."""
