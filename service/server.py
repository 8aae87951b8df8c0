"""The gRPC server: Inference, grpc.health.v1.Health and reflection on one port; loading; draining.

Lifecycle: start() binds the port with health NOT_SERVING (calls get UNAVAILABLE), load_models() loads
and warms the models in a thread and turns health SERVING; drain() turns health NOT_SERVING, turns new
calls away with UNAVAILABLE, lets calls in flight finish for drain_seconds, then stops.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from .batcher import BatchLimits
from .config import ServerConfig
from .errors import unavailable
from .metrics import Metrics, MetricsServer
from .models import GenerationLimits, ModelRegistry, load_model, probe
from .pb import inference_pb2
from .runner import SessionSettings
from .security import BearerTokenInterceptor, read_tokens, server_credentials
from .servicer import InferenceServicer, register

log = logging.getLogger("attnserve.server")

INFERENCE_SERVICE = inference_pb2.DESCRIPTOR.services_by_name["Inference"].full_name
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


class Server:
    def __init__(self, config: ServerConfig):
        self.config = config
        # One thread runs every model call: on a CPU, concurrent calls would only fight over the cores.
        self.model_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        self.tokenize_executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tokenize")
        self.metrics = Metrics()
        self.metrics_server: MetricsServer | None = None
        self.servicer = InferenceServicer(config, self.tokenize_executor, self.metrics)
        self.health = health_aio.HealthServicer()
        self.registry: ModelRegistry | None = None
        self._monitor: asyncio.Task | None = None
        self.grpc_server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self) -> int:
        options = [
            ("grpc.max_receive_message_length", self.config.max_message_bytes),
            ("grpc.max_send_message_length", self.config.max_message_bytes),
            ("grpc.so_reuseport", 0),
        ]
        interceptors = []
        if self.config.auth_token_file:
            interceptors.append(BearerTokenInterceptor(read_tokens(self.config.auth_token_file), self.metrics))
        server = grpc.aio.server(options=options, interceptors=interceptors)
        register(self.servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            [INFERENCE_SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
            server,
        )
        await self._set_health(NOT_SERVING)
        address = f"{self.config.host}:{self.config.port}"
        credentials = server_credentials(self.config)
        self.port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
        if self.port == 0:
            raise OSError(f"cannot listen on {self.config.host}:{self.config.port}")
        await server.start()
        self.grpc_server = server
        self.metrics_server = MetricsServer(self.metrics, self.config.host, self.config.metrics_port, self.ready)
        log.info(
            "listening on port %d, metrics on %d (health NOT_SERVING until the models are warm)",
            self.port, self.metrics_server.port,
        )  # fmt: skip
        return self.port

    def ready(self) -> bool:
        """Models loaded and healthy, and not draining: what health and /readyz report."""
        return self.registry is not None and not self.servicer.draining and self.registry.healthy

    async def load_models(self) -> None:
        settings = SessionSettings(
            device=self.config.device,
            intra_op_threads=self.config.intra_op_threads,
            graph_optimization=self.config.graph_optimization,
            spinning=self.config.ort_spinning,
        )
        loop = asyncio.get_running_loop()
        models = [
            await loop.run_in_executor(self.model_executor, load_model, model_dir, settings, self.config.attention_maps)
            for model_dir in self.config.models
        ]
        registry = ModelRegistry(models)
        limits = BatchLimits(
            max_batch_tokens=self.config.max_batch_tokens,
            max_batch_size=self.config.max_batch_size,
            max_delay=self.config.max_delay_seconds,
            max_queue=self.config.max_queue_inputs,
            split_cost_tokens=self.config.split_cost_tokens,
        )
        longest = max(m.max_input_tokens for m in models)
        if longest > self.config.max_batch_tokens:
            raise ValueError(
                f"max_batch_tokens {self.config.max_batch_tokens} is less than the longest input a model "
                f"takes ({longest} tokens): such an input could never run"
            )
        generation = GenerationLimits(
            max_new_tokens=self.config.max_new_tokens,
            cache_bytes=self.config.kv_cache_bytes,
            cache_tokens=self.config.kv_cache_tokens,
            max_running=self.config.max_running_sequences,
            max_waiting=self.config.max_waiting_sequences,
        )
        for model in models:
            if model.task == "seq2seq" and generation.rows(model.config) < 1:
                g = generation.geometry(model.config)
                raise ValueError(
                    f"model {model.name}: the generation cache holds no row: one takes {g.bytes_per_row} bytes "
                    f"({g.tokens_per_row} tokens); raise kv_cache_bytes or kv_cache_tokens, or lower max_new_tokens"
                )
        registry.start(
            limits, generation, self.model_executor, self.metrics, self.config.fault_threshold, self._health_changed
        )
        self.registry = registry
        self.servicer.registry = registry
        await self._set_health(SERVING)
        self._monitor = asyncio.get_running_loop().create_task(self._probe_unhealthy_models(), name="probes")
        log.info("serving %s", ", ".join(f"{m.name} ({m.task}, {m.provider})" for m in models))

    def _health_changed(self) -> None:
        """A model turned unhealthy or healthy again (called on the event loop)."""
        status = SERVING if self.ready() else NOT_SERVING
        for model in self.registry.models.values():
            if model.health and not model.health.healthy:
                log.error(
                    "model %s: %d model calls failed in a row: health NOT_SERVING", model.name, model.health.failures
                )
        asyncio.get_running_loop().create_task(self._set_health(status))

    async def _probe_unhealthy_models(self) -> None:
        """Every probe_seconds, a small call through each unhealthy model; one that passes restores it."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.probe_seconds)
            for model in self.registry.models.values():
                if model.health.healthy:
                    continue
                try:
                    await loop.run_in_executor(self.model_executor, probe, model)
                except Exception as error:
                    log.warning("model %s: probe failed: %s", model.name, error)
                else:
                    log.info("model %s: probe passed: healthy again", model.name)
                    model.health.succeeded()

    async def _set_health(self, status) -> None:
        for service in ("", INFERENCE_SERVICE):
            await self.health.set(service, status)

    async def drain(self) -> None:
        """Turn new calls away (UNAVAILABLE, health NOT_SERVING) while those in flight finish, for up to
        drain_seconds; then those still running get UNAVAILABLE too, and the server stops."""
        log.info("draining: %d calls in flight, up to %.0f s", self.servicer.in_flight, self.config.drain_seconds)
        self.servicer.draining = True
        await self._set_health(NOT_SERVING)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.drain_seconds
        while self.servicer.in_flight and loop.time() < deadline:
            await asyncio.sleep(0.02)
        await self.stop()

    async def stop(self) -> None:
        """Fail what is still queued or running with UNAVAILABLE, give those answers a moment to leave,
        then close the port."""
        if self._monitor is not None:
            self._monitor.cancel()
        if self.registry is not None:
            await self.registry.stop(unavailable("the server shut down before this call finished; retry"))
        if self.grpc_server is not None:
            await self.grpc_server.stop(grace=1.0 if self.servicer.in_flight else 0)
        if self.metrics_server is not None:
            self.metrics_server.close()
        self.model_executor.shutdown(wait=False, cancel_futures=True)
        self.tokenize_executor.shutdown(wait=False, cancel_futures=True)


async def create_server(config: ServerConfig) -> tuple[Server, int]:
    """A started server (models not loaded yet) and the port it listens on."""
    server = Server(config)
    port = await server.start()
    return server, port


async def serve(config: ServerConfig) -> int:
    """Run until SIGTERM or SIGINT, then drain. -> exit status: 0 after a drain, 1 if the models failed to load."""
    import signal

    server, _ = await create_server(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loading = asyncio.create_task(server.load_models())
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
