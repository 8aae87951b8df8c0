"""A Python client for attnserve: numpy arrays in and out, gRPC underneath."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from .pb import inference_pb2 as pb
from .pb import inference_pb2_grpc as pb_grpc

TASK_NAMES = {pb.TASK_EMBEDDING: "embedding", pb.TASK_SEQ2SEQ: "seq2seq"}
FINISH_REASON_NAMES = {
    pb.FINISH_REASON_LENGTH: "length", pb.FINISH_REASON_EOS: "eos", pb.FINISH_REASON_STOP: "stop",
    pb.FINISH_REASON_CANCELLED: "cancelled",
}  # fmt: skip


@dataclass(frozen=True)
class Embeddings:
    model: str
    vectors: np.ndarray  # (n, d) float32, in the order of the inputs
    usage: pb.EmbedUsage


class Client:
    def __init__(self, target: str = "localhost:50051", timeout: float | None = 60.0, options=()):
        self.channel = grpc.insecure_channel(target, options=list(options))
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
    ) -> Embeddings:
        request = pb.EmbedRequest(model=model, inputs=texts, normalize=normalize, truncate=truncate)
        response = self.stub.Embed(request, timeout=self.timeout)
        vectors = np.array([e.values for e in response.embeddings], dtype=np.float32)
        return Embeddings(response.model, vectors, response.usage)

    def generate(self, text: str, model: str = "", **params) -> pb.GenerateResponse:
        """params: the fields of GenerationParams (max_new_tokens, temperature, top_k, top_p, ...)."""
        request = pb.GenerateRequest(model=model, input=text, params=pb.GenerationParams(**params))
        return self.stub.Generate(request, timeout=self.timeout)

    def generate_stream(self, text: str, model: str = "", **params) -> Iterator[pb.GenerateStreamResponse]:
        request = pb.GenerateRequest(model=model, input=text, params=pb.GenerationParams(**params))
        return self.stub.GenerateStream(request, timeout=self.timeout)

    def tokenize(self, texts: list[str], model: str = "") -> pb.TokenizeResponse:
        return self.stub.Tokenize(pb.TokenizeRequest(model=model, inputs=texts), timeout=self.timeout)

    def list_models(self) -> list[pb.ModelInfo]:
        return list(self.stub.ListModels(pb.ListModelsRequest(), timeout=self.timeout).models)

    def health(self, service: str = "") -> str:
        """SERVING, NOT_SERVING, ... for the whole server ("") or one service."""
        response = self.health_stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=self.timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
