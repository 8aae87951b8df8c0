"""A split server's two sides in one process, for ServerThread with api_processes over 1: the engine's core
(the models, their loops, the metrics port) and an API process's Server (the doors), on one event loop,
joined by the engine link over a Unix socket as `--api-processes` joins its processes, so that the tests of
every door can run through the link and still look at the engine's state."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile

from prometheus_client import CollectorRegistry

from service.ops.config import ServerConfig
from service.ops.metrics import Metrics
from service.ops.metrics_http import MetricsServer
from service.ops.metrics_processes import summed
from service.server import Server
from service.split.api_process import EngineModels
from service.split.engine_host import EngineHost
from service.split.engine_process import engine_core, shared_data


class LinkedEngine:
    """The engine side; api_server() makes the API side, which reaches it over the link."""

    def __init__(self, config: ServerConfig):
        self.workdir = tempfile.mkdtemp(prefix="attnserve-linked-")
        data_dir, self.documents = shared_data(config, self.workdir)  # the jobs a stop cut off queued again
        self.config = dataclasses.replace(config, data_dir=str(data_dir))
        self.metrics = Metrics()
        self.core = engine_core(config, self.metrics)
        self.host = EngineHost(self.core, os.path.join(self.workdir, "engine.sock"))
        self.models: EngineModels | None = None
        self.registry: CollectorRegistry | None = None  # what the metrics port serves, once the API side starts

    async def api_server(self) -> tuple[Server, int]:
        """The API side started (its models not loaded yet), serving the engine's metrics port as its own
        (the metrics of both, summed), and its gRPC port."""
        await self.host.start()
        self.core.on_readiness_change(lambda ready: self.host.health_changed())
        self.models = EngineModels(self.host.path)
        await self.models.link.connect()
        server = Server(self.config, self.models.open)
        port = await server.start()
        server.core.on_readiness_change(self.models.link.tell_readiness)
        self.registry = summed(self.metrics.registry, server.metrics.registry)
        server.metrics_server = MetricsServer(self.registry, server.config.host, self.config.metrics_port, self.ready)
        return server, port

    def ready(self) -> bool:
        return self.core.ready() and self.host.doors_serving() == 1

    async def load(self, server: Server) -> None:
        await self.core.load()
        self.host.models_loaded()
        await server.load_models()
        self.models.link.tell_readiness(server.core.ready())

    async def stop(self) -> None:
        await self.models.link.close()
        await self.core.stop()
        await self.host.close()
        self.core.close()
        self.documents.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
