"""An API process of a split server (--api-processes N): the front doors on their shared ports, tokenizing
and detokenizing, with a core whose models the engine process runs, reached over the link. The engine
process starts it (engine_process.py), its settings on stdin; it stops on SIGTERM, or when the engine goes."""

from __future__ import annotations

import asyncio
import logging
import pickle
import sys

from ..core.models.registry import ModelRegistry
from ..errors import ServiceError
from ..ops.config import ServerConfig
from ..ops.logs import configure as configure_logs
from ..ops.metrics import Metrics
from ..server import Server, run_until_stopped
from .engine_link import EngineLink
from .remote_models import RemoteRegistry, remote_model

log = logging.getLogger("attnserve.api")


class EngineModels:
    """The engine's models, asked for when the core loads; their health follows the engine's pushes."""

    def __init__(self, link_path: str) -> None:
        self.link = EngineLink(link_path, self._health_pushed)
        self.registry: RemoteRegistry | None = None

    def _health_pushed(self, name: str, healthy: bool, failures: int) -> None:
        if self.registry is not None:
            self.registry.health_pushed(name, healthy, failures)

    async def open(self, metrics: Metrics, on_health_change) -> ModelRegistry:
        served = await self.link.call("models")
        models = [remote_model(picture, self.link, metrics, on_health_change) for picture, _ in served]
        self.registry = RemoteRegistry(models, self.link)
        for picture, (healthy, failures) in served:
            self.registry.health_pushed(picture.name, healthy, failures)
        return self.registry


async def serve_api(config: ServerConfig, link_path: str) -> int:
    models = EngineModels(link_path)
    await models.link.connect()  # the engine listens before it starts any API process
    server = Server(config, models.open)
    # At the server's start the ports open at once, refusing calls (UNAVAILABLE, health NOT_SERVING) until
    # the engine's models are warm, as a single process's do: a client's connection is made and waits, where
    # a refused one would back off for seconds. A process started in place of one that died takes the
    # models first, then the ports: the others serve meanwhile, and it refuses nothing.
    replacing = await models.link.call("is_loaded")
    if replacing:
        try:
            await server.load_models()
        except ServiceError as error:  # the engine stopped (its log says why)
            log.error("cannot serve: %s", error.message)
            return 1
    await server.start()
    server.core.on_readiness_change(models.link.tell_readiness)  # the engine's /readyz counts those that serve
    models.link.tell_readiness(server.core.ready())
    stop = asyncio.Event()

    async def stop_when_engine_goes() -> None:
        await models.link.closed.wait()
        stop.set()

    watching = asyncio.create_task(stop_when_engine_goes())
    status = await run_until_stopped(server, stop, load=not replacing)
    watching.cancel()
    await models.link.close()
    return status


def main() -> None:
    config, link_path, number = pickle.load(sys.stdin.buffer)
    configure_logs(config.log_level, config.log_format, f"api-{number}")
    sys.exit(asyncio.run(serve_api(config, link_path)))


if __name__ == "__main__":
    main()
