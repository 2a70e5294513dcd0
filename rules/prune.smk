# Using the metric: token merging (CLS models) and hard prune + LLF (dense models) against ToMe, EViT and
# random, their cost, and the pruning tables and figures.
stage_rules("prune-cls", "prune-dense", "prune-speed", "prune-tables")
