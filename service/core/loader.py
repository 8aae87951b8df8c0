"""Loading the served models: each model directory opened and verified (checksums), its sessions created,
its config read once into frozen dataclasses, its batcher or scheduler started, and the whole model
warmed up through its serving path before it is served. The only reader of a model's config."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from modeldir.files import CACHE_GRAPHS, ModelFiles, extra_outputs, open_model_dir, pooled_output, read_manifest
from modeldir.language_tokenizer import languages_of, load_model_tokenizer

from ..engine.batcher import BatchLimits, EmbeddingBatcher
from ..engine.generation_cache import MIN_SOURCE_CAPACITY, GenerationCache
from ..engine.scheduler import Scheduler
from ..engine.steps import SchedulerSettings
from ..engine.token_choice import GenerationRules, TokenChoice
from ..ops.metrics import Metrics
from ..runner.attention_maps import AttentionMapsRunner
from ..runner.cache_memory import CacheGeometry
from ..runner.decode_buckets import DecodeBuckets
from ..runner.device_memory import cuda_memory, cuda_memory_used
from ..runner.embedding import EmbeddingRunner
from ..runner.seq2seq import Seq2SeqRunner
from ..runner.sessions import (
    CPU,
    CUDA,
    ProviderError,
    SessionSettings,
    create_session,
    provider_of,
    resolve_device,
    threads_for,
)
from .attention_maps import AttentionGraph, select_layers
from .health import ModelHealth, probe, run_encoder
from .registry import ModelRegistry
from .served_models import (
    Architecture,
    CrossEncoderModel,
    EmbeddingModel,
    GenerationDefaults,
    GenerationLimits,
    Seq2SeqModel,
    ServedModel,
    SpecialTokens,
)

log = logging.getLogger("attnserve.loader")


CPU_CACHE_BYTES = 1 << 30  # what kv_cache_bytes 0 (auto) gives a model on the CPU
# What max_running 0 (the device's default) allows in one decode step: on the CPU, where a step's compute
# grows with its rows, 64 (the one default before each device had its own); on CUDA as many as the cache
# holds, up to vLLM's default on large GPUs (a step's cost there is mostly fixed: to be measured there).
DEFAULT_MAX_RUNNING = {CPU: 64, CUDA: 1024}
DEVICE_SHARE = 0.9  # of the device memory left once every session is loaded, that auto gives the caches


@dataclass(frozen=True)
class CacheSettings:
    """How big each seq2seq model's generation cache is, and how many may wait for it."""

    max_new_tokens: int
    cache_bytes: int  # 0: auto (on CUDA, what the device has left; on the CPU, CPU_CACHE_BYTES)
    cache_tokens: int  # when > 0, instead of cache_bytes
    max_running: int  # 0: the device's default (DEFAULT_MAX_RUNNING)
    max_waiting: int

    def geometry(self, architecture: Architecture, max_input_tokens: int, precision: str) -> CacheGeometry:
        # The start token takes one of the model's positions.
        new_tokens = min(self.max_new_tokens, architecture.max_positions - 1)
        return CacheGeometry(
            n_layers=architecture.n_decoder_layers,
            n_heads=architecture.n_heads,
            d_head=architecture.d_model // architecture.n_heads,
            target_tokens=1 + new_tokens,
            source_tokens=max_input_tokens,
            precision=precision,
        )

    @property
    def auto(self) -> bool:
        return not self.cache_tokens and not self.cache_bytes

    def rows(self, geometry: CacheGeometry, provider: str, auto_bytes: int = CPU_CACHE_BYTES) -> int:
        if self.cache_tokens:
            rows = self.cache_tokens // geometry.tokens_per_row
        else:
            rows = (self.cache_bytes or auto_bytes) // geometry.bytes_per_row
        return min(rows, self.max_running or DEFAULT_MAX_RUNNING[provider])


