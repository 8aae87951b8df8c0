"""The request bodies of the OpenAI-compatible endpoints, as the framework validates them (types and shapes;
values and limits are the core's). Fields OpenAI defines that attnserve does not serve are refused when set,
not ignored."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: str | list[str] | list[int] | list[list[int]] = Field(
        description="a text, a list of texts, or token ids (one array, or several): the model's own ids, "
        "special tokens included as given"
    )
    model: str = Field("", description="a served embedding model; empty: the default one")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="base64: each vector as little-endian float32 bytes"
    )
    dimensions: int | None = Field(None, description="keep the first n values, then normalise again (Matryoshka)")
    prompt_name: str | None = Field(None, description="attnserve's: one of the model's prompts, before each input")
    input_type: str | None = Field(
        None, description="attnserve's: Cohere's input type (search_query, search_document, ...) for the prompt"
    )
    truncation_direction: Literal["right", "left"] = Field("right", description="attnserve's: where to cut")
    user: str | None = Field(None, description="accepted and ignored")


class CompletionsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str | list[str] = Field(description="a text, or a list of texts answered in order")
    model: str = Field("", description="a served seq2seq model; empty: the default one")
    max_tokens: int | None = Field(None, description="new tokens at most; unset: the model's limit")
    temperature: float | None = Field(None, description="0 or unset: greedy; above 0: sampling")
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = Field(1, description="answers per prompt: more than 1 returns the n best beams (beam search)")
    stream: bool = Field(False, description="server-sent events, ending with 'data: [DONE]'")
    user: str | None = Field(None, description="accepted and ignored")
    # attnserve's own options, as vLLM and others take them (the SDK's extra_body)
    top_k: int | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool = False
    source_language: str | None = Field(None, description="multilingual models: the prompt's language")
    target_language: str | None = Field(None, description="multilingual models: the language to write in")
    # OpenAI's options that a seq2seq model here does not serve: refused when set
    echo: bool = False
    logprobs: int | None = None
    best_of: int | None = None
    suffix: str | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    stream_options: dict | None = None

    def unsupported(self) -> str | None:
        """The first OpenAI option set that attnserve does not serve."""
        for name in ("echo", "logprobs", "best_of", "suffix", "presence_penalty", "frequency_penalty", "logit_bias"):
            value = getattr(self, name)
            if value not in (None, False, 0, {}):
                return name
        return None
