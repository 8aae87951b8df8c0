"""The gRPC front door: attnserve.v1.Inference (with health and reflection) over the serving core, and a Python client for it."""
