"""Harnesses shared by the tests and the benchmarks, not shipped: a server in a thread or in a process of
its own, and clients killed mid-call."""
