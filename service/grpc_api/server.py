"""The gRPC port: attnserve.v1.Inference, the KServe v2 / Open Inference Protocol's
inference.GRPCInferenceService, grpc.health.v1.Health and server reflection, with TLS and bearer tokens
when configured. Health follows the core's readiness."""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from ..core.serving import ServingCore
from ..ops.auth import read_tokens
from ..ops.config import ServerConfig
from .call_handling import register
from .open_inference import OpenInferenceServicer
from .pb import inference_pb2, inference_pb2_grpc, open_inference_pb2, open_inference_pb2_grpc
from .security import BearerTokenInterceptor, server_credentials
from .servicer import InferenceServicer

INFERENCE_SERVICE = inference_pb2.DESCRIPTOR.services_by_name["Inference"].full_name
OPEN_INFERENCE_SERVICE = open_inference_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


class GrpcServer:
    def __init__(self, config: ServerConfig, core: ServingCore):
        self.config, self.core = config, core
        self.servicer = InferenceServicer(core)
        self.open_inference = OpenInferenceServicer(core)
        self.health = health_aio.HealthServicer()
        self.server: grpc.aio.Server | None = None
        self.port = 0
        core.on_readiness_change(self._readiness_changed)

    async def start(self) -> int:
        """Listen, with health NOT_SERVING until the core is ready. -> the port."""
        options = [
            ("grpc.max_receive_message_length", self.config.max_message_bytes),
            ("grpc.max_send_message_length", self.config.max_message_bytes),
            # Shared by the API processes (--api-processes); else a port in use is an error, not a neighbour.
            ("grpc.so_reuseport", int(self.config.api_processes > 1)),
        ]
        interceptors = []
        if self.config.auth_token_file:
            interceptors.append(BearerTokenInterceptor(read_tokens(self.config.auth_token_file), self.core))
        server = grpc.aio.server(options=options, interceptors=interceptors)
        register(inference_pb2_grpc.add_InferenceServicer_to_server, self.servicer, server)
        register(open_inference_pb2_grpc.add_GRPCInferenceServiceServicer_to_server, self.open_inference, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        services = [INFERENCE_SERVICE, OPEN_INFERENCE_SERVICE, HEALTH_SERVICE, reflection.SERVICE_NAME]
        reflection.enable_server_reflection(services, server)
        await self._set_health(NOT_SERVING)
        address = f"{self.config.host}:{self.config.port}"
        credentials = server_credentials(self.config)
        self.port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
        if self.port == 0:
            raise OSError(f"cannot listen on {self.config.host}:{self.config.port}")
        await server.start()
        self.server = server
        return self.port

    def _readiness_changed(self, ready: bool) -> None:
        asyncio.get_running_loop().create_task(self._set_health(SERVING if ready else NOT_SERVING))

    async def follow_readiness(self) -> None:
        """Health as the core's readiness is now (awaited, where a caller must see it set)."""
        await self._set_health(SERVING if self.core.ready() else NOT_SERVING)

    async def _set_health(self, status) -> None:
        for service in ("", INFERENCE_SERVICE, OPEN_INFERENCE_SERVICE):
            await self.health.set(service, status)

    async def stop(self) -> None:
        """Close the port, giving answers in flight a moment to leave: not only admitted calls', but the
        refusals (UNAVAILABLE while draining) still on their way out, which a client retries on another
        replica; cut off with no grace, they would reach it as CANCELLED, which it does not retry. (The stop
        returns as soon as nothing is open.)"""
        if self.server is not None:
            await self.server.stop(grace=1.0)
