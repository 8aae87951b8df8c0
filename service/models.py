"""The models a server serves: loaded from verified model directories, warmed up, found by name."""

from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .attention_maps import AttentionMaps, AttentionRunner, select_layers
from .batcher import BatchLimits, EmbeddingBatcher
from .errors import invalid, not_found
from .greedy import greedy_decode_onnx
from .kv_cache import CacheGeometry, KVCache
from .metrics import Metrics, ModelMetrics
from .model_files import ModelFiles, open_model_dir
from .runner import EncoderRunner, Seq2SeqRunner, SessionSettings, create_session, provider_of
from .scheduler import Scheduler
from .tokenizer import MarianTokenizer, TextTokenizer, load_tokenizer, pad_batch

log = logging.getLogger("attnserve.models")


class ModelHealth:
    """Consecutive failed model calls. Past the threshold the model is unhealthy; any call that passes
    (a request's, or a probe's) makes it healthy again."""

    def __init__(self, threshold: int, on_change):
        self.threshold, self.on_change = threshold, on_change
        self.failures = 0
        self.healthy = True

    def succeeded(self) -> None:
        self.failures = 0
        if not self.healthy:
            self.healthy = True
            self.on_change()

    def failed(self) -> None:
        self.failures += 1
        if self.healthy and self.failures >= self.threshold:
            self.healthy = False
            self.on_change()


@dataclass
class ServedModel:
    files: ModelFiles
    tokenizer: TextTokenizer | MarianTokenizer
    provider: str
    encoder: EncoderRunner | None = None  # embedding models
    batcher: EmbeddingBatcher | None = None  # embedding models, once started
    seq2seq: Seq2SeqRunner | None = None  # seq2seq models
    scheduler: Scheduler | None = None  # seq2seq models, once started
    metrics: ModelMetrics | None = None  # once started
    health: ModelHealth | None = None  # once started
    attention_runner: AttentionRunner | None = None  # with attention maps on
    attention: AttentionMaps | None = None  # with attention maps on, once started

    @property
    def name(self) -> str:
        return self.files.name

    @property
    def task(self) -> str:
        return self.files.task

    @property
    def config(self) -> dict:
        return self.files.config

    @property
    def max_input_tokens(self) -> int:
        return self.config["max_input_tokens"]

    @property
    def normalize_by_default(self) -> bool:
        return bool(self.config.get("normalize", True))


def load_model(model_dir: Path, settings: SessionSettings, attention: bool = False) -> ServedModel:
    """Open, verify and warm up one model directory (blocking: call it in a thread); with attention, its
    attention-map graph too."""
    files = open_model_dir(model_dir, attention=attention)
    tokenizer = load_tokenizer(
        files.config.get("tokenizer", "tokenizers"), files.tokenizer, files.config["max_input_tokens"]
    )
    encoder_session = create_session(files.encoder, settings)
    model = ServedModel(files, tokenizer, provider_of(encoder_session))
    if files.task == "embedding":
        model.encoder = EncoderRunner(encoder_session)
        _warm_up_encoder(model)
    else:
        decoder_session = create_session(files.decoder, settings)
        model.seq2seq = Seq2SeqRunner(encoder_session, decoder_session, files.config["n_decoder_layers"])
    if attention:
        # Its threads sleep between calls instead of spinning: the graph runs seldom, and spinning threads
        # of an idle session would take cycles from the serving graphs' next calls.
        quiet = dataclasses.replace(settings, spinning=False)
        model.attention_runner = AttentionRunner(create_session(files.attention, quiet), files.task)
        _warm_up_attention(model)
    log.info("model %s (%s) loaded from %s on %s", files.name, files.task, model_dir, model.provider)
    return model


def probe(model: ServedModel) -> None:
    """A small real call through every graph of the model (blocking: run it in the model thread)."""
    if model.task == "embedding":
        _warm_up_encoder(model, longest=False)
        return
    ids, mask = pad_batch([model.tokenizer.encode(["1"])[0].ids], model.config["pad_id"])
    c = model.config
    greedy_decode_onnx(model.seq2seq.encoder, model.seq2seq.decoder, ids, mask, c["bos_id"], 1, c["n_decoder_layers"])


def _warm_up_encoder(model: ServedModel, longest: bool = True) -> None:
    """First calls allocate and plan: run them before the first request does, short and longest."""
    texts = [("warm up", 1), ("warm up " * model.max_input_tokens, 2)] if longest else [("warm up", 1)]
    for text, repeat in texts:
        ids, mask = pad_batch([e.ids for e in model.tokenizer.encode([text] * repeat)], model.config["pad_id"])
        vectors = model.encoder.embed(ids, mask)
        if not np.isfinite(vectors).all():
            raise RuntimeError(f"model {model.name}: warm-up produced non-finite embeddings")


def _warm_up_attention(model: ServedModel) -> None:
    """One call, so that the first request does not pay for planning, and a broken graph fails the start."""
    ids = model.tokenizer.encode(["warm up"])[0].ids
    target = [model.config["bos_id"]] if model.task == "seq2seq" else None
    maps = model.attention_runner.run(ids, target, select_layers(model.config, [], model.name))
    for weights in maps.weights.values():
        if not np.allclose(weights.sum(-1), 1, atol=1e-4):
            raise RuntimeError(f"model {model.name}: the attention-map graph gives rows that do not sum to 1")


