"""The HTTP port: the OpenAI-compatible API (openai_api.py), /v1/rerank (rerank_api.py), DeepL's
(deepl_api.py), LibreTranslate's (libretranslate_api.py), TEI's (tei_api.py) and Cohere's (cohere_api.py),
served by uvicorn on the same event loop as the gRPC port, with TLS, bearer tokens and a request size limit
as configured. DeepL's, Cohere's and KServe's routes share /v2, each path its own API's."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct

import uvicorn
from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from ..core.serving import ServingCore
from ..errors import Unauthenticated
from ..ops.auth import REQUIRED, bearer_allowed, read_tokens
from ..ops.config import ServerConfig
from ..ops.listen import address_text, listening_sockets
from . import (
    audio_api,
    cohere_api,
    deepl_api,
    deepl_documents_api,
    kserve_api,
    libretranslate_api,
    libretranslate_files_api,
    tei_api,
)
from .audio_api import add_audio_routes
from .call_handling import OPENAI, BodyTooLarge, HttpApi, refuse
from .cohere_api import add_cohere_routes
from .deepl_api import add_deepl_routes
from .deepl_documents_api import add_document_routes
from .deepl_glossaries_api import add_glossary_routes
from .deepl_glossaries_v3_api import add_multilingual_glossary_routes
from .documented_types import FILLS
from .kserve_api import add_kserve_routes
from .libretranslate_api import add_libretranslate_routes
from .libretranslate_files_api import add_libretranslate_file_routes
from .openai_api import create_app
from .openapi_document import serve_document
from .rerank_api import add_rerank_routes
from .tei_api import add_tei_routes

OPEN_PATHS = ("/health", *kserve_api.OPEN_PATHS)  # probes and load balancers need no secret
# An idle connection is kept this long: longer than a load balancer's idle timeout (60 s is common), so that
# the balancer closes first, and than a client's pause between calls (DeepL's SDK asks a document's status
# every 5 s: at uvicorn's default, 5 s, the server closed the connection as the client sent on it).
KEEP_ALIVE_SECONDS = 75
DOCUMENT_UPLOADS = (deepl_documents_api.PREFIX, libretranslate_files_api.FILE_PATH)  # their limit: document_max_bytes
# Each path's API, for the refusals sent before a route runs: OpenAI's where none other claims it.
APIS = {
    **{path: deepl_api.DEEPL for path in deepl_api.PATHS},
    **{path: libretranslate_api.LIBRETRANSLATE for path in libretranslate_api.PATHS},
    **{path: tei_api.TEI for path in tei_api.PATHS},
    **{path: cohere_api.COHERE for path in cohere_api.PATHS},
}


def api_of(path: str) -> HttpApi:
    if path.startswith(deepl_api.OWN_PATHS):
        return deepl_api.DEEPL
    if path.startswith(libretranslate_api.DOWNLOAD_PREFIX):
        return libretranslate_api.LIBRETRANSLATE
    return kserve_api.KSERVE if kserve_api.is_kserve(path) else APIS.get(path, OPENAI)


class Guard:
    """Bearer tokens (when configured) and the size of request bodies, before a request reaches the API. A
    request turned away here is a call of its own (recorded and logged), named by its route."""

    def __init__(
        self, app: FastAPI, tokens: list[bytes] | None, max_body_bytes: int, core: ServingCore, max_upload_bytes: int
    ):
        self.app, self.tokens, self.max_body_bytes, self.core = app, tokens, max_body_bytes, core
        self.max_upload_bytes = max_upload_bytes
        self.routes = {route.path for route in app.routes}  # other paths are named alike: no unbounded labels

    def body_limit(self, path: str) -> tuple[int, str]:
        """The most bytes a body may have, and the setting that says so: an audio upload's is its own, with
        room for the form's other fields."""
        if path in audio_api.PATHS:
            return self.max_upload_bytes + audio_api.FORM_ROOM, "max_upload_bytes"
        if path in DOCUMENT_UPLOADS:
            return deepl_documents_api.upload_room(self.core), "document_max_bytes"
        return self.max_body_bytes, "max_message_bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        api = api_of(scope["path"])  # KServe's paths name a model: its API names their calls boundedly
        path = scope["path"] if scope["path"] in self.routes or api.route_name else "/unknown"
        if (
            self.tokens
            and path not in OPEN_PATHS
            and not api.key_in_body  # its route checks the body's key too
            and not bearer_allowed(headers.get("authorization"), self.tokens, api.auth_schemes)
        ):
            return await refuse(self.core, headers, path, Unauthenticated(REQUIRED), api)(scope, receive, send)
        length, (limit, setting) = headers.get("content-length", ""), self.body_limit(path)
        if length.isdigit() and int(length) > limit:
            error = BodyTooLarge(int(length), limit, setting).error()
            return await refuse(self.core, headers, path, error, api)(scope, receive, send)
        received = 0

        async def counted() -> dict:  # a body sent without a length (chunked) is counted as it comes
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise BodyTooLarge(received, limit, setting)
            return message

        await self.app(scope, counted, send)  # the API answers BodyTooLarge with 413


