"""`tagalign serve`: latency, throughput, workers, reloads, load with feedback, subject search."""
