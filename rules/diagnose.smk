# The tractability diagnostic: one job per probe, then the tables and figures over all probes.
stage_rules("diagnose", "diagnose-tables")
