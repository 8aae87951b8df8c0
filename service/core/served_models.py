"""The served models, typed: an embedding model and a seq2seq model, each with what the core needs of it
read once from its directory into frozen dataclasses (core/loader.py builds them; nothing else reads a
model's config)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from modeldir.language_tokenizer import LanguageTokenizer
from modeldir.languages import Languages
from modeldir.late_interaction import ColbertSettings
from modeldir.tokenizer import MarianTokenizer, TextTokenizer

from ..engine.batcher import EmbeddingBatcher
from ..engine.scheduler import Scheduler
from ..ops.metrics import ModelMetrics
from ..runner.embedding import EmbeddingRunner
from ..runner.seq2seq import Seq2SeqRunner
from .health import ModelHealth

if TYPE_CHECKING:
    from .attention_maps import AttentionGraph


# An embedding graph's extra outputs (modeldir.files.extra_outputs) -> what a request names them.
OUTPUT_OF_GRAPH = {
    "token_weights": "sparse",
    "vocabulary_weights": "sparse",
    "multi_vectors": "multi_vector",
    "token_vectors": "multi_vector",
    "last_hidden_state": "token_embeddings",  # every embedding model's (loader.py asks for it)
}
# Graph outputs whose model's pooled state means nothing: SPLADE's, a ColBERT-style model's.
NO_DENSE = ("vocabulary_weights", "token_vectors")


@dataclass(frozen=True)
class Architecture:
    n_encoder_layers: int
    n_decoder_layers: int  # 0 for an embedding model
    n_heads: int
    d_model: int
    max_positions: int
    vocab_size: int = 0  # the token table's rows: a token-id input must be below it


@dataclass(frozen=True)
class SpecialTokens:
    bos: int  # the decoder's start token (seq2seq)
    eos: int
    pad: int
    tokenizer: frozenset[int]  # the tokenizer's own special tokens ([CLS], </s>, ...)

    def of(self, seq2seq: bool) -> frozenset[int]:
        """Every special token of a model: the tokenizer's, pad, and for seq2seq the decoder's start and eos."""
        return self.tokenizer | {self.pad} | ({self.bos, self.eos} if seq2seq else set())


@dataclass(frozen=True)
class GenerationDefaults:
    """The checkpoint's choices for what a request leaves unset (its ModelConfig's, as its generation
    config states them)."""

    num_beams: int
    length_penalty: float
    early_stopping: str


@dataclass(frozen=True)
class GenerationLimits:
    max_new_tokens: int  # the most a request may ask for: what a cache row holds after the start token
    cache_rows: int  # a beam search takes one per beam


@dataclass(eq=False)
class ServedModel:
    name: str
    provider: str  # the execution provider its sessions got
    opset: int
    architecture: Architecture
    max_input_tokens: int
    special: SpecialTokens
    tokenizer: TextTokenizer | MarianTokenizer | LanguageTokenizer
    languages: Languages | None  # a multilingual model's: what it serves, where the codes go
    language_pair: tuple[str, ...]  # (source, target) of a model of one pair that names it; else ()
    health: ModelHealth
    metrics: ModelMetrics
    attention: AttentionGraph | None  # with attention maps on

    task: ClassVar[str]
    batched: ClassVar[bool]  # its inputs run through a batcher (embeddings, cross-encoders); else a scheduler

    @property
    def dimensions(self) -> int:
        return self.architecture.d_model


@dataclass(eq=False)
class EmbeddingModel(ServedModel):
    runner: EmbeddingRunner
    batcher: EmbeddingBatcher
    normalize_by_default: bool
    prompts: dict[str, str]  # sentence-transformers' prompts by name
    default_prompt: str | None  # the one an input gets when a request names none
    # int8 and uint8's ranges, (2, d) per output (dense, multi_vector), calibrated at export; {}: none
    int8_ranges: dict[str, np.ndarray] = field(default_factory=dict)
    colbert: ColbertSettings | None = None  # a ColBERT-style model's framing of queries and documents
    pooling: str = "mean"  # how its dense vector is made: mean, cls; splade (a SPLADE model's weights)

    task: ClassVar[str] = "embedding"
    batched: ClassVar[bool] = True

    @property
    def outputs(self) -> tuple[str, ...]:
        """What a request may ask of it (EmbedRequest.outputs), the first its default: dense (but for a
        SPLADE or ColBERT-style model, whose pooled state means nothing), and the outputs its heads add."""
        dense = () if any(name in NO_DENSE for name in self.runner.extra) else ("dense",)
        return (*dense, *(OUTPUT_OF_GRAPH[name] for name in self.runner.extra))


@dataclass(eq=False)
class CrossEncoderModel(EmbeddingModel):
    """An encoder with a classification head, batched as embeddings are: its runner gives each input's
    logits (one per label), for Rerank (one label: a pair's relevance) and Classify."""

    labels: tuple[str, ...] = ()
    score_activation: str = "identity"  # CrossEncoder's: identity, sigmoid or softmax

    task: ClassVar[str] = "classification"


@dataclass(eq=False)
class Seq2SeqModel(ServedModel):
    runner: Seq2SeqRunner
    scheduler: Scheduler
    defaults: GenerationDefaults
    limits: GenerationLimits

    task: ClassVar[str] = "seq2seq"
    batched: ClassVar[bool] = False
