"""Token merging and pruning in frozen ViTs (paper §7, App. D): ToMe, EViT and random
baselines, importance-guided soft merge for CLS decoders, hard prune + Last-Layer Fusion
for dense decoders."""
