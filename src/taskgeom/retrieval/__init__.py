"""Task-induced retrieval (paper App. K): the Decoder Retrieval Metric and its evaluation."""
