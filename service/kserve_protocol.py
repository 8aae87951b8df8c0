"""The Open Inference Protocol (KServe v2) as the core serves it, whichever door carries it (gRPC's
GRPCInferenceService, REST on the HTTP port): each model's tensors (one BYTES input, `text`, or a speech
model's `audio`: each element one recording's bytes; and its task's outputs), the parameters each task
takes, and an infer: texts or recordings and parameters in, tensors and usage out."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from .core.calls.validation import GenerationOptions
from .core.embedding.embeddings import EmbedRequest
from .core.generation.generation import GenerateResult
from .core.info import ModelInfo
from .core.ranking.cross_encoding import ClassifyRequest
from .core.ranking.zero_shot import DEFAULT_TEMPLATE, is_entailment, label_list
from .core.transcription.speech_chunks import FIELD as CHUNKING
from .core.transcription.speech_chunks import SERVER_VAD_FIELDS, silence_cuts
from .core.transcription.transcription import TranscribeRequest
from .errors import NotFound, invalid
from .ops.call_record import CallRecord

TEXT = "text"
AUDIO = "audio"  # a speech model's input: each element a recording, in any format FFmpeg reads
# The parameters Triton's clients may add to any request (perf_analyzer always sends the last): they carry
# nothing attnserve acts on. (A request's last response is never empty here.)
CLIENT_PARAMETERS = frozenset(
    {"priority", "timeout", "sequence_id", "sequence_start", "sequence_end", "triton_enable_empty_final_response"}
)
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
    "max_new_tokens": int,
    "temperature": float,
    "top_k": int,
    "top_p": float,
    "repetition_penalty": float,
    "min_p": float,
    "presence_penalty": float,
    "frequency_penalty": float,
    "seed": int,
    "stop": str,
    "ignore_eos": bool,
    "num_beams": int,
    "length_penalty": float,
    "early_stopping": str,
    "num_return_sequences": int,
    "source_language": str,
    "target_language": str,
}
# Zero-shot with an NLI classifier: the candidate labels in one string, comma-separated (as the
# zero-shot-classification pipeline reads a string), since a request's parameters are scalars.
CLASSIFY_PARAMETERS = {"raw_scores": bool, "candidate_labels": str, "hypothesis_template": str, "multi_label": bool}
TRANSCRIPTION_PARAMETERS = {
    "task": str,
    "language": str,
    "prompt": str,
    "temperature": float,
    "beam_size": int,
    "chunking_strategy": str,  # auto, or a server_vad object's JSON text
}
PARAMETERS = {
    "embedding": EMBEDDING_PARAMETERS,
    "classification": CLASSIFY_PARAMETERS,
    "seq2seq": GENERATION_PARAMETERS,
    "transcription": TRANSCRIPTION_PARAMETERS,
}
STREAM_PARAMETER = {"stream": bool}  # a seq2seq request answered piece by piece (gRPC's ModelStreamInfer)
# The core's field names, as this protocol's callers name them.
FIELD_NAMES = {
    "model": "model_name",
    "inputs": TEXT,
    "input": TEXT,
    "file": AUDIO,
    "dimensions": "parameters.dimensions",
    "stream": "parameters.stream",
    **{name: f"parameters.{name}" for name in ("prompt_name", "input_type", "truncation_direction")},
    **{f"params.{name}": f"parameters.{name}" for name in GENERATION_PARAMETERS},
    **{name: f"parameters.{name}" for name in ("source_language", "target_language")},
    **{name: f"parameters.{name}" for name in TRANSCRIPTION_PARAMETERS},
    **{f"{CHUNKING}.{name}": f"parameters.{CHUNKING}.{name}" for name in ("type", *SERVER_VAD_FIELDS)},
}
OUTPUTS = {
    "embedding": ["embedding"],
    "seq2seq": [TEXT, "token_ids", "finish_reason"],
    "classification": ["scores"],
    "transcription": [TEXT, "language"],
}


def input_name(task: str) -> str:
    """The one input tensor of a model of this task."""
    return AUDIO if task == "transcription" else TEXT


def unpack_bytes(raw: bytes, field: str) -> list[bytes]:
    """A raw BYTES tensor: each element's length (4 bytes, little-endian), then its bytes."""
    elements, offset = [], 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise invalid(field, f"raw contents end inside the length of element {len(elements)}")
        (size,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + size > len(raw):
            raise invalid(field, f"element {len(elements)} claims {size} bytes; {len(raw) - offset} are left")
        elements.append(raw[offset : offset + size])
        offset += size
    return elements


def pack_bytes(elements: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str  # BYTES, FP32 or INT64
    shape: tuple[int, ...]  # -1: a dimension of any size


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str  # BYTES, FP32 or INT64
    values: np.ndarray | list[bytes]  # numbers in their shape; BYTES elements flattened, row-major
    shape: tuple[int, ...]


def numbers_tensor(name: str, datatype: str, values: np.ndarray) -> Tensor:
    dtype = {"FP32": "<f4", "INT64": "<i8"}[datatype]
    return Tensor(name, datatype, np.ascontiguousarray(values, dtype=dtype), tuple(values.shape))


def bytes_tensor(name: str, texts: list[str], shape: tuple[int, ...]) -> Tensor:
    return Tensor(name, "BYTES", [t.encode() for t in texts], shape)


def tensor_metadata(model: ModelInfo) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """A model's (inputs, outputs). A speech model's: each recording's bytes in, its text and language out."""
    if model.task == "transcription":
        return [TensorSpec(AUDIO, "BYTES", (-1,))], [
            TensorSpec(TEXT, "BYTES", (-1,)),
            TensorSpec("language", "BYTES", (-1,)),
        ]
    inputs = [TensorSpec(TEXT, "BYTES", (-1,))]
    if model.task == "embedding":
        return inputs, [TensorSpec("embedding", "FP32", (-1, model.dimensions))]
    if model.task == "classification":  # each text's score for every label (an NLI model's: every candidate)
        labels = -1 if any(map(is_entailment, model.labels)) else len(model.labels)
        return inputs, [TensorSpec("scores", "FP32", (-1, labels))]
    outputs = [
        TensorSpec(TEXT, "BYTES", (-1,)),
        TensorSpec("token_ids", "INT64", (-1, -1)),
        TensorSpec("finish_reason", "BYTES", (-1,)),
    ]
    return inputs, outputs


def check_version(model: ModelInfo, requested_version: str) -> None:
    if requested_version not in ("", VERSION):
        raise NotFound(
            f"model_version: {requested_version!r} is not served; model {model.name!r} has version {VERSION}",
            "model_version",
        )


def check_served(model: ModelInfo) -> None:
    """A model of a task this protocol serves."""
    if model.task not in OUTPUTS:
        raise invalid("model_name", f"{model.name!r} is a {model.task} model, which this protocol does not serve")


def requested(names: list[str], model: ModelInfo) -> list[str]:
    """The outputs a request names (none: all), each one the model has."""
    check_served(model)
    available = OUTPUTS[model.task]
    for name in names:
        if name not in available:
            raise invalid("outputs", f"{name!r} is not an output of model {model.name!r} ({available})")
    return names or available


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


async def transcribe_all(core, model: ModelInfo, recordings: list[bytes], options: dict, record: CallRecord):
    """Each recording transcribed at once -> text [N], language [N] and the seconds of audio, rounded up
    (OpenAI's usage)."""
    if CHUNKING in options:
        options = {**options, CHUNKING: silence_cuts(options[CHUNKING])}
    requests = [TranscribeRequest(audio=audio, model=model.name, **options) for audio in recordings]
    transcripts = await core.transcription.transcribe_all(requests, record.rpc)
    shape = (len(transcripts),)
    tensors = [bytes_tensor(TEXT, [t.text for t in transcripts], shape)]
    tensors.append(bytes_tensor("language", [t.language for t in transcripts], shape))
    return tensors, {"audio_seconds": math.ceil(sum(t.duration for t in transcripts))}


async def infer(core, model: ModelInfo, inputs: list, options: dict, record: CallRecord):
    """One infer of a model's inputs (texts; a speech model's recordings) with its task's parameters (read as
    PARAMETERS says) -> (its output tensors, the usage a response's parameters report)."""
    if model.task == "transcription":
        return await transcribe_all(core, model, inputs, options, record)
    texts = inputs
    if model.task == "embedding":
        embed = EmbedRequest(
            model=model.name,
            inputs=texts,
            normalize=options.get("normalize"),
            truncate=options.get("truncate", True),
            dimensions=options.get("dimensions"),
            prompt_name=options.get("prompt_name"),
            input_type=options.get("input_type"),
            truncation_direction=options.get("truncation_direction", "right"),
            outputs=("dense",),  # the "embedding" output tensor: a model without one refuses
        )
        result = await core.embeddings.embed(embed, record)
        return [numbers_tensor("embedding", "FP32", result.vectors)], {"prompt_tokens": result.usage.prompt_tokens}
    if model.task == "classification":
        classify = ClassifyRequest(
            model=model.name,
            inputs=texts,
            raw_scores=options.get("raw_scores", False),
            candidate_labels=label_list(options["candidate_labels"]) if "candidate_labels" in options else None,
            hypothesis_template=options.get("hypothesis_template", DEFAULT_TEMPLATE),
            multi_label=options.get("multi_label", False),
        )
        result = await core.cross_encoding.classify(classify, record)
        return [numbers_tensor("scores", "FP32", result.scores)], {"prompt_tokens": result.prompt_tokens}
    generation = generation_options(options)
    results = await core.generation.generate_all(model.name, texts, generation, record)
    usage = {k: record.figures[k] for k in ("prompt_tokens", "generated_tokens")}
    return generation_tensors(results, generation.num_return_sequences), usage
