# The findings (the paper's claims judged from the run's tables), then results/REPORT.md from every table.
stage_rules("findings")
stage_rules("report")
