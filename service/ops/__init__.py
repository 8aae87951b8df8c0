"""What operators see and set: the configuration, the metrics and their HTTP port, the logs, and one
record per call."""
