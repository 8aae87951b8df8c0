"""The KServe v2 / Open Inference Protocol servicer (inference.GRPCInferenceService): tensors and parameters
in, core types; core results out, tensors. Validation, limits and policy are the core's, status codes
call_handling.py's, the wire forms open_inference_wire.py's."""

from __future__ import annotations

import asyncio
from importlib.metadata import PackageNotFoundError, version

import grpc
import numpy as np

from ..core.calls import Call
from ..core.cross_encoding import ClassifyRequest
from ..core.embeddings import EmbedRequest
from ..core.generation import GenerateResult
from ..core.registry import ModelInfo
from ..core.serving import ServingCore
from ..core.streaming import StreamStalled
from ..core.validation import GenerationOptions
from ..errors import NotFound, invalid
from ..ops.call_record import CallRecord
from .call_handling import UnparsedRequest, answer_on_stream, handler, status_code
from .open_inference_wire import (
    TEXT,
    Tensor,
    TextInput,
    bytes_tensor,
    infer_response,
    numbers_tensor,
    read_parameters,
    read_text_input,
    requested,
)
from .pb import open_inference_pb2 as pb
from .pb import open_inference_pb2_grpc as pb_grpc

VERSION = "1"  # each model is served in one version
EMBEDDING_PARAMETERS = {
    "normalize": bool,
    "truncate": bool,
    "dimensions": int,
    "prompt_name": str,
    "input_type": str,
    "truncation_direction": str,
}
GENERATION_PARAMETERS = {
    "max_new_tokens": int, "temperature": float, "top_k": int, "top_p": float, "repetition_penalty": float,
    "seed": int, "stop": str, "ignore_eos": bool, "num_beams": int, "length_penalty": float,
    "early_stopping": str, "num_return_sequences": int, "source_language": str, "target_language": str,
}  # fmt: skip
CLASSIFY_PARAMETERS = {"raw_scores": bool}
STREAM_PARAMETER = {"stream": bool}  # ModelStreamInfer: answer a seq2seq request piece by piece
# The core's field names, as this protocol's callers name them.
FIELD_NAMES = {
    "model": "model_name", "inputs": TEXT, "input": TEXT, "dimensions": "parameters.dimensions",
    "stream": "parameters.stream",
    **{name: f"parameters.{name}" for name in ("prompt_name", "input_type", "truncation_direction")},
    **{f"params.{name}": f"parameters.{name}" for name in GENERATION_PARAMETERS},
    **{name: f"parameters.{name}" for name in ("source_language", "target_language")},
}  # fmt: skip
OUTPUTS = {"embedding": ["embedding"], "seq2seq": [TEXT, "token_ids", "finish_reason"], "classification": ["scores"]}
FINAL = "triton_final_response"


def server_version() -> str:
    try:
        return version("attnserve")
    except PackageNotFoundError:
        return "unknown"


SERVER_VERSION = server_version()  # read once: it is the installed package's metadata


def tensor_metadata(model: ModelInfo) -> tuple[list, list]:
    """(inputs, outputs) as TensorMetadata: -1 for a dimension of any size."""
    meta = pb.ModelMetadataResponse.TensorMetadata
    inputs = [meta(name=TEXT, datatype="BYTES", shape=[-1])]
    if model.task == "embedding":
        return inputs, [meta(name="embedding", datatype="FP32", shape=[-1, model.dimensions])]
    if model.task == "classification":  # each text's score for every label
        return inputs, [meta(name="scores", datatype="FP32", shape=[-1, len(model.labels)])]
    outputs = [meta(name=TEXT, datatype="BYTES", shape=[-1]), meta(name="token_ids", datatype="INT64", shape=[-1, -1]),
               meta(name="finish_reason", datatype="BYTES", shape=[-1])]  # fmt: skip
    return inputs, outputs


def model_config(model: ModelInfo) -> pb.ModelConfig:
    """Triton's view of the same tensors. max_batch_size 0: the shapes are whole, the texts their first
    dimension, so perf_analyzer sends the shape it is given (--shape text:N)."""
    types = {"BYTES": pb.TYPE_STRING, "FP32": pb.TYPE_FP32, "INT64": pb.TYPE_INT64}
    inputs, outputs = tensor_metadata(model)
    return pb.ModelConfig(
        name=model.name, platform="attnserve", backend="attnserve", max_batch_size=0,
        input=[pb.ModelInput(name=t.name, data_type=types[t.datatype], dims=t.shape) for t in inputs],
        output=[pb.ModelOutput(name=t.name, data_type=types[t.datatype], dims=t.shape) for t in outputs],
    )  # fmt: skip


