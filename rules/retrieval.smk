# Using the metric for search: the Decoder Retrieval Metric against L2 and cosine, and its tables and figures.
stage_rules("retrieval", "retrieval-tables")
