"""The engine process of a split server (--api-processes N): it holds the ports for the API processes and
starts them (api_processes.py), loads and runs the models and serves them over the link (engine_host.py),
serves the metrics port (its metrics and theirs, summed), and on SIGTERM drains them before it stops. The
API processes share one data directory (glossaries, document jobs): --data-dir, or a temporary one."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import signal
import tempfile
from pathlib import Path

from ..core.serving import ServingCore
from ..core.translation.document_store import DocumentStore
from ..core.translation.glossaries import GlossaryStore
from ..ops.config import ServerConfig
from ..ops.listen import listening_host, listening_sockets
from ..ops.logs import configure as configure_logs
from ..ops.metrics import Metrics
from ..ops.metrics_http import MetricsServer
from ..ops.metrics_processes import ApiProcessUsage, summed_registry
from ..server import core_settings
from .api_processes import ApiProcesses
from .engine_host import EngineHost

log = logging.getLogger("attnserve.engine")


def hold_ports(config: ServerConfig) -> tuple[ServerConfig, list]:
    """The config with the gRPC and HTTP ports the API processes share (port 0 picked here, once for all),
    and the sockets that hold them meanwhile (bound, not listening: they take no connection)."""
    held = listening_sockets(config.host, config.port, shared=True, listen=False)
    ports = dict(port=held[0].getsockname()[1], api_processes=config.front_processes)
    if config.http_port >= 0:
        http = listening_sockets(config.host, config.http_port, shared=True, listen=False)
        held += http
        ports["http_port"] = http[0].getsockname()[1]
    return dataclasses.replace(config, **ports), held


def shared_data(config: ServerConfig, workdir: str) -> tuple[Path, DocumentStore]:
    """The data directory the API processes share (--data-dir, or one in `workdir`, gone at exit), its
    stores made (a bad --data-dir stops the start here) and the jobs a stop cut off queued again; and its
    document store, by which the jobs of an API process that dies are queued again."""
    data_dir = Path(config.data_dir) if config.data_dir else Path(workdir) / "data"
    GlossaryStore(data_dir).close()
    documents = DocumentStore(data_dir)
    documents.requeue_interrupted()
    return data_dir, documents


def engine_core(config: ServerConfig, metrics: Metrics) -> ServingCore:
    """The engine process's core: the models and their loops; the glossaries and document jobs are the API
    processes' (shared_data)."""
    return ServingCore(core_settings(dataclasses.replace(config, data_dir="")), metrics)


def door_addresses(doors: ServerConfig) -> str:
    """The ports the API processes share, as the single process's start line names them."""
    dual = " (IPv4 and IPv6)" if doors.host == "[::]" else ""
    http = f", HTTP API on {doors.host}:{doors.http_port}{dual}" if doors.http_port >= 0 else ""
    return f"gRPC on {doors.host}:{doors.port}{dual}{http}"


async def serve_split(config: ServerConfig) -> int:
    """Run until SIGTERM or SIGINT, then drain. -> exit status: 0 after a drain; 1 if the models failed to
    load, or the API processes kept failing."""
    configure_logs(config.log_level, config.log_format, "engine")
    config = dataclasses.replace(config, host=listening_host(config.host))
    workdir = tempfile.mkdtemp(prefix="attnserve-")
    metrics_dir = os.path.join(workdir, "metrics")
    os.mkdir(metrics_dir)
    doors, held = hold_ports(config)
    data_dir, documents = shared_data(config, workdir)
    doors = dataclasses.replace(doors, data_dir=str(data_dir))
    metrics = Metrics()
    core = engine_core(config, metrics)
    host = EngineHost(core, os.path.join(workdir, "engine.sock"))
    await host.start()
    core.on_readiness_change(lambda ready: host.health_changed())
    registry = summed_registry(metrics.registry, metrics_dir)

    def ready() -> bool:  # the models, and every API process serving them
        return core.ready() and host.doors_serving() == doors.api_processes

    metrics_server = MetricsServer(registry, config.host, config.metrics_port, ready)
    stop = asyncio.Event()
    fleet = ApiProcesses(doors, host, metrics_dir, stop, documents)
    registry.register(ApiProcessUsage(fleet.running))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await fleet.start()
        log.info(
            "listening: %s, metrics on %s (%d API processes; /readyz answers 503 until each serves the warm models)",
            door_addresses(doors),
            ", ".join(metrics_server.addresses),
            doors.api_processes,
        )
        status = await _serve_until_stopped(core, host, stop)
        if status == 0:
            core.start_draining()  # /readyz answers 503 from now on
        await fleet.drain(config.drain_seconds)
        log.info("stopped")
        return status or fleet.status
    finally:
        await core.stop()
        await host.close()
        metrics_server.close()
        core.close()
        documents.close()
        for sock in held:
            sock.close()
        shutil.rmtree(workdir, ignore_errors=True)


async def _serve_until_stopped(core: ServingCore, host: EngineHost, stop: asyncio.Event) -> int:
    """Load the models, serve them until stopped. -> 1 if they failed to load, else 0."""
    loading = asyncio.create_task(core.load())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({loading, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if loading.done() and loading.exception() is not None:
        log.error("cannot serve: %s", loading.exception())
        stopping.cancel()
        return 1
    if not loading.done():  # asked to stop while loading
        loading.cancel()
    else:
        host.models_loaded()
    await stopping
    return 0
