"""Transport security and caller authentication on the gRPC port: TLS or mutual TLS from PEM files, and
bearer tokens (service/ops/auth.py). Health checks stay open, so that probes and load balancers need no secret."""

from __future__ import annotations

from pathlib import Path

import grpc

from ..core.serving import ServingCore
from ..errors import Unauthenticated
from ..ops.auth import REQUIRED, bearer_allowed
from ..ops.call_record import request_id
from ..ops.config import ServerConfig
from .call_handling import GRPC_STATUSES

OPEN_SERVICES = ("/grpc.health.v1.Health/",)


def server_credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    """TLS when a certificate is configured; mutual TLS (client certificates required) with a client CA."""
    if not config.tls_cert:
        return None
    key, chain = Path(config.tls_key).read_bytes(), Path(config.tls_cert).read_bytes()
    client_ca = Path(config.tls_client_ca).read_bytes() if config.tls_client_ca else None
    return grpc.ssl_server_credentials([(key, chain)], root_certificates=client_ca, require_client_auth=bool(client_ca))


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Calls must carry 'authorization: Bearer <token>' with one of the configured tokens; one that does not
    is refused as a call of its own (recorded and logged)."""

    def __init__(self, tokens: list[bytes], core: ServingCore):
        self.tokens, self.core = tokens, core

    def _allowed(self, metadata) -> bool:
        authorization = next((value for key, value in metadata or () if key == "authorization"), None)
        return bearer_allowed(authorization, self.tokens)

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        if details.method.startswith(OPEN_SERVICES) or handler is None or self._allowed(details.invocation_metadata):
            return handler
        rpc, metadata = details.method.rsplit("/", 1)[-1], details.invocation_metadata

        async def refuse(request, context):
            refusal = self.core.refuse(rpc, request_id(metadata), GRPC_STATUSES, Unauthenticated(REQUIRED))
            await context.abort(refusal.status, refusal.message)

        async def refuse_stream(request, context):
            await refuse(request, context)
            yield  # an async generator, as a streaming handler must be

        kind = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(handler.request_streaming, handler.response_streaming)]
        return kind(
            refuse_stream if handler.response_streaming else refuse,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