def check_version(model: ModelInfo, requested_version: str) -> None:
    if requested_version not in ("", VERSION):
        raise NotFound(
            f"model_version: {requested_version!r} is not served; model {model.name!r} has version {VERSION}",
            "model_version",
        )


def generation_options(values: dict) -> GenerationOptions:
    if "stop" in values:
        values["stop"] = (values["stop"],)
    return GenerationOptions(**values)


def generation_tensors(results: list[GenerateResult], n_best: int) -> list[Tensor]:
    """text [N] (or [N, k] for the k best), token_ids [N(, k), L] padded with -1, finish_reason like text."""
    answers = [r.hypotheses if n_best > 1 else (r,) for r in results]
    shape = (len(results), n_best) if n_best > 1 else (len(results),)
    flat = [a for row in answers for a in row]
    longest = max(len(a.token_ids) for a in flat)
    token_ids = np.full((len(flat), longest), -1, dtype=np.int64)
    for i, a in enumerate(flat):
        token_ids[i, : len(a.token_ids)] = a.token_ids
    return [
        bytes_tensor(TEXT, [a.text for a in flat], shape),
        numbers_tensor("token_ids", "INT64", token_ids.reshape(*shape, longest)),
        bytes_tensor("finish_reason", [a.finish_reason for a in flat], shape),
    ]


class OpenInferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    field_names = FIELD_NAMES

    def __init__(self, core: ServingCore):
        self.core = core

    # Liveness and readiness answer without admission, as health checks do: false, not an error, while
    # the server starts or drains.
    async def ServerLive(self, request, context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.core.ready())

    async def ModelReady(self, request, context) -> pb.ModelReadyResponse:
        ready = not isinstance(request, UnparsedRequest) and request.version in ("", VERSION)
        return pb.ModelReadyResponse(ready=ready and self.core.model_ready(request.name))

    @handler
    async def ServerMetadata(self, request, context, call: Call) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="attnserve", version=SERVER_VERSION, extensions=["model_configuration"])

    @handler
    async def ModelMetadata(self, request, context, call: Call) -> pb.ModelMetadataResponse:
        model = self.core.model(request.name)
        check_version(model, request.version)
        inputs, outputs = tensor_metadata(model)
        return pb.ModelMetadataResponse(
            name=model.name, versions=[VERSION], platform="attnserve", inputs=inputs, outputs=outputs
        )

    @handler
    async def ModelConfig(self, request, context, call: Call) -> pb.ModelConfigResponse:
        model = self.core.model(request.name)
        check_version(model, request.version)
        return pb.ModelConfigResponse(config=model_config(model))

    @handler
    async def ModelInfer(self, request: pb.ModelInferRequest, context, call: Call) -> pb.ModelInferResponse:
        return await self._infer(request, call)

    def _read(self, request: pb.ModelInferRequest, stream: bool = False) -> tuple[ModelInfo, list[str], TextInput]:
        """The request's model (of a task that streams, if `stream`), the outputs it wants, and its texts."""
        model = self.core.model(request.model_name, stream=stream)
        check_version(model, request.model_version)
        return model, requested(request, OUTPUTS[model.task]), read_text_input(request)

    async def _infer(self, request: pb.ModelInferRequest, call: Call) -> pb.ModelInferResponse:
        model, wanted, text = self._read(request)
        if model.task == "embedding":
            options = read_parameters(request.parameters, EMBEDDING_PARAMETERS)
            embed = EmbedRequest(
                model.name,
                text.texts,
                options.get("normalize"),
                options.get("truncate", True),
                options.get("dimensions"),
                options.get("prompt_name"),
                options.get("input_type"),
                options.get("truncation_direction", "right"),
                outputs=("dense",),  # the "embedding" output tensor: a model without one refuses
            )
            result = await self.core.embeddings.embed(embed, call.record)
            tensors = [numbers_tensor("embedding", "FP32", result.vectors)]
            usage = {"prompt_tokens": result.usage.prompt_tokens}
        elif model.task == "classification":
            options = read_parameters(request.parameters, CLASSIFY_PARAMETERS)
            classify = ClassifyRequest(model.name, text.texts, options.get("raw_scores", False))
            result = await self.core.cross_encoding.classify(classify, call.record)
            tensors = [numbers_tensor("scores", "FP32", result.scores)]
            usage = {"prompt_tokens": result.prompt_tokens}
        else:
            options = generation_options(read_parameters(request.parameters, GENERATION_PARAMETERS))
            results = await self.core.generation.generate_all(model.name, text.texts, options, call.record)
            tensors = generation_tensors(results, options.num_return_sequences)
            usage = {k: call.record.figures[k] for k in ("prompt_tokens", "generated_tokens")}
        response = infer_response(request, model.name, [t for t in tensors if t.name in wanted], text.raw)
        for name, value in usage.items():
            response.parameters[name].int64_param = value
        return response

    async def ModelStreamInfer(self, requests, context: grpc.aio.ServicerContext):
        """Each request on the stream is a call of its own, answered when ready (its id says which): an
        error is a response with error_message, and the stream goes on. A seq2seq request with parameter
        `stream` true is answered piece by piece. Every request's last response has parameter
        triton_final_response true."""
        answers: asyncio.Queue = asyncio.Queue(maxsize=1)  # a client that stops reading holds one answer
        tasks: set[asyncio.Task] = set()
        calls: dict[CallRecord, Call] = {}  # the requests in progress on this stream, by their records

        async def emit(message: pb.ModelStreamInferResponse) -> None:
            await answers.put(message)

        async def take(request) -> None:
            async def work(call: Call) -> None:
                if isinstance(request, UnparsedRequest):
                    raise invalid("request", f"not a valid ModelInferRequest: {request.error}")
                calls[call.record] = call
                try:
                    await self._answer_on_stream(request, call, emit)
                finally:
                    del calls[call.record]

            error = await answer_on_stream(self.core, context, "ModelStreamInfer", FIELD_NAMES, work)
            if error is not None:
                await answers.put(pb.ModelStreamInferResponse(error_message=error, infer_response=failed(request)))

        async def read() -> None:
            async for request in requests:
                task = asyncio.ensure_future(take(request))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.gather(*tasks)
            await answers.put(None)

        def stop() -> None:
            reader.cancel()
            for task in list(tasks):
                task.cancel()

        reader = asyncio.ensure_future(read())
        try:
            while (answer := await answers.get()) is not None:
                try:
                    # calls.keys(): the records as they are when the write times out, if it does
                    await self.core.streams.send(context.write(answer), calls.keys())
                except StreamStalled as error:
                    # Give every request on the stream up first: the status cannot leave while the stuck
                    # write holds the stream, so abort may wait until the client goes.
                    for call in calls.values():
                        call.refuse(error)
                    stop()
                    await context.abort(status_code(error), error.message)
            await reader
        finally:
            stop()

    async def _answer_on_stream(self, request: pb.ModelInferRequest, call: Call, emit) -> None:
        plain = pb.ModelInferRequest()
        plain.CopyFrom(request)
        streamed = False
        if "stream" in plain.parameters:
            streamed = read_parameters({"stream": plain.parameters["stream"]}, STREAM_PARAMETER)["stream"]
            del plain.parameters["stream"]
        if not streamed:
            response = await self._infer(plain, call)
            response.parameters[FINAL].bool_param = True
            return await emit(pb.ModelStreamInferResponse(infer_response=response))

        model, wanted, text = self._read(plain, stream=True)
        options = generation_options(read_parameters(plain.parameters, GENERATION_PARAMETERS))
        stream = await self.core.generation.stream_one(model.name, text.texts, options, call.record)
        async for event in stream.events:
            tensors = [
                bytes_tensor(TEXT, [event.text], (1,)),
                numbers_tensor("token_ids", "INT64", np.array([event.token_ids], dtype=np.int64).reshape(1, -1)),
                bytes_tensor("finish_reason", [event.finish_reason or ""], (1,)),
            ]
            message = pb.ModelStreamInferResponse()
            response = infer_response(
                plain, model.name, [t for t in tensors if t.name in wanted], text.raw, into=message.infer_response
            )
            response.parameters[FINAL].bool_param = event.finish_reason is not None
            if event.finish_reason is not None:
                response.parameters["prompt_tokens"].int64_param = event.usage.prompt_tokens
                response.parameters["generated_tokens"].int64_param = event.usage.generated_tokens
            await emit(message)


def failed(request) -> pb.ModelInferResponse:
    """The response that goes with an error on the stream: it names the request, as Triton's does."""
    response = pb.ModelInferResponse()
    if not isinstance(request, UnparsedRequest):
        response.model_name, response.id = request.model_name, request.id
    response.parameters[FINAL].bool_param = True
    return response
