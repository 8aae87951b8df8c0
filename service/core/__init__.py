"""The serving core, transport-free: one object per capability over plain dataclasses, request
validation as pure functions, typed models built by the loader, admission and lifecycle. No grpc, no
protobuf, no HTTP: the front doors convert to and from these types."""
