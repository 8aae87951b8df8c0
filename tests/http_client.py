"""One HTTP client for the tests' calls to the HTTP port: a client made for each call (httpx.post) builds an
SSL context and a connection each time, tens of milliseconds that the fuzz tests' thousands of calls add up."""

from __future__ import annotations

import functools

import httpx


@functools.cache
def http() -> httpx.Client:
    return httpx.Client(timeout=60)
