"""What the core tells the doors about what it serves: each model's info, the languages each translating model
reads and writes, and the server's limits. Plain values: no door sees a served model or the settings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelInfo:
    name: str
    task: str
    dimensions: int
    max_input_tokens: int
    provider: str
    opset: int
    is_default: bool
    languages: tuple[str, ...] = ()  # a multilingual model's, as the checkpoint names them
    needs_source_language: bool = False
    needs_target_language: bool = False
    language_pair: tuple[str, ...] = ()  # (source, target) of a model of one pair that names it
    prompt_names: tuple[str, ...] = ()  # an embedding model's prompts
    default_prompt_name: str = ""
    labels: tuple[str, ...] = ()  # a classification model's
    outputs: tuple[str, ...] = ()  # an embedding model's: dense, and sparse or multi_vector where it has them
    pooling: str = ""  # an embedding model's: mean, cls, splade
    precision: str = "fp32"  # of the graphs it runs: fp32, fp16 or int8
    vocab_size: int = 0  # token ids sent as input are below it
    max_new_tokens: int = 0  # a seq2seq model's: the most a request may ask for
    token_offsets: bool = False  # its tokenizer gives each token's place in the text (a tokenizer.json)


@dataclass(frozen=True)
class TranslationLanguages:
    """One translating model's languages, as it names them (a model of no named languages: both empty)."""

    model: str
    sources: tuple[str, ...]
    targets: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class ServerLimits:
    max_concurrent_requests: int
    max_client_batch_size: int
    max_batch_tokens: int  # of one embedding batch
    max_batch_size: int  # inputs of one embedding batch
    tokenize_threads: int
    max_beams: int  # of one generation (each beam takes a cache row)
    rerank_max_documents: int  # of one rerank call
    translation_max_characters: int  # of all the texts of one translation call
    translation_max_texts: int  # texts of one translation call
    document_max_bytes: int  # of one uploaded document
