"""The operators' HTTP port: /metrics (Prometheus text), /healthz (the process answers) and /readyz
(serving), on a port of its own, away from the front doors."""

from __future__ import annotations

import threading
from socketserver import ThreadingMixIn
from typing import Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from .metrics import Metrics


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # scrapes and probes every few seconds: not worth a log line
        pass


class MetricsServer:
    """/metrics (Prometheus text), /healthz (the process answers) and /readyz (serving) on their own port."""

    def __init__(self, metrics: Metrics, host: str, port: int, ready: Callable[[], bool]):
        exposition = make_wsgi_app(metrics.registry)

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

        host = host.strip("[]") or "::"
        server_class = _ThreadingWSGIServer
        if ":" in host:
            import socket

            server_class = type("_V6Server", (_ThreadingWSGIServer,), {"address_family": socket.AF_INET6})
        self.httpd = make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
        self.port = self.httpd.server_port
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="metrics", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
