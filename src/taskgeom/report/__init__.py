"""Tables, figures and REPORT.md."""
