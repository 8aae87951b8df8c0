"""The default ports (50051, 8080, 9464), taken by one test process at a time: `make test` runs the suite in
several processes, and the tests that start a server as users start it need those ports free."""

from __future__ import annotations

import contextlib
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock

from service.ops.config import ServerConfig

DEFAULT = ServerConfig()
PORTS = (DEFAULT.port, DEFAULT.http_port, DEFAULT.metrics_port)
LOCK = Path(tempfile.gettempdir()) / "attnserve-tests-default-ports.lock"


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def default_ports() -> Iterator[tuple[int, int, int]]:
    """Held while a server of the test's runs on the default ports: another test process waiting for them
    waits here. Anything else listening there (a server a user left running) fails the test by name."""
    with FileLock(LOCK):
        taken = [port for port in PORTS if listening(port)]
        assert not taken, f"ports {taken} are taken: this test starts a server on the default ports"
        yield PORTS
