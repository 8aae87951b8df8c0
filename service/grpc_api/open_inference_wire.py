"""The Open Inference Protocol's wire forms: the text input read from `contents` or raw bytes, outputs
written the same way the request came, and request parameters read by name and kind. Everything a client
can get wrong here is refused as InvalidArgument naming the tensor or parameter."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import invalid
from ..kserve_protocol import CLIENT_PARAMETERS, TEXT, Tensor, pack_bytes, unpack_bytes
from .pb import open_inference_pb2 as pb


@dataclass(frozen=True)
class TextInput:
    texts: list  # str; a speech model's recordings: bytes
    raw: bool  # the request sent raw_input_contents: answer with raw_output_contents


def read_text_input(request: pb.ModelInferRequest, name: str = TEXT) -> TextInput:
    """The one input: BYTES of shape [N] or [N, 1]; `text`'s elements UTF-8, `audio`'s any bytes."""
    names = [t.name for t in request.inputs]
    if names != [name]:
        raise invalid("inputs.name", f"{names}; the model takes one input tensor, {name!r} (BYTES, shape [N])")
    tensor = request.inputs[0]
    if tensor.datatype != "BYTES":
        raise invalid(name, f"datatype {tensor.datatype!r}; send BYTES")
    shape = list(tensor.shape)
    if len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] != 1) or shape[0] < 0:
        raise invalid(name, f"shape {shape}; send [N] or [N, 1] elements")
    raw = len(request.raw_input_contents) > 0
    if raw:
        if len(request.raw_input_contents) != 1:
            raise invalid("raw_input_contents", f"{len(request.raw_input_contents)} entries for 1 input tensor")
        elements = unpack_bytes(request.raw_input_contents[0], name)
    else:
        elements = list(tensor.contents.bytes_contents)
    if len(elements) != shape[0]:
        raise invalid(name, f"shape {shape} holds {shape[0]} elements; the contents have {len(elements)}")
    if name != TEXT:
        return TextInput(elements, raw)
    texts = []
    for i, element in enumerate(elements):
        try:
            texts.append(element.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise invalid(f"{TEXT}[{i}]", f"not UTF-8 ({error.reason} at byte {error.start})") from None
    return TextInput(texts, raw)


def infer_response(
    request: pb.ModelInferRequest,
    model: str,
    tensors: list[Tensor],
    raw: bool,
    into: pb.ModelInferResponse | None = None,
) -> pb.ModelInferResponse:
    """The response (written into `into`, a stream message's own, if given: copying one costs as much as
    building it)."""
    response = pb.ModelInferResponse() if into is None else into
    response.model_name, response.model_version, response.id = model, "1", request.id
    for tensor in tensors:
        output = response.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if tensor.datatype == "BYTES":
            if raw:
                response.raw_output_contents.append(pack_bytes(tensor.values))
            else:
                output.contents.bytes_contents.extend(tensor.values)
        elif raw:
            response.raw_output_contents.append(tensor.values.tobytes())
        elif tensor.datatype == "FP32":
            output.contents.fp32_contents.extend(tensor.values.ravel().tolist())
        else:
            output.contents.int64_contents.extend(tensor.values.ravel().tolist())
    return response


# A parameter's kind, and the InferParameter fields that may carry it.
KINDS = {
    int: ("int64_param", "uint64_param"),
    float: ("double_param", "int64_param", "uint64_param"),
    bool: ("bool_param",),
    str: ("string_param",),
}
KIND_NAMES = {int: "an integer", float: "a number", bool: "a bool", str: "a string"}


def read_parameters(parameters, kinds: dict[str, type]) -> dict:
    """The request's parameters by name, each of the kind `kinds` gives it; any other name is refused."""
    values = {}
    for name, parameter in parameters.items():
        if name in CLIENT_PARAMETERS:
            continue
        field = f"parameters.{name}"
        if name not in kinds:
            raise invalid(field, f"not a parameter of this model; it takes {', '.join(kinds)}")
        kind, sent = kinds[name], parameter.WhichOneof("parameter_choice")
        if sent not in KINDS[kind]:
            raise invalid(field, f"{sent or 'no value'}; send {KIND_NAMES[kind]} ({KINDS[kind][0]})")
        values[name] = kind(getattr(parameter, sent))
    return values
