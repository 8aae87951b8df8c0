"""The KServe v2 / Open Inference Protocol servicer (inference.GRPCInferenceService): tensors and parameters
in, core types; core results out, tensors. Validation, limits and policy are the core's, status codes
call_handling.py's, the wire forms open_inference_wire.py's."""

from __future__ import annotations

import asyncio
from importlib.metadata import PackageNotFoundError, version

import grpc
import numpy as np

from ..core.calls.lifecycle import Call
from ..core.generation.streaming import StreamStalled
from ..core.info import ModelInfo
from ..core.serving import ServingCore
from ..errors import invalid
from ..kserve_protocol import (
    FIELD_NAMES,
    GENERATION_PARAMETERS,
    PARAMETERS,
    STREAM_PARAMETER,
    TEXT,
    VERSION,
    bytes_tensor,
    check_version,
    generation_options,
    infer,
    input_name,
    numbers_tensor,
    requested,
    tensor_metadata,
)
from ..ops.call_record import CallRecord
from .call_handling import UnparsedRequest, answer_on_stream, handler, status_code
from .open_inference_wire import TextInput, infer_response, read_parameters, read_text_input
from .pb import open_inference_pb2 as pb
from .pb import open_inference_pb2_grpc as pb_grpc

FINAL = "triton_final_response"


def server_version() -> str:
    try:
        return version("attnserve")
    except PackageNotFoundError:
        return "unknown"


SERVER_VERSION = server_version()  # read once: it is the installed package's metadata


def tensor_metadata_messages(model: ModelInfo) -> tuple[list, list]:
    """(inputs, outputs) as TensorMetadata."""
    meta = pb.ModelMetadataResponse.TensorMetadata
    inputs, outputs = tensor_metadata(model)
    return [meta(name=t.name, datatype=t.datatype, shape=t.shape) for t in inputs], [
        meta(name=t.name, datatype=t.datatype, shape=t.shape) for t in outputs
    ]


def model_config(model: ModelInfo) -> pb.ModelConfig:
    """Triton's view of the same tensors. max_batch_size 0: the shapes are whole, the texts their first
    dimension, so perf_analyzer sends the shape it is given (--shape text:N)."""
    types = {"BYTES": pb.TYPE_STRING, "FP32": pb.TYPE_FP32, "INT64": pb.TYPE_INT64}
    inputs, outputs = tensor_metadata(model)
    return pb.ModelConfig(
        name=model.name,
        platform="attnserve",
        backend="attnserve",
        max_batch_size=0,
        input=[pb.ModelInput(name=t.name, data_type=types[t.datatype], dims=t.shape) for t in inputs],
        output=[pb.ModelOutput(name=t.name, data_type=types[t.datatype], dims=t.shape) for t in outputs],
    )


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
        inputs, outputs = tensor_metadata_messages(model)
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
        wanted = requested([o.name for o in request.outputs], model)
        return model, wanted, read_text_input(request, input_name(model.task))

    async def _infer(self, request: pb.ModelInferRequest, call: Call) -> pb.ModelInferResponse:
        model, wanted, text = self._read(request)
        options = read_parameters(request.parameters, PARAMETERS[model.task])
        tensors, usage = await infer(self.core, model, text.texts, options, call.record)
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