@dataclass(frozen=True)
class LoadSettings:
    sessions: SessionSettings
    precision: str  # auto | fp32 | fp16 | int8: auto is fp16 on CUDA, fp32 on the CPU
    batching: BatchLimits
    cache: CacheSettings
    attention_maps: bool  # load each model's attention-map graph
    fault_threshold: int  # consecutive failed model calls before a model is unhealthy
    cuda_graphs: bool = False  # greedy decode steps in buckets, captured as CUDA graphs on CUDA
    input_caps: dict[str, int] = field(default_factory=dict)  # model name -> most input tokens (its own if less)
    max_attention_bytes: int = 0  # an embedding batch's attention scores, at most (0: no budget)

    def precision_on(self, provider: str) -> str:
        if self.precision != "auto":
            return self.precision
        return "fp16" if provider == CUDA else "fp32"


@dataclass
class _Opened:
    """A model directory's parts, made in the model thread, before anything runs on the event loop."""

    files: ModelFiles
    tokenizer: object
    provider: str
    architecture: Architecture
    special: SpecialTokens
    runner: EmbeddingRunner | Seq2SeqRunner
    attention: AttentionMapsRunner | None
    geometry: CacheGeometry | None = None
    rows: int = 0


def _open(model_dir: Path, settings: LoadSettings, provider: str, seq2seq_left: int) -> _Opened:
    """Open and verify one model directory and create its sessions (blocking: run it in the model thread).
    seq2seq_left: seq2seq models not loaded yet, this one included, among which an automatic cache size
    shares the device memory that is left."""
    precision = settings.precision_on(provider)
    files = open_model_dir(model_dir, attention=settings.attention_maps, precision=precision)
    cap = settings.input_caps.get(files.name)
    if cap is not None and cap < files.config.max_input_tokens:  # the operator's cap (model_max_input_tokens)
        files = dataclasses.replace(files, config=dataclasses.replace(files.config, max_input_tokens=cap))
        log.info("model %s: inputs capped at %d tokens (model_max_input_tokens)", files.name, cap)
    c = files.config
    architecture = Architecture(
        c.n_encoder_layers, c.n_decoder_layers, c.n_heads, c.d_model, c.max_positions, c.vocab_size
    )
    geometry = None
    if files.task == "seq2seq":
        geometry = settings.cache.geometry(architecture, c.max_input_tokens, precision)
        if not (settings.cache.auto and provider == CUDA):  # a cache of no row serves nothing: refuse early
            _rows(files.name, settings.cache, geometry, provider)
    tokenizer = load_model_tokenizer(c, files.tokenizer)
    special = SpecialTokens(c.bos_id, c.eos_id, c.pad_id, frozenset(tokenizer.special_ids))
    # Threads and spinning the settings leave open, by the model's size (runner/sessions.py threads_for).
    sessions = threads_for(settings.sessions, provider, 4 * c.d_model * c.d_model + 2 * c.d_model * c.d_ff)
    spinning = "on" if sessions.spinning else "off"
    log.info("model %s: %d ONNX Runtime thread(s) a call, spinning %s", files.name, sessions.intra_op_threads, spinning)
    encoder = create_session(files.encoder, sessions, provider)
    rows = 0
    if files.task == "embedding":
        states = ("last_hidden_state",) if c.head == "none" else ()  # token embeddings, unpooled (TEI's embed_all)
        runner = EmbeddingRunner(encoder, pooled_output(c.head), extra_outputs(c) + states)
    else:
        # The cache graphs run seldom and copy rows: one thread, asleep between calls.
        small = dataclasses.replace(settings.sessions, intra_op_threads=1, spinning=False)
        cache_graphs = {role: create_session(files.graphs[role], small, provider) for role in CACHE_GRAPHS}
        decoder, captures = _decoder_session(files, sessions, provider, settings.cuda_graphs)
        runner = Seq2SeqRunner(encoder, decoder, cache_graphs, c.n_decoder_layers, precision, captures)
        left = cuda_memory() if provider == CUDA and settings.cache.auto else None
        auto_bytes = int(left[0] * DEVICE_SHARE / seq2seq_left) if left else CPU_CACHE_BYTES
        rows = _rows(files.name, settings.cache, geometry, provider, auto_bytes)
    attention = None
    if settings.attention_maps:
        # Its threads sleep between calls instead of spinning: the graph runs seldom, and spinning threads
        # of an idle session would take cycles from the serving graphs' next calls.
        quiet = dataclasses.replace(sessions, spinning=False)
        attention = AttentionMapsRunner(create_session(files.attention, quiet, provider), files.task)
    opened = _Opened(files, tokenizer, provider_of(encoder), architecture, special, runner, attention, geometry, rows)
    graphs = precision if files.graph_set == precision else f"{precision}: {files.graph_set}, for this CPU"
    log.info("model %s (%s, %s) loaded from %s on %s", files.name, files.task, graphs, model_dir, opened.provider)
    return opened


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


