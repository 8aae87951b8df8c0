"""The request bodies of the OpenAI-compatible endpoints, as the framework validates them (types and shapes;
values and limits are the core's). Fields OpenAI defines that attnserve does not serve are refused when set,
not ignored."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from ..core.calls.validation import MAX_SEED
from .documented_types import (
    DIMENSIONS,
    EMBEDDING_INPUTS,
    INPUT_TYPE,
    LANGUAGE,
    MAX_NEW_TOKENS,
    NAMED,
    NULL,
    PROMPT_NAME,
    STRICT,
    Integer,
    TextOrTexts,
    model_field,
)
from .openapi_document import FILL
from .schema_shapes import INTEGER, NUMBER, OBJECT, STRING, array, obj


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)

    input: Annotated[str | list[str] | list[Integer] | list[list[Integer]], EMBEDDING_INPUTS] = Field(
        description="a text, a list of texts, or token ids (one array, or several): the model's own ids, "
        "special tokens included as given"
    )
    model: Annotated[str, model_field("dense_models")] = Field(
        "", description="a served embedding model; empty: the default one"
    )
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="base64: each vector as little-endian float32 bytes"
    )
    dimensions: Annotated[Integer | None, DIMENSIONS] = Field(
        None, description="keep the first n values, then normalise again (Matryoshka)"
    )
    prompt_name: Annotated[str | None, PROMPT_NAME] = Field(
        None, description="attnserve's: one of the model's prompts, before each input"
    )
    input_type: Annotated[str | None, INPUT_TYPE] = Field(
        None, description="attnserve's: Cohere's input type (search_query, search_document, ...) for the prompt"
    )
    truncation_direction: Literal["right", "left"] = Field("right", description="attnserve's: where to cut")
    user: str | None = Field(None, description="accepted and ignored")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", **STRICT)

    include_usage: bool = Field(False, description="a last event with the usage of every prompt")


UNSET = {"enum": [None, 0]}  # 0 leaves a number unset, as null does
SAMPLING = {"properties": {"temperature": {"type": "number", "exclusiveMinimum": 0}}, "required": ["temperature"]}
BEAMS = {"properties": {"n": {"type": "integer", "minimum": 2}}, "required": ["n"]}
NOT_SET = {"enum": [None, False, 0, {}]}  # what unsupported() lets through


# The rules between fields that the core applies, in the document's terms.
COMPLETION_RULES = [
    {  # sampling's options need sampling
        "if": SAMPLING,
        "else": {"properties": {"top_k": UNSET, "top_p": UNSET, "min_p": UNSET, "seed": {"type": "null"}}},
    },
    {  # more than one answer is a beam search: it does not sample, stream, stop early or penalise
        "if": BEAMS,
        "then": {
            "properties": {
                "temperature": UNSET,
                "repetition_penalty": UNSET,
                "presence_penalty": UNSET,
                "frequency_penalty": UNSET,
                "stream": {"const": False},
                "ignore_eos": {"const": False},
                "stop": {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]},
            }
        },
    },
    {  # a source language needs a target language
        "if": {"properties": {"source_language": NAMED}, "required": ["source_language"]},
        "then": {"properties": {"target_language": NAMED}, "required": ["target_language"]},
    },
]
STOP = {"type": "string", "minLength": 1, "maxLength": 64}
PENALTY = {"anyOf": [{"type": "number", "minimum": -2, "maximum": 2}, NULL]}  # OpenAI's range


class CompletionsRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"allOf": [*COMPLETION_RULES, {FILL: "language_rules"}]}, **STRICT
    )

    prompt: TextOrTexts = Field(description="a text, or a list of texts answered in order")
    model: Annotated[str, model_field("seq2seq_models")] = Field(
        "", description="a served seq2seq model; empty: the default one"
    )
    max_tokens: Annotated[Integer | None, MAX_NEW_TOKENS] = Field(
        None, description="new tokens at most; unset or 0: the model's limit"
    )
    temperature: Annotated[float | None, WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0}, NULL]})] = Field(
        None, description="0 or unset: greedy; above 0: sampling"
    )
    top_p: Annotated[
        float | None, WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0, "maximum": 1}, NULL]})
    ] = None
    presence_penalty: Annotated[float | None, WithJsonSchema(PENALTY)] = Field(
        None, description="subtracted once from the logit of each token already generated"
    )
    frequency_penalty: Annotated[float | None, WithJsonSchema(PENALTY)] = Field(
        None, description="subtracted from the logit of each token already generated, once for each time"
    )
    seed: Annotated[
        Integer | None, WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_SEED}, NULL]})
    ] = None
    stop: Annotated[
        str | list[str] | None,
        WithJsonSchema({"anyOf": [STOP, {"type": "array", "items": STOP, "maxItems": 8}, NULL]}),
    ] = None
    n: Annotated[Integer, WithJsonSchema({"type": "integer", "minimum": 1, FILL: "beams"})] = Field(
        1, description="answers per prompt: more than 1 returns the n best beams (beam search)"
    )
    stream: bool = Field(False, description="server-sent events, ending with 'data: [DONE]'")
    user: str | None = Field(None, description="accepted and ignored")
    # attnserve's own options, as vLLM and others take them (the SDK's extra_body)
    top_k: Annotated[Integer | None, WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0}, NULL]})] = None
    repetition_penalty: Annotated[
        float | None,
        WithJsonSchema({"anyOf": [{"const": 0}, {"type": "number", "minimum": 0.001, "maximum": 1000}, NULL]}),
    ] = Field(None, description="CTRL's repetition penalty, 0.001 to 1,000 (0 or 1: none)")
    min_p: Annotated[
        float | None, WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0, "exclusiveMaximum": 1}, NULL]})
    ] = Field(None, description="sampling: only tokens at least this share of the most probable one's probability")
    ignore_eos: bool = False
    source_language: Annotated[str | None, LANGUAGE] = Field(
        None, description="multilingual models: the prompt's language"
    )
    target_language: Annotated[str | None, LANGUAGE] = Field(
        None, description="multilingual models: the language to write in"
    )
    # OpenAI's options that a seq2seq model here does not serve: refused when set
    echo: Annotated[bool, WithJsonSchema({"const": False})] = False
    logprobs: Annotated[Integer | None, WithJsonSchema(UNSET)] = None
    best_of: Annotated[Integer | None, WithJsonSchema(UNSET)] = None
    suffix: Annotated[str | None, WithJsonSchema({"type": "null"})] = None
    logit_bias: Annotated[
        dict[str, float] | None, WithJsonSchema({"anyOf": [NULL, {"type": "object", "maxProperties": 0}]})
    ] = None
    stream_options: StreamOptions | None = None

    def unsupported(self) -> str | None:
        """The first OpenAI option set that attnserve does not serve."""
        for name in ("echo", "logprobs", "best_of", "suffix", "logit_bias"):
            value = getattr(self, name)
            if value not in (None, False, 0, {}):
                return name
        return None


# The answers' shapes, for the OpenAPI document.
EMBEDDING = obj(
    ("object", "index", "embedding"),
    object={"const": "embedding"},
    index=INTEGER,
    embedding={"anyOf": [array(NUMBER), {**STRING, "description": "base64"}]},
)
EMBEDDINGS = obj(
    ("object", "data", "model", "usage"), object={"const": "list"}, data=array(EMBEDDING), model=STRING, usage=OBJECT
)


def completion(finish_reasons: list[str | None], required: tuple[str, ...]) -> dict:
    """A completion, or (streamed) one of its chunks."""
    choice = obj(("index", "text", "finish_reason"), index=INTEGER, text=STRING, finish_reason={"enum": finish_reasons})
    return obj(
        required,
        id=STRING,
        object={"const": "text_completion"},
        model=STRING,
        choices=array(choice),
        usage=OBJECT,
    )


COMPLETION = completion(["stop", "length"], ("id", "object", "model", "choices", "usage"))
CHUNK = completion(["stop", "length", None], ("id", "object", "model", "choices"))  # usage: the last one's
MODEL_CARD = obj(("id", "object", "task"), id=STRING, object={"const": "model"}, task=STRING)
MODELS = obj(("object", "data"), object={"const": "list"}, data=array(MODEL_CARD))
HEALTH = obj(("status",), status={"enum": ["ok", "unavailable"]})
RERANKED = obj(
    ("results",),
    id=STRING,
    model=STRING,
    results=array(obj(("index", "relevance_score"), index=INTEGER, relevance_score=NUMBER, document=obj(text=STRING))),
)
