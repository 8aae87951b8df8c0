"""A Python client for attnserve: numpy arrays in and out, gRPC underneath."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from .pb import inference_pb2 as pb
from .pb import inference_pb2_grpc as pb_grpc

TASK_NAMES = {pb.TASK_EMBEDDING: "embedding", pb.TASK_SEQ2SEQ: "seq2seq", pb.TASK_CLASSIFICATION: "classification"}
FINISH_REASON_NAMES = {
    pb.FINISH_REASON_LENGTH: "length",
    pb.FINISH_REASON_EOS: "eos",
    pb.FINISH_REASON_STOP: "stop",
    pb.FINISH_REASON_CANCELLED: "cancelled",
}
PIECE_BYTES = 1 << 20  # of a recording sent to TranscribeStream, a message each
ATTENTION_KIND_NAMES = {
    pb.ATTENTION_KIND_ENCODER_SELF: "encoder_self",
    pb.ATTENTION_KIND_DECODER_SELF: "decoder_self",
    pb.ATTENTION_KIND_CROSS: "cross",
}


@dataclass(frozen=True)
class EmbeddingsReply:
    model: str
    vectors: np.ndarray  # (n, d) float32, in the order of the inputs
    usage: pb.EmbedUsage


@dataclass(frozen=True)
class AttentionMapsReply:
    """One input's attention weights. weights[kind]: (layers, heads, queries, keys) float32, kind one of
    encoder_self (queries and keys: source tokens), decoder_self (target x target), cross (target x source);
    layers[kind]: the model layer of each index of the first axis."""

    model: str
    source_tokens: list[str]
    source_special: list[bool]
    target_tokens: list[str]  # seq2seq: the decoder's tokens, the start token first
    target_special: list[bool]
    predicted_tokens: list[str]  # seq2seq: the model's argmax at each decoder position
    target_text: str
    weights: dict[str, np.ndarray]
    layers: dict[str, list[int]]

    @staticmethod
    def from_response(response: pb.AttentionResponse) -> AttentionMapsReply:
        weights, layers = {}, {}
        for a in response.attentions:
            kind = ATTENTION_KIND_NAMES[a.kind]
            weights[kind] = np.frombuffer(a.data, dtype="<f4").reshape(tuple(a.shape))
            layers[kind] = list(a.layers)
        return AttentionMapsReply(
            response.model,
            list(response.source_tokens),
            list(response.source_special),
            list(response.target_tokens),
            list(response.target_special),
            list(response.predicted_tokens),
            response.target_text,
            weights,
            layers,
        )


class Client:
    def __init__(
        self,
        target: str = "localhost:50051",
        timeout: float | None = 60.0,
        options=(),
        *,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        token: str | None = None,
    ):
        """tls_ca: PEM CA to trust the server with (TLS); tls_cert and tls_key: this client's certificate
        (mutual TLS); token: sent as 'authorization: Bearer <token>' with every call."""
        if tls_ca or tls_cert:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca), private_key=_read(tls_key), certificate_chain=_read(tls_cert)
            )
            if token:
                credentials = grpc.composite_channel_credentials(credentials, grpc.access_token_call_credentials(token))
            self.channel = grpc.secure_channel(target, credentials, options=list(options))
        else:
            # Call credentials need a secure channel; without TLS the token goes as plain metadata.
            interceptors = [_BearerToken(token)] if token else []
            self.channel = grpc.intercept_channel(grpc.insecure_channel(target, options=list(options)), *interceptors)
        self.stub = pb_grpc.InferenceStub(self.channel)
        self.health_stub = health_pb2_grpc.HealthStub(self.channel)
        self.timeout = timeout

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def embed(
        self, texts: list[str], model: str = "", normalize: bool | None = None, truncate: bool | None = None
    ) -> EmbeddingsReply:
        request = pb.EmbedRequest(
            model=model, inputs=texts, normalize=normalize, truncate=truncate, outputs=[pb.EMBEDDING_OUTPUT_DENSE]
        )
        response = self.stub.Embed(request, timeout=self.timeout)
        vectors = np.array([e.values for e in response.embeddings], dtype=np.float32)
        return EmbeddingsReply(response.model, vectors, response.usage)

    @staticmethod
    def _generate_request(text: str, model: str, source_language: str, target_language: str, params: dict):
        return pb.GenerateRequest(
            model=model,
            input=text,
            source_language=source_language,
            target_language=target_language,
            params=pb.GenerationParams(**params),
        )

    def generate(
        self, text: str, model: str = "", source_language: str = "", target_language: str = "", **params
    ) -> pb.GenerateResponse:
        """params: the fields of GenerationParams (max_new_tokens, temperature, top_k, top_p, ...); the
        languages: a multilingual model's."""
        request = self._generate_request(text, model, source_language, target_language, params)
        return self.stub.Generate(request, timeout=self.timeout)

    def generate_stream(
        self, text: str, model: str = "", source_language: str = "", target_language: str = "", **params
    ) -> Iterator[pb.GenerateStreamResponse]:
        request = self._generate_request(text, model, source_language, target_language, params)
        return self.stub.GenerateStream(request, timeout=self.timeout)

    def attention(
        self, text: str, model: str = "", target: str | None = None, max_new_tokens: int = 0, layers=()
    ) -> AttentionMapsReply:
        """target: seq2seq only, the decoder's text instead of a greedy generation; layers: a subset."""
        request = pb.AttentionRequest(
            model=model, input=text, target=target, max_new_tokens=max_new_tokens, layers=list(layers)
        )
        return AttentionMapsReply.from_response(self.stub.Attention(request, timeout=self.timeout))

    def rerank(self, query: str, documents: list[str], model: str = "", **fields) -> pb.RerankResponse:
        """fields: RerankRequest's others (top_n, return_documents, raw_scores, truncation)."""
        request = pb.RerankRequest(model=model, query=query, documents=documents, **fields)
        return self.stub.Rerank(request, timeout=self.timeout)

    def classify(self, texts: list[str], model: str = "", raw_scores: bool = False) -> pb.ClassifyResponse:
        request = pb.ClassifyRequest(model=model, inputs=texts, raw_scores=raw_scores)
        return self.stub.Classify(request, timeout=self.timeout)

    def transcribe(self, audio: bytes, model: str = "", **options) -> pb.TranscribeResponse:
        """A recording in one message (up to the server's max_message_bytes). options: TranscribeRequest's."""
        return self.stub.Transcribe(pb.TranscribeRequest(model=model, audio=audio, **options), timeout=self.timeout)

    def transcribe_stream(self, audio: bytes, model: str = "", **options) -> Iterator[pb.TranscribeStreamResponse]:
        """A recording sent in pieces of PIECE_BYTES (any size passes max_message_bytes) -> a message as each
        window's segments are final, then the whole text. options: TranscribeRequest's other fields."""
        first = pb.TranscribeRequest(model=model, **options)

        def pieces():
            yield pb.TranscribeStreamRequest(options=first)
            for start in range(0, len(audio), PIECE_BYTES):
                yield pb.TranscribeStreamRequest(audio=audio[start : start + PIECE_BYTES])

        return self.stub.TranscribeStream(pieces(), timeout=self.timeout)

    def tokenize(self, texts: list[str], model: str = "") -> pb.TokenizeResponse:
        return self.stub.Tokenize(pb.TokenizeRequest(model=model, inputs=texts), timeout=self.timeout)

    def list_models(self) -> list[pb.ModelInfo]:
        return list(self.stub.ListModels(pb.ListModelsRequest(), timeout=self.timeout).models)

    def health(self, service: str = "") -> str:
        """SERVING, NOT_SERVING, ... for the whole server ("") or one service."""
        response = self.health_stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=self.timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


class _BearerToken(
    grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor, grpc.StreamStreamClientInterceptor
):
    def __init__(self, token: str):
        self.header = ("authorization", f"Bearer {token}")

    def _with_token(self, details):
        metadata = list(details.metadata or []) + [self.header]
        return details._replace(metadata=metadata) if hasattr(details, "_replace") else _Details(details, metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._with_token(details), requests)


class _Details(grpc.ClientCallDetails):
    def __init__(self, details, metadata):
        self.method, self.timeout, self.credentials = details.method, details.timeout, details.credentials
        self.wait_for_ready, self.compression = details.wait_for_ready, details.compression
        self.metadata = metadata
