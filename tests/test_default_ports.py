"""The default ports' lock: one test process at a time serves on them, and a port already taken fails the
test by name."""

from __future__ import annotations

import socket

import pytest
from filelock import FileLock, Timeout

from . import default_ports


def test_the_ports_are_held_while_a_test_serves_on_them_and_let_go_after():
    with default_ports.default_ports() as ports:
        assert ports == (50051, 8080, 9464)
        with pytest.raises(Timeout):
            FileLock(default_ports.LOCK).acquire(timeout=0)  # another test process waits here
    with FileLock(default_ports.LOCK).acquire(timeout=0):  # let go after
        pass


def test_a_port_already_taken_is_named(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(default_ports, "PORTS", (port,))
        with pytest.raises(AssertionError, match=f"ports \\[{port}\\] are taken"):
            with default_ports.default_ports():
                pass