class ModelRegistry:
    def __init__(self, models: list[ServedModel]):
        self.models = {}
        self.defaults: dict[str, ServedModel] = {}
        for model in models:
            if model.name in self.models:
                raise ValueError(f"two model directories are both named {model.name!r}")
            self.models[model.name] = model
            self.defaults.setdefault(model.task, model)

    def get(self, name: str, task: str, rpc: str) -> ServedModel:
        """The model called `name` (empty: the default for the task), which must be of `task`."""
        if not name:
            if task not in self.defaults:
                raise not_found(f"model: no {task} model is served, so {rpc} has no default")
            return self.defaults[task]
        model = self.models.get(name)
        if model is None:
            raise not_found(f"model: {name!r} is not served here (served: {', '.join(sorted(self.models))})")
        if model.task != task:
            article = "an" if model.task[0] in "aeiou" else "a"
            raise invalid(f"model: {name!r} is {article} {model.task} model; {rpc} needs one of task {task!r}")
        return model

    def find(self, name: str) -> ServedModel:
        """Any model by name (empty: the first one loaded)."""
        if not name:
            return next(iter(self.models.values()))
        if name not in self.models:
            raise not_found(f"model: {name!r} is not served here (served: {', '.join(sorted(self.models))})")
        return self.models[name]

    def start(
        self, limits: BatchLimits, generation: GenerationLimits, executor: Executor, metrics: Metrics,
        fault_threshold: int, on_health_change,
    ) -> None:  # fmt: skip
        """Start the batching and scheduling loops (on the running event loop)."""
        for model in self.models.values():
            model.metrics = metrics.for_model(model.name, model.task, attention=model.attention_runner is not None)
            if model.attention_runner is not None:
                model.attention = AttentionMaps(model.attention_runner, executor, model.metrics)
            model.health = ModelHealth(fault_threshold, on_health_change)
            metrics.model_info.labels(model.name, model.task, model.provider, str(model.files.manifest["opset"])).set(1)
            if model.task == "embedding":
                model.batcher = EmbeddingBatcher(
                    model.encoder.embed,
                    model.config["pad_id"],
                    limits,
                    executor,
                    model.name,
                    model.metrics,
                    make_run_options=ort.RunOptions,
                    health=model.health,
                )
                model.batcher.start()
                model.metrics.watch_queue(lambda batcher=model.batcher: batcher.queue_depth)
            else:
                c = model.config
                cache = KVCache(generation.geometry(c), generation.rows(c))
                model.scheduler = Scheduler(
                    model.seq2seq,
                    cache,
                    model.tokenizer,
                    c["bos_id"],
                    c["eos_id"],
                    c["pad_id"],
                    executor,
                    generation.max_waiting,
                    model.name,
                    model.metrics,
                    model.health,
                    suppressed_ids=tuple(c.get("suppressed_ids", ())),
                    forced_eos=c.get("forced_eos", False),
                    renormalize_logits=c.get("renormalize_logits", False),
                    encode_split_cost=limits.split_cost_tokens,
                )
                model.scheduler.start()
                model.metrics.watch_queue(lambda scheduler=model.scheduler: len(scheduler.waiting))
                model.metrics.watch_cache(lambda cache=cache: cache.usage_ratio, cache.capacity_tokens)
                if model.seq2seq.provider != "CPUExecutionProvider":
                    log.warning(
                        "model %s: the generation cache lives in host memory, so each decode step copies it to "
                        "%s and back (docs/kv_cache.md, 'On the GPU')", model.name, model.seq2seq.provider,
                    )  # fmt: skip
                log.info(
                    "model %s: generation cache of %d rows (%d MB), up to %d new tokens and %d source tokens a row",
                    model.name, cache.rows, cache.rows * cache.geometry.bytes_per_row >> 20,
                    cache.geometry.target_tokens - 1, cache.geometry.source_tokens,
                )  # fmt: skip

    @property
    def healthy(self) -> bool:
        return all(m.health is None or m.health.healthy for m in self.models.values())

    async def stop(self, error: Exception) -> None:
        """Stop the loops; calls still waiting on them get `error`."""
        for model in self.models.values():
            if model.batcher:
                await model.batcher.stop(error)
            if model.scheduler:
                await model.scheduler.stop(error)


@dataclass(frozen=True)
class GenerationLimits:
    """How big each seq2seq model's cache is, and how many may wait for it."""

    max_new_tokens: int
    cache_bytes: int
    cache_tokens: int  # when > 0, instead of cache_bytes
    max_running: int
    max_waiting: int

    def new_tokens(self, config: dict) -> int:
        """The most new tokens a request may ask for: the start token takes one position."""
        return min(self.max_new_tokens, config["max_positions"] - 1)

    def geometry(self, config: dict) -> CacheGeometry:
        return CacheGeometry(
            n_layers=config["n_decoder_layers"],
            n_heads=config["n_heads"],
            d_head=config["d_model"] // config["n_heads"],
            target_tokens=1 + self.new_tokens(config),
            source_tokens=config["max_input_tokens"],
        )

    def rows(self, config: dict) -> int:
        geometry = self.geometry(config)
        if self.cache_tokens:
            rows = self.cache_tokens // geometry.tokens_per_row
        else:
            rows = self.cache_bytes // geometry.bytes_per_row
        return min(rows, self.max_running)
