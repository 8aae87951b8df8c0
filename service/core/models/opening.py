"""Opening a model directory for serving: the load settings, its files opened and verified (checksums),
its tokenizer and ONNX Runtime sessions created, and its generation cache sized (blocking: the model
thread runs it)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

from modeldir.files import (
    ATTENTION_FILE,
    CACHE_GRAPHS,
    ModelFiles,
    extra_outputs,
    open_model_dir,
    pooled_output,
    read_manifest,
)
from modeldir.language_tokenizer import load_model_tokenizer

from ...engine.batcher import BatchLimits
from ...engine.generation_cache import TARGET_STEP
from ...runner.attention_maps import AttentionMapsRunner
from ...runner.cache_memory import CacheGeometry, one_buffer_resize
from ...runner.cross_attention import CrossAttentionRunner, alignment_layer, cut_graph
from ...runner.device_memory import cuda_memory
from ...runner.embedding import EmbeddingRunner
from ...runner.sampling_graph import SamplingGraph, sampling_graph
from ...runner.seq2seq import Seq2SeqRunner
from ...runner.sessions import (
    CPU,
    CUDA,
    DEVICE_TYPES,
    ProviderError,
    SessionSettings,
    create_session,
    provider_of,
    threads_for,
)
from ...runner.voice_activity import VoiceActivityRunner
from ...runner.word_alignment import WordAlignmentRunner
from .served_models import Architecture, SpecialTokens

log = logging.getLogger("attnserve.loader")


CPU_CACHE_BYTES = 1 << 30  # what kv_cache_bytes 0 (auto) gives a model on the CPU
# What max_running 0 (the device's default) allows in one decode step: on the CPU, where a step's compute
# grows with its rows, 64 (the one default before each device had its own); on CUDA as many as the cache
# holds, up to vLLM's default on large GPUs (a step's cost there is mostly fixed: to be measured there).
DEFAULT_MAX_RUNNING = {CPU: 64, CUDA: 1024}
DEVICE_SHARE = 0.9  # of the device memory left once every session is loaded, that auto gives the caches


@dataclass(frozen=True, kw_only=True)
class CacheSettings:
    """How big each seq2seq model's generation cache is, and how many may wait for it."""

    max_new_tokens: int
    cache_bytes: int  # 0: auto (on CUDA, what the device has left; on the CPU, CPU_CACHE_BYTES)
    cache_tokens: int  # when > 0, instead of cache_bytes
    max_running: int  # 0: the device's default (DEFAULT_MAX_RUNNING)
    max_waiting: int

    def geometry(
        self, architecture: Architecture, max_input_tokens: int, precision: str, whole_context: bool = False
    ) -> CacheGeometry:
        """whole_context: a row holds every decoder position the model has (Whisper's: a window's previous
        text, its prompt and its own tokens share them), whatever max_new_tokens says: as many steps as
        positions, the last step's token never being fed back (one buffer position more than it needs)."""
        # The start token takes one of the model's positions.
        new_tokens = min(self.max_new_tokens, architecture.max_positions - 1)
        if whole_context:
            new_tokens = architecture.max_positions
        return CacheGeometry(
            n_layers=architecture.n_decoder_layers,
            n_heads=architecture.n_heads,
            d_head=architecture.d_head or architecture.d_model // architecture.n_heads,
            target_tokens=1 + new_tokens,
            source_tokens=max_input_tokens,
            precision=precision,
        )

    @property
    def auto(self) -> bool:
        return not self.cache_tokens and not self.cache_bytes

    def plan(
        self, geometry: CacheGeometry, provider: str, auto_bytes: int = CPU_CACHE_BYTES, fixed_cross: bool = False
    ) -> CachePlan:
        """How the cache's positions are shared: the self-attention buffers take as many rows of the longest
        answer as there would be if each source were as long as it (or as the longest source, where
        shorter), leaving room for one longest source; the cross buffers the rest (at most the longest
        source for every row). Shorter answers make shorter rows, so more of them (up to max_running), and
        shorter sources take less of the cross buffers' room. fixed_cross (CUDA graphs, whose bindings are
        fixed): every row its own room for the longest answer and the longest source."""
        budget = self.cache_tokens or (self.cache_bytes or auto_bytes) // geometry.bytes_per_token
        most = self.max_running or DEFAULT_MAX_RUNNING[provider]
        target, source = geometry.target_tokens, geometry.source_tokens
        if fixed_cross:
            rows = min(budget // (target + source), most)
            return CachePlan(rows, rows * source, rows * target)
        longest = min(budget // (target + min(source, target)), (budget - source) // target, most)
        self_tokens = max(longest, 0) * target
        rows = min(self_tokens // min(TARGET_STEP, target), most)
        return CachePlan(rows, min(budget - self_tokens, rows * source), self_tokens)


@dataclass(frozen=True)
class CachePlan:
    """A generation cache's shape: the most self-attention rows it holds (running sequences and beams, at
    the shortest answers), the source positions its cross buffers hold in all and the decoder positions its
    self-attention buffers hold in all (runner/cache_memory.py CacheMemory.cross_tokens, self_tokens)."""

    rows: int
    cross_tokens: int
    self_tokens: int


@dataclass(frozen=True, kw_only=True)
class LoadSettings:
    sessions: SessionSettings
    precision: str  # auto | fp32 | fp16 | int8: auto is fp16 on CUDA, fp32 on the CPU
    batching: BatchLimits
    measure_split_cost: bool = False  # each model's split_cost_tokens measured at warm-up (engine/call_price.py)
    cache: CacheSettings
    attention_maps: bool  # load each model's attention-map graph
    tag_alignment: bool = False  # load each seq2seq model's attention-map graph where it has one
    fault_threshold: int  # consecutive failed model calls before a model is unhealthy
    cuda_graphs: bool = False  # greedy decode steps in buckets, captured as CUDA graphs on CUDA
    sampling_graph: str = "auto"  # on | off | auto (on CUDA): sampled rows drawn by a graph on the device
    input_caps: dict[str, int] = field(default_factory=dict)  # model name -> most input tokens (its own if less)
    max_attention_bytes: int = 0  # an embedding batch's attention scores, at most (0: no budget)

    def samples_on_device(self, provider: str) -> bool:
        return self.sampling_graph == "on" or (self.sampling_graph == "auto" and provider == CUDA)

    def precision_on(self, provider: str) -> str:
        if self.precision != "auto":
            return self.precision
        return "fp16" if provider == CUDA else "fp32"


@dataclass
class OpenedModel:
    """A model directory's parts, made in the model thread, before anything runs on the event loop."""

    files: ModelFiles
    tokenizer: object
    provider: str
    architecture: Architecture
    special: SpecialTokens
    runner: EmbeddingRunner | Seq2SeqRunner
    attention: AttentionMapsRunner | CrossAttentionRunner | None  # the latter: for tag alignment only
    geometry: CacheGeometry | None = None
    cache: CachePlan | None = None
    word_alignment: WordAlignmentRunner | None = None  # a speech model's, for word timestamps
    sampler: SamplingGraph | None = None  # a seq2seq model's token choice on the device (sampling_graph)
    voice_activity: VoiceActivityRunner | None = None  # a speech model's, to cut recordings at their silences


def _loads_attention(model_dir: Path, settings: LoadSettings) -> bool:
    """Whether a model's attention-map graph is loaded: for the Attention RPC (every model), or to place a
    translation's tags (a seq2seq model whose directory has one)."""
    if settings.attention_maps:
        return True
    if not settings.tag_alignment:
        return False
    manifest = read_manifest(model_dir)
    present = (
        ATTENTION_FILE in manifest["sha256"] and (Path(model_dir) / ATTENTION_FILE).is_file()
    )  # a kit leaves it out
    return manifest["task"] == "seq2seq" and present


def open_model(model_dir: Path, settings: LoadSettings, provider: str, seq2seq_left: int) -> OpenedModel:
    """Open and verify one model directory and create its sessions (blocking: run it in the model thread).
    seq2seq_left: seq2seq models not loaded yet, this one included, among which an automatic cache size
    shares the device memory that is left."""
    precision = settings.precision_on(provider)
    files = open_model_dir(model_dir, attention=_loads_attention(model_dir, settings), precision=precision)
    cap = settings.input_caps.get(files.name)
    if cap is not None and cap < files.config.max_input_tokens:  # the operator's cap (model_max_input_tokens)
        files = dataclasses.replace(files, config=dataclasses.replace(files.config, max_input_tokens=cap))
        log.info("model %s: inputs capped at %d tokens (model_max_input_tokens)", files.name, cap)
    c = files.config
    architecture = Architecture(
        c.n_encoder_layers,
        c.n_decoder_layers,
        c.n_heads,
        c.d_model,
        c.max_positions,
        c.vocab_size,
        c.d_head,
        c.embedding_dim,
    )
    geometry = None
    if files.task == "seq2seq":
        # An audio encoder's source is a window's positions, not tokens.
        audio = c.encoder_input == "log_mel"
        source = c.max_source_positions if audio else c.max_input_tokens
        geometry = settings.cache.geometry(architecture, source, precision, whole_context=audio)
        if not (settings.cache.auto and provider == CUDA):  # a cache of no row serves nothing: refuse early
            _plan(files.name, settings, geometry, provider)
    tokenizer = load_model_tokenizer(c, files.tokenizer)
    special = SpecialTokens(c.bos_id, c.eos_id, c.pad_id, frozenset(tokenizer.special_ids))
    # Threads and spinning the settings leave open, by the model's size (runner/sessions.py threads_for).
    sessions = threads_for(settings.sessions, provider, 4 * c.d_model * c.d_model + 2 * c.d_model * c.d_ff)
    spinning = "on" if sessions.spinning else "off"
    log.info("model %s: %d ONNX Runtime thread(s) a call, spinning %s", files.name, sessions.intra_op_threads, spinning)
    encoder = create_session(files.encoder, sessions, provider)
    plan = None
    if files.task == "embedding":
        states = ("last_hidden_state",) if c.head == "none" else ()  # token embeddings, unpooled (TEI's embed_all)
        runner = EmbeddingRunner(encoder, pooled_output(c.head), extra_outputs(c) + states)
    else:
        # The cache graphs run seldom and copy rows: one thread, asleep between calls.
        small = dataclasses.replace(settings.sessions, intra_op_threads=1, spinning=False)
        cache_graphs = {role: create_session(files.graphs[role], small, provider) for role in CACHE_GRAPHS}
        cache_graphs["cache_resize"] = create_session(one_buffer_resize(files.graphs["cache_resize"]), small, provider)
        decoder, captures = _decoder_session(files, sessions, provider, settings.cuda_graphs)
        runner = Seq2SeqRunner(encoder, decoder, cache_graphs, c.n_decoder_layers, precision, captures)
        left = cuda_memory() if provider == CUDA and settings.cache.auto else None
        auto_bytes = int(left[0] * DEVICE_SHARE / seq2seq_left) if left else CPU_CACHE_BYTES
        plan = _plan(files.name, settings, geometry, provider, auto_bytes)
    # The side graphs' threads sleep between calls instead of spinning: they run seldom, and spinning threads
    # of an idle session would take cycles from the serving graphs' next calls.
    quiet = dataclasses.replace(sessions, spinning=False)
    attention = None
    if files.attention is not None and settings.attention_maps:
        attention = AttentionMapsRunner(create_session(files.attention, quiet, provider), files.task)
    elif files.attention is not None:  # for tag alignment only: the one layer it reads
        graph, cut = cut_graph(files.attention, alignment_layer(architecture.n_decoder_layers))
        attention = CrossAttentionRunner(create_session(graph, quiet, provider), cut)
    word_alignment = None
    if files.word_alignment is not None:
        word_alignment = WordAlignmentRunner(create_session(files.word_alignment, quiet, provider))
    voice_activity = None
    if files.voice_activity is not None:  # a small LSTM, run frame after frame: on the CPU, one thread
        tiny = dataclasses.replace(settings.sessions, intra_op_threads=1, spinning=False)
        voice_activity = VoiceActivityRunner(create_session(files.voice_activity, tiny, CPU))
    parts = (files, tokenizer, provider_of(encoder), architecture, special, runner, attention, geometry, plan)
    sampler = None
    if files.task == "seq2seq" and settings.samples_on_device(provider):
        sampler = _sampler(files, quiet, provider)
    opened = OpenedModel(*parts, word_alignment=word_alignment, voice_activity=voice_activity, sampler=sampler)
    graphs = precision if files.graph_set == precision else f"{precision}: {files.graph_set}, for this CPU"
    log.info("model %s (%s, %s) loaded from %s on %s", files.name, files.task, graphs, model_dir, opened.provider)
    return opened


def _sampler(files: ModelFiles, sessions: SessionSettings, provider: str) -> SamplingGraph | None:
    """The token choice graph on the model's device; None (the host draws) where ONNX Runtime cannot place it
    there."""
    try:
        session = create_session(sampling_graph().SerializeToString(), sessions, provider)
    except ProviderError as error:
        log.warning("model %s: sampled rows are drawn on the host: %s", files.name, error)
        return None
    return SamplingGraph(session, DEVICE_TYPES[provider], files.config.suppressed_ids)


def _decoder_session(files: ModelFiles, sessions: SessionSettings, provider: str, cuda_graphs: bool):
    """The decoder's session, and whether it captures CUDA graphs: asked for on CUDA, and granted by ONNX
    Runtime (which refuses a graph with nodes it cannot capture: then the steps run eager, and say so)."""
    if not cuda_graphs:
        return create_session(files.decoder, sessions, provider), False
    if provider != CUDA:
        log.warning("model %s: --cuda-graphs on the CPU captures nothing: steps are only bucketed", files.name)
        return create_session(files.decoder, sessions, provider), False
    try:
        return create_session(files.decoder, sessions, provider, cuda_graph=True), True
    except ProviderError:
        raise  # no CUDA at all: nothing to fall back to
    except Exception as error:  # ONNX Runtime's own exception types: Fail, RuntimeException, ...
        log.warning(
            "model %s: ONNX Runtime cannot capture its decoder as CUDA graphs (%s): steps run eager", files.name, error
        )
        return create_session(files.decoder, sessions, provider), False


def _plan(
    name: str, settings: LoadSettings, geometry: CacheGeometry, provider: str, auto_bytes: int = CPU_CACHE_BYTES
) -> CachePlan:
    plan = settings.cache.plan(geometry, provider, auto_bytes, fixed_cross=settings.cuda_graphs)
    if plan.self_tokens < geometry.target_tokens:
        raise ValueError(
            f"model {name}: the generation cache holds no row: one takes {geometry.bytes_per_row} bytes "
            f"({geometry.tokens_per_row} tokens); raise kv_cache_bytes or kv_cache_tokens, or lower max_new_tokens"
        )
    return plan
