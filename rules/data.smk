# Data: render the synthetic world; index and check each image source.
stage_rules("fetch", "sources")