def _rows(
    name: str, cache: CacheSettings, geometry: CacheGeometry, provider: str, auto_bytes: int = CPU_CACHE_BYTES
) -> int:
    rows = cache.rows(geometry, provider, auto_bytes)
    if rows < 1:
        raise ValueError(
            f"model {name}: the generation cache holds no row: one takes {geometry.bytes_per_row} bytes "
            f"({geometry.tokens_per_row} tokens); raise kv_cache_bytes or kv_cache_tokens, or lower max_new_tokens"
        )
    return rows


def _warm_up_in_thread(model: ServedModel) -> None:
    """First calls allocate and plan: run them before the first request does (in the model thread). An
    embedding model's runner at the shortest and longest input; the attention-map graph once, checking
    that its rows are distributions."""
    if model.batched:
        run_encoder(model, ["warm up"])
        run_encoder(model, ["warm up " * model.max_input_tokens] * 2)
    if model.attention is not None:
        ids = model.tokenizer.encode(["warm up"])[0].ids
        target = [model.special.bos] if model.task == "seq2seq" else None
        maps = model.attention.runner.run(ids, target, select_layers(model, []))
        for weights in maps.weights.values():
            if not np.allclose(weights.sum(-1), 1, atol=1e-4):
                raise RuntimeError(f"model {model.name}: the attention-map graph gives rows that do not sum to 1")


def _build(opened: _Opened, settings: LoadSettings, executor: Executor, metrics: Metrics, on_health_change):
    """The typed model with its loop (on the event loop): batcher or scheduler, metrics, health."""
    files, c = opened.files, opened.files.config
    model_metrics = metrics.for_model(files.name, files.task, attention=opened.attention is not None)
    health = ModelHealth(settings.fault_threshold, on_health_change)
    common = dict(
        name=files.name, provider=opened.provider, opset=files.manifest["opset"], architecture=opened.architecture,
        max_input_tokens=c.max_input_tokens, special=opened.special, tokenizer=opened.tokenizer, health=health,
        languages=languages_of(c), language_pair=c.language_pair, metrics=model_metrics,
        attention=AttentionGraph(opened.attention, executor, model_metrics) if opened.attention else None,
    )  # fmt: skip
    metrics.model_info.labels(files.name, files.task, opened.provider, str(files.manifest["opset"])).set(1)
    if files.task == "embedding":
        budget, precision = settings.max_attention_bytes, settings.precision_on(opened.provider)
        limits = settings.batching.with_attention_budget(budget, c.n_heads, precision)
        batcher = EmbeddingBatcher(
            opened.runner.run, c.pad_id, limits, executor,
            files.name, model_metrics,
            make_run_options=opened.runner.run_options, health=health,
            release_memory=opened.runner.release_memory if settings.sessions.cpu_arena or opened.provider == CUDA else None,
        )  # fmt: skip
        model_metrics.watch_queue(lambda: batcher.queue_depth)
        if c.head == "classifier":
            return CrossEncoderModel(**common, runner=opened.runner, batcher=batcher, normalize_by_default=False,
                                     prompts={}, default_prompt=None, labels=c.labels,
                                     score_activation=c.score_activation)  # fmt: skip
        return EmbeddingModel(
            **common,
            runner=opened.runner,
            batcher=batcher,
            normalize_by_default=c.normalize,
            prompts=dict(c.prompts),
            default_prompt=c.default_prompt_name,
            int8_ranges={out: np.array(r, np.float32) for out, r in files.manifest.get("int8_ranges", {}).items()},
            colbert=c.colbert,
            pooling="splade" if c.sparse_head == "splade" else c.pooling,
        )
    g = opened.geometry
    memory = opened.runner.cache_memory(g, opened.rows, MIN_SOURCE_CAPACITY)
    cache = GenerationCache(memory, shrinks=not settings.cuda_graphs)
    buckets = None
    if settings.cuda_graphs:
        buckets = DecodeBuckets(opened.runner, memory, c.pad_id, files.name)
        sizes = ", ".join(str(b.rows) for b in buckets.buckets)
        log.info(
            "model %s: greedy decode steps in buckets of %s rows (captured: %s)",
            files.name,
            sizes,
            "yes" if buckets.capture else "no",
        )
    rules = GenerationRules(
        eos_id=c.eos_id, suppressed_ids=c.suppressed_ids, forced_eos=c.forced_eos,
        renormalize_logits=c.renormalize_logits,
    )  # fmt: skip
    scheduling = SchedulerSettings(
        bos_id=c.bos_id, pad_id=c.pad_id, max_waiting=settings.cache.max_waiting,
        encode_split_cost=settings.batching.split_cost_tokens, name=files.name,
    )  # fmt: skip
    scheduler = Scheduler(
        scheduling, opened.runner, cache, opened.tokenizer, TokenChoice(rules), executor, model_metrics,
        health, opened.runner.release_memory if settings.sessions.cpu_arena or opened.provider == CUDA else None,
        buckets,
    )  # fmt: skip
    model_metrics.watch_queue(lambda: len(scheduler.waiting))
    model_metrics.watch_cache(lambda: cache.usage_ratio, cache.capacity_tokens)
    defaults = GenerationDefaults(c.num_beams, c.length_penalty, c.early_stopping)
    limits = GenerationLimits(max_new_tokens=opened.geometry.target_tokens - 1, cache_rows=cache.rows)
    model_metrics.watch_cache_bytes(lambda: memory.nbytes)
    log.info(
        "model %s: generation cache of %d rows (%d MB at most, on %s), up to %d new tokens and %d source tokens "
        "a row", files.name, cache.rows, cache.rows * g.bytes_per_row >> 20, memory.device, g.target_tokens - 1,
        g.source_tokens,
    )  # fmt: skip
    return Seq2SeqModel(**common, runner=opened.runner, scheduler=scheduler, defaults=defaults, limits=limits)