def ssl_settings(config: ServerConfig) -> dict:
    if not config.tls_cert:
        return {}
    settings = {"ssl_certfile": config.tls_cert, "ssl_keyfile": config.tls_key}
    if config.tls_client_ca:
        settings.update(ssl_ca_certs=config.tls_client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED)
    return settings


class HttpServer:
    def __init__(self, config: ServerConfig, core: ServingCore):
        self.config, self.core = config, core
        self.server: uvicorn.Server | None = None
        self._ticks: asyncio.Task | None = None
        self.port = 0
        self.addresses: list[str] = []

    async def start(self) -> int:
        """Listen (the API answers 503 until the core is ready). -> the port."""
        c = self.config
        tokens = read_tokens(c.auth_token_file) if c.auth_token_file else None
        api = create_app(self.core, self.abort_connection, api_of)
        add_deepl_routes(api, self.core)
        add_glossary_routes(api, self.core)
        add_multilingual_glossary_routes(api, self.core)
        add_document_routes(api, self.core)
        add_libretranslate_routes(api, self.core, tokens)
        add_libretranslate_file_routes(api, self.core, tokens)
        add_rerank_routes(api, self.core)
        add_tei_routes(api, self.core)
        add_cohere_routes(api, self.core)
        add_kserve_routes(api, self.core)
        add_audio_routes(api, self.core, self.abort_connection)
        fills = {**FILLS, **deepl_api.FILLS, **libretranslate_api.FILLS, **cohere_api.FILLS}
        serve_document(api, self.core, fills)
        app = Guard(api, tokens, c.max_message_bytes, self.core, c.max_upload_bytes)
        settings = uvicorn.Config(
            app,
            lifespan="off",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=1,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            **ssl_settings(c),
        )
        settings.load()
        server = uvicorn.Server(settings)
        server.lifespan = settings.lifespan_class(settings)
        # Server.serve() would take over SIGTERM and SIGINT: the process' own drain handles them, so start and
        # stop are called directly; main_loop keeps the Date header fresh and watches should_exit.
        # uvicorn's own would be IPv6-only on "::"; shared by the API processes (--api-processes).
        sockets = listening_sockets(c.host, c.http_port, shared=c.api_processes > 1)
        await server.startup(sockets=sockets)
        self.server = server
        self._ticks = asyncio.get_running_loop().create_task(server.main_loop(), name="http")
        self.addresses = [address_text(sock) for sock in sockets]
        self.port = sockets[0].getsockname()[1]
        return self.port

    def abort_connection(self, scope) -> None:
        """Reset the connection whose current request has this scope, at once: its descriptor and the bytes
        the kernel holds for it are freed, as a client that stopped reading would take neither. (uvicorn keeps
        each connection's protocol, and the request's scope is the one it handed the app.)"""
        for connection in list(self.server.server_state.connections if self.server else ()):
            if getattr(connection, "scope", None) is scope:
                sock = connection.transport.get_extra_info("socket")
                if sock is not None:  # linger 0: the close resets, instead of sending what is queued first
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                connection.transport.abort()

    async def stop(self) -> None:
        """Close the port; answers in flight get a second to leave."""
        if self.server is None:
            return
        self.server.should_exit = True
        await self._ticks
        await self.server.shutdown()
