# Data: render the synthetic world (or index the real data sets).
stage_rules("fetch")
