"""The served models, typed: an embedding model, a cross-encoder, a seq2seq model and a speech model
(Whisper: a seq2seq model over audio windows), each with what the core
needs of it read once from its directory into frozen dataclasses (core/models/loader.py builds them; nothing
else reads a model's config), and its loop's start, stop, warm-up and health probe."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from modeldir.language_tokenizer import LanguageTokenizer
from modeldir.languages import Languages
from modeldir.late_interaction import ColbertSettings
from modeldir.tokenizer import MarianTokenizer, TextTokenizer, pad_batch
from modeldir.whisper_tokens import WhisperSettings

from ...engine.batcher import EmbeddingBatcher
from ...engine.call_price import PROBE_TOKENS, measure_call_price
from ...engine.repetition_rules import RepetitionRules
from ...engine.scheduler import Scheduler
from ...engine.sequence import GenerationParams
from ...ops.metrics import ModelMetrics
from ...runner.embedding import EmbeddingRunner
from ...runner.seq2seq import Seq2SeqRunner
from ...runner.voice_activity import VoiceActivityRunner
from .health import ModelHealth
from .side_graphs import SideGraphCalls

PROBE_TEXT = "1"  # a token or two in every tokenizer


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
    d_head: int = 0  # a head's width, where it is not d_model / n_heads (T5's d_kv)
    embedding_dim: int = 0  # an embedding model's vector's width, where it is not d_model (its Dense layers')


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
    forced_bos_id: int | None = None  # the first generated token (BART's bos), unless a language's code
    rules: RepetitionRules | None = None  # the checkpoint's no_repeat_ngram_size and min_length


@dataclass(frozen=True, kw_only=True)
class GenerationLimits:
    max_new_tokens: int  # the most a request may ask for: what a cache row holds after the start token
    cache_rows: int  # a beam search takes one per beam: the rows at the longest answers


@dataclass(eq=False)
class ServedModel:
    name: str
    provider: str  # the execution provider its sessions got
    precision: str  # of the graphs it runs there: fp32, fp16 or int8
    opset: int
    architecture: Architecture
    max_input_tokens: int
    special: SpecialTokens
    tokenizer: TextTokenizer | MarianTokenizer | LanguageTokenizer
    languages: Languages | None  # a multilingual model's: what it serves, where the codes go
    language_pair: tuple[str, ...]  # (source, target) of a model of one pair that names it; else ()
    health: ModelHealth
    metrics: ModelMetrics
    attention: SideGraphCalls | None  # with attention maps on

    task: ClassVar[str]

    @property
    def dimensions(self) -> int:
        return self.architecture.embedding_dim or self.architecture.d_model

    def warm_up(self) -> None:
        """First calls allocate and plan: make them before the first request does (in the model thread)."""

    @property
    def split_cost(self) -> int | None:
        """What one more call of its encoder costs in padded tokens, by which its batches are cut (None where
        they are never cut by length)."""
        return None

    def measure_split_cost(self) -> None:
        """Measure split_cost and cut its batches by that (engine/call_price.py; in the model thread, before
        start)."""

    def price_calls(self, call) -> int:
        """The price of one more call(ids, mask), on (1, n) inputs of real text made before the timing: n
        1 and up to PROBE_TOKENS (fewer where the model's inputs or its tokenizer give fewer)."""
        (encoded,) = self.tokenizer.encode(["warm up " * PROBE_TOKENS])
        ids = np.array([encoded.ids[:PROBE_TOKENS]], np.int64)
        inputs = {n: (np.ascontiguousarray(ids[:, :n]), np.ones((1, n), np.int64)) for n in (1, ids.shape[1])}
        return measure_call_price(lambda n: call(*inputs[n]), ids.shape[1])

    def start(self) -> None:
        """Start the model's loop (on the event loop that serves it)."""
        raise NotImplementedError

    async def stop(self, error: Exception) -> None:
        """Stop the model's loop; calls still waiting on it get `error`."""
        raise NotImplementedError

    async def probe(self, executor: Executor) -> None:
        """A small real call through the model's serving path; raises if it fails."""
        raise NotImplementedError

    def holding(self) -> dict[str, int]:
        """What its loop holds now, by kind (all 0 when idle): what a test checks a call left behind."""
        raise NotImplementedError


@dataclass(eq=False)
class ServedEmbeddingModel(ServedModel):
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

    @property
    def outputs(self) -> tuple[str, ...]:
        """What a request may ask of it (EmbedRequest.outputs), the first its default: dense (but for a
        SPLADE or ColBERT-style model, whose pooled state means nothing), and the outputs its heads add."""
        dense = () if any(name in NO_DENSE for name in self.runner.extra) else ("dense",)
        return (*dense, *(OUTPUT_OF_GRAPH[name] for name in self.runner.extra))

    def run_encoder(self, texts: list[str]) -> None:
        """One call of the runner, as the batcher makes it (blocking: run it in the model thread)."""
        ids, mask = pad_batch([e.ids for e in self.tokenizer.encode(texts)], self.special.pad)
        (vectors,) = self.runner.run(ids, mask)
        if not np.isfinite(vectors).all():
            raise RuntimeError(f"model {self.name}: the encoder gave non-finite embeddings")

    def warm_up(self) -> None:
        """The runner at the shortest and the longest input."""
        self.run_encoder(["warm up"])
        self.run_encoder(["warm up " * self.max_input_tokens] * 2)

    @property
    def split_cost(self) -> int:
        return self.batcher.limits.split_cost_tokens

    def measure_split_cost(self) -> None:
        price = self.price_calls(self.runner.run)
        self.batcher.limits = replace(self.batcher.limits, split_cost_tokens=price)

    def start(self) -> None:
        self.batcher.start()

    async def stop(self, error: Exception) -> None:
        await self.batcher.stop(error)

    async def probe(self, executor: Executor) -> None:
        """One runner call in the model thread."""
        await asyncio.get_running_loop().run_in_executor(executor, self.run_encoder, [PROBE_TEXT])

    def holding(self) -> dict[str, int]:
        return {"queued": self.batcher.queue_depth + len(self.batcher.running)}


@dataclass(eq=False)
class ServedCrossEncoder(ServedEmbeddingModel):
    """An encoder with a classification head, batched as embeddings are: its runner gives each input's
    logits (one per label), for Rerank (one label: a pair's relevance) and Classify."""

    labels: tuple[str, ...] = ()
    score_activation: str = "identity"  # CrossEncoder's: identity, sigmoid or softmax

    task: ClassVar[str] = "classification"


@dataclass(eq=False)
class ServedSeq2SeqModel(ServedModel):
    runner: Seq2SeqRunner
    scheduler: Scheduler
    defaults: GenerationDefaults
    limits: GenerationLimits

    task: ClassVar[str] = "seq2seq"

    @property
    def split_cost(self) -> int:
        return self.scheduler.settings.encode_split_cost

    def measure_split_cost(self) -> None:
        price = self.price_calls(self.runner.encode)
        self.scheduler.settings = replace(self.scheduler.settings, encode_split_cost=price)

    def start(self) -> None:
        self.scheduler.start()

    async def stop(self, error: Exception) -> None:
        await self.scheduler.stop(error)

    async def probe(self, executor: Executor) -> None:
        """A one-token generation through the scheduler (the cache, the runner's encoder and decoder step,
        token choice), counted in no metric."""
        (encoded,) = self.tokenizer.encode([PROBE_TEXT])
        params = GenerationParams(max_new_tokens=1, ignore_eos=True, stream=False, probe=True)
        async for event in self.scheduler.generate(encoded.ids, params):
            last = event
        if last.finish_reason is None or len(last.token_ids) != 1:
            raise RuntimeError(f"model {self.name}: the probe generation gave {last}")

    def holding(self) -> dict[str, int]:
        s, rows = self.scheduler, self.scheduler.rows
        return {
            "sequences": len(s.waiting) + s.running + s.cache.used,
            "reserved": s.cache.reserved_tokens,
            # its counts of rows by kind, back to none
            "rows counted": rows.beams
            + rows.sampled
            + rows.ignoring_eos
            + rows.awaiting_first
            + rows.scoring
            + rows.ruling
            + rows.forcing,
        }


@dataclass(eq=False)
class ServedSpeechModel(ServedSeq2SeqModel):
    """Whisper: its windows of log-mel frames are the sources of its scheduler's sequences, and its decoder
    starts from prompts of special tokens (core/transcription/)."""

    whisper: WhisperSettings
    n_mels: int
    source_positions: int  # a window's: its 3,000 frames halved by the convolution stem
    word_alignment: SideGraphCalls | None  # its word-alignment graph: word timestamps (None: exported without)
    voice_activity: VoiceActivityRunner | None  # its voice activity detector: recordings cut at their silences

    task: ClassVar[str] = "transcription"

    @property
    def split_cost(self) -> None:
        """Its sources are windows of one length: nothing to cut."""
        return None

    async def probe(self, executor: Executor) -> None:
        """One window of silence, its language and task forced, through the scheduler (counted nowhere)."""
        s = self.whisper
        forced = (s.language_id(s.languages[0]), s.transcribe_id) if s.multilingual else ()
        silence = np.full((self.n_mels, 2 * self.source_positions), -1.5, np.float32)  # log-mel of zeros
        params = GenerationParams(max_new_tokens=1, ignore_eos=True, stream=False, probe=True, forced_tokens=forced)
        async for event in self.scheduler.generate([], params, features=silence):
            last = event
        if last.finish_reason is None or len(last.token_ids) != 1:
            raise RuntimeError(f"model {self.name}: the probe transcription gave {last}")
