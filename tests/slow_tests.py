"""Which tests are slow (they export a model or start a server, so `make test-fast` leaves them out), and the
guard that fails any other test the moment it does either."""

from __future__ import annotations

import functools
import subprocess

import pytest

SLOW = "slow"
# Fixtures made with slow_fixture: a test that uses one, directly or through another fixture, is slow.
SLOW_FIXTURES: set[str] = set()


def slow_fixture(function=None, **fixture_options):
    """pytest.fixture (scope="session" unless given) for a fixture that exports models or starts a server:
    every test that uses it is marked slow."""

    def register(fn):
        SLOW_FIXTURES.add(fn.__name__)
        return pytest.fixture(**{"scope": "session", **fixture_options})(fn)

    return register(function) if function else register


def mark_slow_tests(items) -> None:
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


class Guard:
    """While a fast test runs (its fixtures' setup included), exporting a graph or starting a server fails
    it, naming what it did."""

    def __init__(self):
        self.running: str | None = None  # the fast test running now

    def check(self, what: str) -> None:
        if self.running is not None:
            test, self.running = self.running, None  # one failure, not one per call
            pytest.fail(f"{test} {what}, but is not marked slow: use a slow_fixture or @pytest.mark.slow", False)

    def wrap(self, owner, name: str, what: str, applies=lambda *args, **kwargs: True) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def guarded(*args, **kwargs):
            if applies(*args, **kwargs):
                self.check(what)
            return original(*args, **kwargs)

        setattr(owner, name, guarded)


def starts_a_server(args, *rest, **kwargs) -> bool:
    """A child process running `attnserve serve` (the CLI as a module, or its script), not only its help."""
    argv = [str(a) for a in (args if isinstance(args, (list, tuple)) else [args])]
    cli = any(a == "cli" or a.endswith("attnserve") for a in argv)
    return cli and "serve" in argv and not {"--help", "-h"} & set(argv)


def install_guard(guard: Guard) -> None:
    """Every way the tests export a graph or start a server passes through one of these."""
    import torch.onnx

    from service.server import Server
    from testing.server_process import ServerProcess

    guard.wrap(torch.onnx, "export", "exports a model")
    guard.wrap(Server, "start", "starts a server")
    guard.wrap(ServerProcess, "__init__", "starts a server process")
    guard.wrap(subprocess.Popen, "__init__", "starts a server process", lambda _self, *a, **k: starts_a_server(*a))
