"""Loading the served models: each model directory opened (core/models/opening.py), its config read once
into frozen dataclasses, its batcher or scheduler started, and the whole model warmed up through its
serving path before it is served. With model_opening.py, the only reader of a model's config."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from pathlib import Path

import numpy as np

from modeldir.files import read_manifest
from modeldir.language_tokenizer import languages_of

from ...engine.batcher import EmbeddingBatcher
from ...engine.generation_cache import MIN_SOURCE_CAPACITY, GenerationCache
from ...engine.repetition_rules import repetition_rules
from ...engine.scheduler import Scheduler
from ...engine.steps import SchedulerSettings
from ...engine.token_choice import GenerationRules, TokenChoice
from ...ops.metrics import Metrics
from ...runner.cross_attention import CrossAttentionRunner, alignment_layer
from ...runner.decode_buckets import DecodeBuckets
from ...runner.device_memory import cuda_memory_used
from ...runner.sessions import CUDA, resolve_device
from ..attention.maps import select_layers
from .health import ModelHealth
from .opening import LoadSettings, OpenedModel, open_model
from .registry import ModelRegistry
from .served_models import (
    GenerationDefaults,
    GenerationLimits,
    ServedCrossEncoder,
    ServedEmbeddingModel,
    ServedModel,
    ServedSeq2SeqModel,
    ServedSpeechModel,
)
from .side_graphs import SideGraphCalls

log = logging.getLogger("attnserve.loader")


def _warm_up_in_thread(model: ServedModel) -> None:
    """First calls allocate and plan: run them before the first request does (in the model thread). An
    embedding model's runner at the shortest and longest input; the attention-map graph (or its cut for
    tag alignment) once, checking that its rows are distributions."""
    model.warm_up()
    if model.attention is not None:
        ids = model.tokenizer.encode(["warm up"])[0].ids
        target = [model.special.bos] if model.task == "seq2seq" else None
        runner = model.attention.runner
        if isinstance(runner, CrossAttentionRunner):  # loaded for tag alignment: its one layer
            layer = alignment_layer(model.architecture.n_decoder_layers)
            every = runner.run_batch([(ids, target, layer)])
        else:
            every = runner.run(ids, target, select_layers(model, [])).weights.values()
        for weights in every:
            if not np.allclose(weights.sum(-1), 1, atol=1e-4):
                raise RuntimeError(f"model {model.name}: the attention-map graph gives rows that do not sum to 1")


def _build(opened: OpenedModel, settings: LoadSettings, executor: Executor, metrics: Metrics, on_health_change):
    """The typed model with its loop (on the event loop): batcher or scheduler, metrics, health."""
    files, c = opened.files, opened.files.config
    side_graphs = ("attention",) * (opened.attention is not None) + ("word_alignment",) * (
        opened.word_alignment is not None
    )
    model_metrics = metrics.for_model(files.name, files.task, side_graphs)
    health = ModelHealth(settings.fault_threshold, on_health_change)
    common = dict(
        name=files.name,
        provider=opened.provider,
        precision=settings.precision_on(opened.provider),
        opset=files.manifest["opset"],
        architecture=opened.architecture,
        max_input_tokens=c.max_input_tokens,
        special=opened.special,
        tokenizer=opened.tokenizer,
        health=health,
        languages=languages_of(c),
        language_pair=c.language_pair,
        metrics=model_metrics,
        attention=SideGraphCalls(opened.attention, executor, model_metrics) if opened.attention else None,
    )
    metrics.model_info.labels(files.name, files.task, opened.provider, str(files.manifest["opset"])).set(1)
    if files.task == "embedding":
        budget, precision = settings.max_attention_bytes, settings.precision_on(opened.provider)
        limits = settings.batching.with_attention_budget(budget, c.n_heads, precision)
        batcher = EmbeddingBatcher(
            opened.runner.run,
            c.pad_id,
            limits,
            executor,
            name=files.name,
            metrics=model_metrics,
            make_run_options=opened.runner.run_options,
            health=health,
            release_memory=opened.runner.release_memory
            if settings.sessions.cpu_arena or opened.provider == CUDA
            else None,
        )
        model_metrics.watch_queue(lambda: batcher.queue_depth)
        if c.head == "classifier":
            return ServedCrossEncoder(
                **common,
                runner=opened.runner,
                batcher=batcher,
                normalize_by_default=False,
                prompts={},
                default_prompt=None,
                labels=c.labels,
                score_activation=c.score_activation,
            )
        return ServedEmbeddingModel(
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
    plan = opened.cache
    memory = opened.runner.cache_memory(g, plan.rows, MIN_SOURCE_CAPACITY, plan.cross_tokens, plan.self_tokens)
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
        eos_id=c.eos_id,
        suppressed_ids=c.suppressed_ids,
        forced_eos=c.forced_eos,
        renormalize_logits=c.renormalize_logits,
    )
    scheduling = SchedulerSettings(
        bos_id=c.bos_id,
        pad_id=c.pad_id,
        max_waiting=settings.cache.max_waiting,
        encode_split_cost=settings.batching.split_cost_tokens,
        name=files.name,
    )
    scheduler = Scheduler(
        scheduling,
        opened.runner,
        cache,
        opened.tokenizer,
        TokenChoice(rules, opened.sampler),
        executor=executor,
        metrics=model_metrics,
        health=health,
        release_memory=opened.runner.release_memory if settings.sessions.cpu_arena or opened.provider == CUDA else None,
        buckets=buckets,
    )
    model_metrics.watch_queue(lambda: len(scheduler.waiting))
    model_metrics.watch_cache(lambda: cache.usage_ratio, cache.capacity_tokens)
    repetition = repetition_rules(c.bos_id, c.eos_id, c.no_repeat_ngram_size, c.min_length)
    defaults = GenerationDefaults(c.num_beams, c.length_penalty, c.early_stopping, c.forced_bos_id, repetition)
    limits = GenerationLimits(max_new_tokens=g.target_tokens - 1, cache_rows=cache.rows_at_longest)
    model_metrics.watch_cache_bytes(lambda: memory.nbytes)
    log.info(
        "model %s: generation cache of %d rows of up to %d new tokens (up to %d rows of shorter answers) and %d "
        "source positions for sources of up to %d tokens (%d MB at most, on %s)",
        files.name,
        cache.rows_at_longest,
        g.target_tokens - 1,
        cache.rows,
        memory.cross_tokens,
        g.source_tokens,
        cache.capacity_tokens * g.bytes_per_token >> 20,
        memory.device,
    )
    seq2seq = dict(**common, runner=opened.runner, scheduler=scheduler, defaults=defaults, limits=limits)
    if c.whisper is not None:
        word_alignment = None
        if opened.word_alignment is not None:
            word_alignment = SideGraphCalls(opened.word_alignment, executor, model_metrics, "word_alignment")
        return ServedSpeechModel(
            **seq2seq,
            whisper=c.whisper,
            n_mels=c.n_mels,
            source_positions=c.max_source_positions,
            word_alignment=word_alignment,
            voice_activity=opened.voice_activity,
        )
    return ServedSeq2SeqModel(**seq2seq)


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
        opened.append(await loop.run_in_executor(executor, open_model, model_dir, settings, provider, seq2seq))
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
        if model.split_cost is not None:
            if settings.measure_split_cost:
                try:
                    await loop.run_in_executor(executor, model.measure_split_cost)
                except Exception as error:
                    raise RuntimeError(f"model {model.name}: timing its encoder's calls failed: {error}") from error
            how = "measured" if settings.measure_split_cost else "--split-cost-tokens"
            log.info("model %s: one more encoder call costs %d padded tokens (%s)", model.name, model.split_cost, how)
            metrics.split_cost.labels(model.name).set(model.split_cost)
        model.start()
        await model.probe(executor)  # a first call through the serving path
    return registry
