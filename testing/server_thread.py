"""An attnserve server in a background thread with its own event loop: for tests, benchmarks and
programs that embed a server, which call it over real channels and may look at its state. With
api_processes over 1 (the setting, or ATTNSERVE_API_PROCESSES as `attnserve serve` reads it) its doors
reach the models over the engine link, as a split server's API processes do (testing/linked_server.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from pathlib import Path

import grpc
from prometheus_client import CollectorRegistry

from service.core.serving import ServingCore
from service.grpc_api.pb import inference_pb2_grpc as pb_grpc
from service.ops.config import ServerConfig
from service.server import Server, create_server

from .linked_server import LinkedEngine


class ServerThread:
    def __init__(self, models: list[Path], load: bool = True, **settings):
        # The default host, as users start servers: every address, so that tests reach it as they would.
        settings = {"port": 0, "metrics_port": 0, "http_port": 0, "api_processes": _api_processes(), **settings}
        self.config = ServerConfig(models=tuple(models), **settings)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-server", daemon=True)
        self.thread.start()
        self.server: Server
        self.linked = LinkedEngine(self.config) if self.config.front_processes > 1 else None
        self.server, self.port = self.run(self.linked.api_server() if self.linked else create_server(self.config))
        self.target = f"127.0.0.1:{self.port}"
        self._channels: list[grpc.Channel] = []
        if load:
            self.load()

    def run(self, coroutine, timeout: float = 120):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call_and_wait(self, fn, *args):
        """Run fn on the server's event loop (where its state lives), wait, and return its result."""

        async def call():
            return fn(*args)

        return self.run(call())

    @property
    def engine_core(self) -> ServingCore:
        """The core that runs the models: the server's own, or, split, the engine side's."""
        return self.linked.core if self.linked else self.server.core

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """What the metrics port serves: the server's metrics, or, split, both sides' summed."""
        return self.linked.registry if self.linked else self.server.metrics.registry

    def load(self) -> None:
        self.run(self.linked.load(self.server) if self.linked else self.server.load_models())

    def stub(self) -> pb_grpc.InferenceStub:
        channel = grpc.insecure_channel(self.target)
        self._channels.append(channel)
        return pb_grpc.InferenceStub(channel)

    def channel(self) -> grpc.Channel:
        channel = grpc.insecure_channel(self.target)
        self._channels.append(channel)
        return channel

    def hold_model_thread(self) -> threading.Event:
        """Block the model thread until the returned event is set: queued work stays queued meanwhile."""
        release, holding = threading.Event(), threading.Event()

        def hold():
            holding.set()
            release.wait(60)

        self.engine_core.model_executor.submit(hold)
        holding.wait(5)
        return release

    def with_settings(self, **settings) -> ServerConfig:
        return dataclasses.replace(self.config, **settings)

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
        try:
            self.run(self.server.stop(), timeout=30)
            if self.linked:
                self.run(self.linked.stop(), timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)


def _api_processes() -> int:
    """1, unless ATTNSERVE_API_PROCESSES says otherwise: `ATTNSERVE_API_PROCESSES=2 make test` runs every
    server the tests start split (those in a thread, linked)."""
    return int(os.environ.get("ATTNSERVE_API_PROCESSES", "1"))
