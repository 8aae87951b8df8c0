"""Every Prometheus metric of the server, defined once.

Labels take only bounded values: RPC names, status code names, the names of served models (an unknown
model in a request is counted under model=""), fixed stage names. No request ids, no user text.
"""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Callable

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, ProcessCollector

from .inference_extension_metrics import NAMES, InferenceExtensionNames

# Seconds: sub-millisecond decode steps up to minute-long generations.
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    20.0,
    30.0,
    60.0,
)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TOKEN_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536)

# Stages of a model call: "embed" (an embedding batch), "encode" (the encoder pass of newly admitted
# generations), "decode" (one decoder step of all running sequences), "attention" (an Attention call's
# attention-map graph, on servers that serve it), "word_alignment" (a window's word timestamps).


class Metrics:
    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        self._children: dict[tuple, object] = {}
        self.requests = Counter(
            "attnserve_requests",
            "Calls answered, by RPC, model and status code.",
            ["rpc", "model", "code"],
            registry=registry,
        )
        self.request_duration = Histogram(
            "attnserve_request_duration_seconds",
            "Time from a call's arrival to its answer (its last message).",
            ["rpc", "model"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.queue_duration = Histogram(
            "attnserve_queue_duration_seconds",
            "Time an input (a text to embed, a sequence to generate) waited before the model took it.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.batch_size = Histogram(
            "attnserve_batch_size",
            "Inputs in one model call.",
            ["model", "stage"],
            buckets=SIZE_BUCKETS,
            registry=registry,
        )
        self.batch_tokens = Histogram(
            "attnserve_batch_tokens",
            "Token positions in one model call, padding included.",
            ["model", "stage"],
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.inference_duration = Histogram(
            "attnserve_inference_duration_seconds",
            "Time of one model call.",
            ["model", "stage"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.queue_depth = Gauge(
            "attnserve_queue_depth",
            "Inputs waiting for the model: texts to embed, or sequences for a cache row.",
            ["model"],
            registry=registry,
        )
        self.streams_stalled = Counter(
            "attnserve_streams_stalled",
            "Streamed calls given up because their client took no message for stream_write_timeout.",
            ["rpc", "model"],
            registry=registry,
        )
        self.requests_running = Gauge(
            "attnserve_requests_running",
            "Calls in progress.",
            ["model"],
            registry=registry,
            multiprocess_mode="livesum",  # the API processes' calls together (--api-processes)
        )
        self.time_to_first_token = Histogram(
            "attnserve_time_to_first_token_seconds",
            "Time from a generation's arrival to its first token.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.inter_token_latency = Histogram(
            "attnserve_inter_token_latency_seconds",
            "Time between two tokens of one sequence.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.prompt_tokens = Counter(
            "attnserve_prompt_tokens", "Tokens of inputs fed to the model.", ["model"], registry=registry
        )
        self.generated_tokens = Counter("attnserve_generated_tokens", "Tokens generated.", ["model"], registry=registry)
        self.audio_seconds = Counter(
            "attnserve_audio_seconds", "Seconds of audio taken in to transcribe.", ["model"], registry=registry
        )
        self.real_time_factor = Histogram(
            "attnserve_transcription_real_time_factor",
            "Seconds spent decoding a recording's windows per second of its audio.",
            ["model"],
            buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0),
            registry=registry,
        )
        self.windows_per_step = Histogram(
            "attnserve_transcription_windows_per_step",
            "Audio windows decoded together in one decode step (each a beam search, or one sample of a fallback).",
            ["model"],
            buckets=SIZE_BUCKETS,
            registry=registry,
        )
        self.kv_cache_usage = Gauge(
            "attnserve_kv_cache_usage_ratio",
            "Share of the generation cache reserved by running sequences.",
            ["model"],
            registry=registry,
        )
        self.kv_cache_capacity = Gauge(
            "attnserve_kv_cache_capacity_tokens",
            "Token positions the generation cache holds.",
            ["model"],
            registry=registry,
        )
        self.transfer_bytes = Counter(
            "attnserve_device_transfer_bytes",
            "Bytes between host and device by the generation runner's calls.",
            ["model", "stage", "direction"],
            registry=registry,
        )
        self.kv_cache_bytes = Gauge(
            "attnserve_kv_cache_bytes",
            "Memory of the generation cache's buffers, on the model's device.",
            ["model"],
            registry=registry,
        )
        self.device_memory_used = Gauge(
            "attnserve_device_memory_used_bytes",
            "Memory in use on the GPU (the whole device, all processes).",
            ["device"],
            registry=registry,
        )
        # The process's own figures (resident memory, CPU seconds, open files), under the same prefix.
        ProcessCollector(namespace="attnserve", registry=registry)
        gauges = {source: getattr(self, source) for _, source in NAMES.values()}
        registry.register(InferenceExtensionNames(gauges))
        self.split_cost = Gauge(
            "attnserve_split_cost_tokens",
            "What one more model call costs in padded tokens, by which batches are cut into calls of similar "
            "lengths (measured at warm-up, or --split-cost-tokens).",
            ["model"],
            registry=registry,
        )
        self.model_info = Gauge(
            "attnserve_model_info",
            "A served model (always 1).",
            ["model", "task", "provider", "opset"],
            registry=registry,
        )
        self.build_info = Info("attnserve_build", "The attnserve build.", registry=registry)
        self.build_info.info(_versions())

    def watch_device_memory(self, device: str, used: Callable[[], float]) -> None:
        """Device memory in use, read when scraped (only where the models run on a GPU)."""
        self.device_memory_used.labels(device).set_function(used)

    def child(self, metric, *labels: str):
        """metric.labels(*labels), kept: labels() checks and locks on every call, and a call's record asks
        for four. The label values are bounded (methods, served models, status codes)."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def for_model(self, model: str, task: str, side_graphs: tuple[str, ...] = ()) -> ModelMetrics:
        return ModelMetrics(self, model, task, side_graphs)


def observe_all(histogram: Histogram, values: np.ndarray) -> None:
    """Many values at once, as that many observe() calls would count them: prometheus_client keeps each
    observation in the first bucket whose bound is at or above it (and cumulates when scraped), and
    adds it to the sum. Its per-value loop would cost a step of 256 rows 256 Python calls."""
    if values.size <= 4:  # a small step: the loop is cheaper than the array operations
        for value in values.tolist():
            histogram.observe(value)
        return
    bounds = np.asarray(histogram._upper_bounds)
    counts = np.bincount(np.searchsorted(bounds, values, side="left"), minlength=len(bounds))
    histogram._sum.inc(float(values.sum()))
    for i in np.flatnonzero(counts).tolist():
        histogram._buckets[i].inc(int(counts[i]))


class ModelMetrics:
    """The metrics of one model, its label bound: what the batcher and the scheduler report to."""

    def __init__(self, metrics: Metrics, model: str, task: str, side_graphs: tuple[str, ...] = ()):
        """Only the series a model of this task has are created (an embedding model has no cache); side_graphs:
        the stages of the side graphs it loaded (attention, word_alignment)."""
        self.metrics, self.model = metrics, model
        self._queue = metrics.queue_duration.labels(model)
        self._prompt = metrics.prompt_tokens.labels(model)
        self._batches = {
            stage: (
                metrics.batch_size.labels(model, stage),
                metrics.batch_tokens.labels(model, stage),
                metrics.inference_duration.labels(model, stage),
            )
            for stage in (("embed",) if task == "embedding" else ("encode", "decode")) + side_graphs
        }
        if task == "seq2seq":
            self._transfers = {
                (stage, direction): metrics.transfer_bytes.labels(model, stage, direction)
                for stage in ("encode", "decode")
                for direction in ("sent", "fetched")
            }
            self._ttft = metrics.time_to_first_token.labels(model)
            self._itl = metrics.inter_token_latency.labels(model)
            self._generated = metrics.generated_tokens.labels(model)

    def model_call(self, stage: str, inputs: int, tokens: int, seconds: float) -> None:
        size, token_count, duration = self._batches[stage]
        size.observe(inputs)
        token_count.observe(tokens)
        duration.observe(seconds)

    def transferred(self, stage: str, sent: int, fetched: int) -> None:
        """Bytes a model call sent to the device and fetched from it."""
        self._transfers[stage, "sent"].inc(sent)
        self._transfers[stage, "fetched"].inc(fetched)

    def queued(self, seconds: float) -> None:
        self._queue.observe(seconds)

    def queued_all(self, seconds: np.ndarray) -> None:
        """The queue times of a model call's inputs, at once."""
        observe_all(self._queue, seconds)

    def first_token(self, seconds: float) -> None:
        self._ttft.observe(seconds)

    def between_tokens_all(self, seconds: np.ndarray) -> None:
        """The time since each row's last token, for all rows of a step at once."""
        observe_all(self._itl, seconds)

    def prompt(self, tokens: int) -> None:
        self._prompt.inc(tokens)

    def generated(self, tokens: int) -> None:
        self._generated.inc(tokens)

    def audio_heard(self, seconds: float) -> None:
        """Audio taken in by a speech model (whose series are made at its first)."""
        self.metrics.audio_seconds.labels(self.model).inc(seconds)

    def transcribed(self, audio_seconds: float, seconds: float) -> None:
        """A recording's windows all decoded, in `seconds`."""
        if audio_seconds > 0:
            self.metrics.real_time_factor.labels(self.model).observe(seconds / audio_seconds)

    def windows_in_step(self, windows: int) -> None:
        self.metrics.windows_per_step.labels(self.model).observe(windows)

    def watch_queue(self, depth: Callable[[], float]) -> None:
        """The queue depth, read when scraped."""
        self.metrics.queue_depth.labels(self.model).set_function(depth)

    def watch_cache(self, usage: Callable[[], float], capacity_tokens: int) -> None:
        self.metrics.kv_cache_usage.labels(self.model).set_function(usage)
        self.metrics.kv_cache_capacity.labels(self.model).set(capacity_tokens)

    def watch_cache_bytes(self, nbytes: Callable[[], float]) -> None:
        self.metrics.kv_cache_bytes.labels(self.model).set_function(nbytes)


def _versions() -> dict:
    versions = {"python": platform.python_version()}
    for package in ("attnserve", "onnxruntime", "onnxruntime-gpu", "grpcio"):
        try:
            versions[package.replace("-", "_")] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    versions["version"] = versions.pop("attnserve", "unknown")
    return versions
