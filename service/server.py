"""The server process: the serving core, its front doors (gRPC, the OpenAI-compatible HTTP API) and the
operators' metrics port, built from one ServerConfig; their lifecycle: start, load, drain on SIGTERM, stop.

start() binds the ports with health NOT_SERVING (calls get UNAVAILABLE); load_models() loads and warms
the models and turns health SERVING; drain() turns health NOT_SERVING, turns new calls away with
UNAVAILABLE, lets calls in flight finish for drain_seconds, then stops.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
from pathlib import Path

from modeldir.storage import model_directories

from .core.attention.maps import AttentionLimits
from .core.models.opening import CacheSettings, LoadSettings
from .core.serving import CoreSettings, OpenRegistry, ServingCore
from .core.transcription.audio_decoding import AudioLimits
from .engine.batcher import BatchLimits
from .engine.call_price import MEASURED, UNMEASURED_PRICE
from .grpc_api.server import GrpcServer
from .http_api.server import HttpServer
from .ops.config import ServerConfig, input_caps
from .ops.listen import every_address, listening_host
from .ops.metrics import Metrics
from .ops.metrics_http import MetricsServer
from .runner.sessions import SessionSettings

log = logging.getLogger("attnserve.server")


def core_settings(config: ServerConfig) -> CoreSettings:
    """The core's share of the configuration."""
    measured = config.split_cost_tokens == MEASURED
    load = LoadSettings(
        sessions=SessionSettings(
            device=config.device,
            intra_op_threads=config.intra_op_threads,
            graph_optimization=config.graph_optimization,
            spinning=config.ort_spinning,
            gpu_mem_limit=config.gpu_mem_limit,
            cpu_arena=config.cpu_mem_arena,
        ),
        precision=config.precision,
        batching=BatchLimits(
            max_batch_tokens=config.max_batch_tokens,
            max_batch_size=config.max_batch_size,
            max_delay=config.max_delay_seconds,
            max_queue=config.max_queue_inputs,
            split_cost_tokens=UNMEASURED_PRICE if measured else config.split_cost_tokens,  # measured at warm-up
        ),
        measure_split_cost=measured,
        cache=CacheSettings(
            max_new_tokens=config.max_new_tokens,
            cache_bytes=config.kv_cache_bytes,
            cache_tokens=config.kv_cache_tokens,
            max_running=config.max_running_sequences,
            max_waiting=config.max_waiting_sequences,
        ),
        attention_maps=config.attention_maps,
        tag_alignment=config.tag_alignment,
        fault_threshold=config.fault_threshold,
        cuda_graphs=config.cuda_graphs,
        sampling_graph=config.sampling_graph,
        input_caps=input_caps(config.model_max_input_tokens),
        max_attention_bytes=config.max_batch_attention_bytes,
    )
    attention = AttentionLimits(
        enabled=config.attention_maps,
        max_input_tokens=config.attention_max_input_tokens,
        max_response_bytes=config.attention_max_response_bytes,
        max_concurrent=config.attention_max_concurrent,
    )
    return CoreSettings(
        model_dirs=model_directories(config.models),
        load=load,
        max_concurrent_requests=config.max_concurrent_requests,
        max_client_batch_size=config.max_client_batch_size,
        max_beams=config.max_beams,
        attention=attention,
        probe_seconds=config.probe_seconds,
        stream_write_timeout=config.stream_write_timeout,
        access_log_share=config.access_log_share,
        stream_messages=config.stream_messages_per_second,
        translation_characters=config.translation_max_characters,
        translation_texts=config.translation_max_texts,
        data_dir=Path(config.data_dir) if config.data_dir else None,
        document_max_bytes=config.document_max_bytes,
        document_max_characters=config.document_max_characters,
        unserved_confidence=config.translation_unserved_confidence,
        audio=AudioLimits(max_upload_bytes=config.max_upload_bytes, max_audio_seconds=config.max_audio_seconds),
        translation_sentences=config.translation_max_sentences,
        rerank_documents=config.rerank_max_documents,
    )


class Server:
    def __init__(self, config: ServerConfig, open_registry: OpenRegistry | None = None):
        """open_registry: an API process's models, run by the engine process (service/split/), which serves
        the metrics port; None: the models load and run here, and this process serves the metrics port."""
        config = dataclasses.replace(config, host=listening_host(config.host))  # IPv4 alone without IPv6
        self.config = config
        self.metrics = Metrics()
        self.core = ServingCore(core_settings(config), self.metrics, open_registry)
        self.serves_metrics = open_registry is None
        self.grpc = GrpcServer(config, self.core)
        self.http = HttpServer(config, self.core) if config.http_port >= 0 else None
        self.metrics_server: MetricsServer | None = None
        self.port = 0

    async def start(self) -> int:
        """Listen on the gRPC, HTTP and metrics ports. -> the gRPC port."""
        self.port = await self.grpc.start()
        if self.serves_metrics:
            c = self.config
            self.metrics_server = MetricsServer(self.metrics.registry, c.host, c.metrics_port, self.core.ready)
        if self.http:
            await self.http.start()
        host = self.config.host
        grpc_address = f"{host}:{self.port}" + (" (IPv4 and IPv6)" if every_address(host) else "")
        http = f", HTTP API on {', '.join(self.http.addresses)}" if self.http else ""
        metrics = f", metrics on {', '.join(self.metrics_server.addresses)}" if self.metrics_server else ""
        log.info(
            "listening: gRPC on %s%s%s (health NOT_SERVING until the models are warm)", grpc_address, http, metrics
        )
        return self.port

    async def load_models(self) -> None:
        await self.core.load()
        await self.grpc.follow_readiness()

    async def drain(self) -> None:
        """Turn new calls away (UNAVAILABLE, health NOT_SERVING) while those in flight finish, for up to
        drain_seconds; then those still running get UNAVAILABLE too, and the server stops."""
        self.core.start_draining()
        await self.grpc.follow_readiness()
        await self.core.wait_idle(self.config.drain_seconds)
        await self.stop()

    async def stop(self) -> None:
        """Fail what is still queued or running with UNAVAILABLE, give those answers a moment to leave,
        then close the ports."""
        await self.core.stop()
        await self.grpc.stop()
        if self.http is not None:
            await self.http.stop()
        if self.metrics_server is not None:
            self.metrics_server.close()
        self.core.close()


async def create_server(config: ServerConfig) -> tuple[Server, int]:
    """A started server (models not loaded yet) and the port it listens on."""
    server = Server(config)
    port = await server.start()
    return server, port


async def serve(config: ServerConfig) -> int:
    """Run until SIGTERM or SIGINT, then drain. -> exit status: 0 after a drain, 1 if the models failed to load.
    (One process of everything: config.front_processes 1. Several: service/split/engine_process.py.)"""
    server, _ = await create_server(config)
    return await run_until_stopped(server)


async def run_until_stopped(server: Server, stop: asyncio.Event | None = None, load: bool = True) -> int:
    """Load the server's models (unless loaded: load False) and serve until SIGTERM or SIGINT (or `stop` is
    set), then drain. -> exit status: 0 after a drain, 1 if the models failed to load."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loading = asyncio.create_task(server.load_models() if load else server.grpc.follow_readiness())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({loading, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if loading.done() and loading.exception() is not None:
        log.error("cannot serve: %s", loading.exception())
        stopping.cancel()
        await server.stop()
        return 1
    if not loading.done():  # asked to stop while loading
        loading.cancel()
    await stopping
    await server.drain()
    log.info("stopped")
    return 0
