"""The operators' HTTP port: /metrics (Prometheus text), /healthz (the process answers) and /readyz
(serving), on a port of its own, away from the front doors."""

from __future__ import annotations

import socket
import threading
from socketserver import ThreadingMixIn
from typing import Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

from .listen import address_text, listening_sockets


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """A WSGI server on a socket that is already bound and listening (listen.py makes it)."""

    daemon_threads = True

    def __init__(self, sock: socket.socket, handler):
        self.address_family = sock.family
        super().__init__(sock.getsockname(), handler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.server_bind()

    def server_bind(self) -> None:  # the socket comes bound: only what WSGIServer learns from binding
        self.server_address = self.socket.getsockname()
        self.server_name, self.server_port = self.server_address[0], self.server_address[1]
        self.setup_environ()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # scrapes and probes every few seconds: not worth a log line
        pass


class MetricsServer:
    """/metrics (Prometheus text), /healthz (the process answers) and /readyz (serving) on their own port."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, ready: Callable[[], bool]):
        exposition = make_wsgi_app(registry)

        def app(environ, start_response):
            path = environ.get("PATH_INFO", "")
            if path == "/healthz":
                start_response("200 OK", [("Content-Type", "text/plain")])
                return [b"ok\n"]
            if path == "/readyz":
                if ready():
                    start_response("200 OK", [("Content-Type", "text/plain")])
                    return [b"ready\n"]
                start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
                return [b"not ready\n"]
            if path == "/metrics":
                return exposition(environ, start_response)
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: /metrics, /healthz, /readyz\n"]

        self.servers = [_ThreadingWSGIServer(sock, _QuietHandler) for sock in listening_sockets(host, port)]
        for server in self.servers:
            server.set_app(app)
            threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
        self.port = self.servers[0].server_port
        self.addresses = [address_text(server.socket) for server in self.servers]

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()