def _task(model_dir: Path) -> str | None:
    try:
        return read_manifest(model_dir).get("task")
    except Exception:
        return None  # open_model_dir will say what is wrong


async def load_models(
    model_dirs: list[Path], settings: LoadSettings, executor: Executor, metrics: Metrics, on_health_change
) -> ModelRegistry:
    """Every model loaded, started and warm, or an error (ValueError, ModelFilesError, ProviderError) that
    says which and why. Call on the event loop that will serve them."""
    loop = asyncio.get_running_loop()
    provider = resolve_device(settings.sessions.device)
    if provider == CUDA:
        metrics.watch_device_memory("cuda:0", cuda_memory_used)
    seq2seq = sum(_task(model_dir) == "seq2seq" for model_dir in model_dirs)
    opened = []
    for model_dir in model_dirs:
        opened.append(await loop.run_in_executor(executor, _open, model_dir, settings, provider, seq2seq))
        seq2seq -= opened[-1].files.task == "seq2seq"
    unknown = sorted(set(settings.input_caps) - {o.files.name for o in opened})
    if unknown:
        served = ", ".join(o.files.name for o in opened)
        raise ValueError(f"model_max_input_tokens names models not served: {', '.join(unknown)} (served: {served})")
    longest = max(o.files.config.max_input_tokens for o in opened)
    if longest > settings.batching.max_batch_tokens:
        raise ValueError(
            f"max_batch_tokens {settings.batching.max_batch_tokens} is less than the longest input a model "
            f"takes ({longest} tokens): such an input could never run"
        )
    registry = ModelRegistry([_build(o, settings, executor, metrics, on_health_change) for o in opened])
    for model in registry.models.values():
        await loop.run_in_executor(executor, _warm_up_in_thread, model)
        if model.batched:
            model.batcher.start()
        else:
            model.scheduler.start()
            await probe(model, executor)  # a first generation through the serving path
    return registry
