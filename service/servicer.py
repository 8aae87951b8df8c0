"""The Inference service: protobuf in, validation, the batcher or scheduler awaited, protobuf out.

The only module that sees both protobuf and the internal types. Every handler passes admission first:
UNAVAILABLE while the models load or the server drains, RESOURCE_EXHAUSTED beyond
max_concurrent_requests. Admission is done here, not by grpcio's maximum_concurrent_rpcs, which would
turn away health checks too.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from concurrent.futures import Executor

import grpc
import numpy as np

from .batcher import QueueFull
from .config import ServerConfig
from .errors import RequestError, exhausted, invalid, unavailable
from .models import ModelRegistry, ServedModel
from .pb import inference_pb2 as pb
from .pb import inference_pb2_grpc as pb_grpc

log = logging.getLogger("attnserve.servicer")

TASKS = {"embedding": pb.TASK_EMBEDDING, "seq2seq": pb.TASK_SEQ2SEQ}


def handler(method):
    """Admission, and errors turned into statuses: RequestError as it says, anything else INTERNAL."""

    @functools.wraps(method)
    async def wrapper(self: InferenceServicer, request, context: grpc.aio.ServicerContext):
        try:
            self.admit()
        except RequestError as error:
            await context.abort(error.code, error.message)
        self.in_flight += 1
        try:
            return await method(self, request, context)
        except RequestError as error:
            await context.abort(error.code, error.message)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception:
            log.exception("%s failed", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"{method.__name__}: internal error (see the server log)")
        finally:
            self.in_flight -= 1

    return wrapper


class InferenceServicer(pb_grpc.InferenceServicer):
    def __init__(self, config: ServerConfig, tokenize_executor: Executor):
        self.config = config
        self.tokenize_executor = tokenize_executor
        self.registry: ModelRegistry | None = None  # set once the models are loaded and warm
        self.draining = False
        self.in_flight = 0

    def admit(self) -> None:
        if self.draining:
            raise unavailable("the server is shutting down; retry on another replica")
        if self.registry is None:
            raise unavailable("the server is starting: models are loading")
        if self.in_flight >= self.config.max_concurrent_requests:
            raise exhausted(
                f"{self.in_flight} calls are in progress, the most this server takes at once "
                f"(max_concurrent_requests {self.config.max_concurrent_requests}); retry later"
            )

    def _texts(self, inputs) -> list[str]:
        texts = list(inputs)
        limit = self.config.max_client_batch_size
        if not texts:
            raise invalid(f"inputs: empty; send 1 to {limit} texts")
        if len(texts) > limit:
            raise invalid(f"inputs: {len(texts)} texts; at most {limit} per call (max_client_batch_size)")
        for i, text in enumerate(texts):
            if not text:
                raise invalid(f"inputs[{i}]: empty text")
        return texts

    async def _tokenize(self, model: ServedModel, texts: list[str]):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.tokenize_executor, model.tokenizer.encode, texts)

    @handler
    async def Embed(self, request: pb.EmbedRequest, context) -> pb.EmbedResponse:
        model = self.registry.get(request.model, "embedding", "Embed")
        texts = self._texts(request.inputs)
        normalize = request.normalize if request.HasField("normalize") else model.normalize_by_default
        truncate = request.truncate if request.HasField("truncate") else True

        started = time.perf_counter()
        encoded = await self._tokenize(model, texts)
        tokenization_seconds = time.perf_counter() - started
        if not truncate:
            for i, e in enumerate(encoded):
                if e.truncated:
                    raise invalid(
                        f"inputs[{i}]: more than {model.max_input_tokens} tokens, the most model {model.name!r} "
                        "takes; shorten it or set truncate to true"
                    )
        try:
            results = await model.batcher.submit([e.ids for e in encoded])
        except QueueFull as error:
            raise exhausted(f"model {model.name!r}: {error}; retry later") from None

        vectors = np.stack([r.vector for r in results])
        if normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, 1e-12)
        batch_seconds = {r.batch_id: r.batch_seconds for r in results}
        usage = pb.EmbedUsage(
            prompt_tokens=sum(len(e.ids) for e in encoded),
            truncated_inputs=sum(e.truncated for e in encoded),
            queue_seconds=max(r.queue_seconds for r in results),
            tokenization_seconds=tokenization_seconds,
            inference_seconds=sum(batch_seconds.values()),
        )
        return pb.EmbedResponse(
            model=model.name, embeddings=[pb.Embedding(values=v) for v in vectors.tolist()], usage=usage
        )

    @handler
    async def Tokenize(self, request: pb.TokenizeRequest, context) -> pb.TokenizeResponse:
        model = self.registry.find(request.model)
        encoded = await self._tokenize(model, self._texts(request.inputs))
        return pb.TokenizeResponse(
            model=model.name,
            tokenized=[pb.TokenizedInput(ids=e.ids, tokens=e.tokens, truncated=e.truncated) for e in encoded],
        )

    @handler
    async def ListModels(self, request: pb.ListModelsRequest, context) -> pb.ListModelsResponse:
        infos = []
        for model in self.registry.models.values():
            infos.append(
                pb.ModelInfo(
                    name=model.name,
                    task=TASKS[model.task],
                    dimensions=model.config["d_model"],
                    max_input_tokens=model.max_input_tokens,
                    execution_provider=model.provider,
                    opset=model.files.manifest["opset"],
                    is_default=self.registry.defaults.get(model.task) is model,
                )
            )
        return pb.ListModelsResponse(models=infos)
