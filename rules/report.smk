# The report: results/REPORT.md from every table.
stage_rules("report")
