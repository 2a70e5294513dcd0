"""Models: the probe-host interface, the tiny zoo (ViT, DPT, multi-view) and its training, the
VAE bottleneck host, and adapters for the paper's backbones."""
