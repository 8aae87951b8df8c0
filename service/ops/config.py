"""ServerConfig: every server setting, its default and its documentation (each field's help text is its
line in `attnserve serve --help`), and the checks between settings. config_sources.py reads it once from
CLI flags and ATTNSERVE_* environment variables."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from .listen import HOST_HELP

ENV_PREFIX = "ATTNSERVE_"
# What an Attention answer holds besides its weights (tokens, ids, shapes), at most; a bound, not a guess.
ATTENTION_RESPONSE_OVERHEAD = 64 << 10
MAX_API_PROCESSES = 64


def _setting(default, help: str, choices: tuple | None = None):
    return field(default=default, metadata={"help": help, "choices": choices})


class ConfigError(ValueError):
    """Settings that contradict each other or are out of range."""


@dataclass(frozen=True)
class ServerConfig:
    models: tuple[Path, ...] = _setting(
        tuple(
            Path("build/models", name)
            for name in ("minilm", "numbers", "numbers-multilingual", "numbers-reranker", "numbers-language")
        ),
        "model directories to serve (exported, with manifest.json), or directories of them (KServe's "
        "/mnt/models); the first of each task is its default",
    )
    host: str = _setting("[::]", HOST_HELP)
    port: int = _setting(50051, "gRPC port; 0 picks a free one")
    metrics_port: int = _setting(9464, "HTTP port of /metrics, /healthz and /readyz; 0 picks a free one")
    http_port: int = _setting(
        8080, "HTTP port of the OpenAI-compatible API (/v1/embeddings, /v1/completions); 0 picks a free one; -1: off"
    )
    device: str = _setting(
        "auto", "execution provider: cuda, cpu, or auto (CUDA when its provider really loads)", ("auto", "cuda", "cpu")
    )
    precision: str = _setting(
        "auto",
        "graphs to serve: fp32, fp16 or int8 (exported with attnserve export --precision fp16 int8), or auto: "
        "fp16 on CUDA, fp32 on the CPU (int8: the CPU's fast choice, within the quality bars in the README; "
        "7-bit weights on x86 CPUs without VNNI, full 8 bits elsewhere)",
        ("auto", "fp32", "fp16", "int8"),
    )
    gpu_mem_limit: int = _setting(
        0, "bytes each CUDA session's memory arena may grow to (activations; the KV cache is apart); 0: no limit"
    )
    cpu_mem_arena: bool = _setting(
        True,
        "ONNX Runtime's CPU memory arena for the serving graphs: faster calls, but the process keeps its peak "
        "memory (measured: docs/benchmarks.md); off, memory goes back after each call",
    )
    intra_op_threads: int = _setting(
        0,
        "ONNX Runtime threads per model call; 0: by the model's size and device (one for a small model's "
        "operators and on CUDA, else one per available core; measured: docs/benchmarks.md)",
    )
    graph_optimization: str = _setting(
        "all", "ONNX Runtime graph optimisation level", ("disable", "basic", "extended", "all")
    )
    ort_spinning: bool | None = _setting(
        None,
        "let ONNX Runtime's threads spin between operators instead of sleeping: a decode step runs ~150 "
        "small operators, and waking sleeping threads for each costs more than the spinning takes from the "
        "event loop; unset: on where several threads share a model's calls, off where one does "
        "(measured: docs/benchmarks.md)",
    )
    api_processes: int = _setting(
        0,
        "processes that run the front doors (gRPC, HTTP), tokenizing and detokenizing, sharing their ports; the "
        "models run in one engine process beside them, which serves /metrics. 1: one process runs everything; "
        "0: by cores (one per two cores of this process's CPU affinity, up to 8; a container's CPU limit does not "
        "narrow the affinity: set it there. 1 on 2 cores, where a second does not pay: "
        'docs/benchmarks.md, "The doors on every core")',
    )
    max_batch_tokens: int = _setting(16384, "embedding batch budget in tokens, padding included")
    max_batch_attention_bytes: int = _setting(
        1 << 30,
        "embedding batch budget of attention scores, in bytes (texts x longest text squared x heads x the "
        "element's size): long texts batch with fewer others, and a text over it runs alone; 0: no budget",
    )
    model_max_input_tokens: str = _setting(
        "",
        "per-model input caps, NAME=TOKENS[,NAME=TOKENS...]: the model's inputs are cut (or refused) at the "
        "smaller of this and its own limit (bge-m3 takes 8,192 tokens; its attention grows with their square), "
        "and a seq2seq model's cache rows hold only that many source tokens",
    )
    max_batch_size: int = _setting(32, "most texts in one embedding batch")
    max_delay_ms: float = _setting(2.0, "longest wait for more texts before a batch that is not full runs")
    split_cost_tokens: int = _setting(
        -1,
        "what one more model call costs, in padded tokens: a batch is cut into calls of similar lengths "
        "where that saves more padding than this per extra call (0 cuts the most, a large value never); "
        "-1: each model's, measured at warm-up (its encoder's call of 1 token against one of 32)",
    )
    max_queue_inputs: int = _setting(2048, "texts waiting for a batch, over all calls; beyond: RESOURCE_EXHAUSTED")
    max_client_batch_size: int = _setting(32, "most inputs in one Embed or Tokenize call")
    max_new_tokens: int = _setting(
        256, "most tokens one Generate call may ask for, and the default (capped by a model's positions)"
    )
    max_beams: int = _setting(8, "most beams one Generate call may ask for (each beam takes a cache row)")
    kv_cache_bytes: int = _setting(
        0,
        "generation cache per seq2seq model, in bytes; 0: the device's default (on CUDA, 90%% of the device memory "
        "left once the models are loaded, shared by the seq2seq models; on the CPU, 1 GiB)",
    )
    kv_cache_tokens: int = _setting(0, "generation cache per seq2seq model in tokens; when > 0, instead of bytes")
    max_running_sequences: int = _setting(
        0,
        "most sequences in one decode step (cache rows are capped by it); 0: the device's default (64 on the CPU; "
        "on CUDA, as many as the cache holds, up to 1024)",
    )
    cuda_graphs: bool = _setting(
        False,
        "on CUDA, run each greedy decode step as a CUDA graph, one captured per bucket of rows (1, 2, 4, ... "
        "up to the cache's rows; the rows beyond a step's are padding), which launches a step's few hundred "
        "kernels at once; off until the GPU check measures it (docs/benchmarks.md). On the CPU nothing is "
        "captured: the steps are only bucketed, which costs their padding",
    )
    sampling_graph: str = _setting(
        "auto",
        "where sampled rows' tokens are drawn: on, in a small ONNX graph on the model's device, so that their "
        "logits never leave it; off, on the host (numpy); auto: on on CUDA, off on the CPU, where the host is the "
        'faster (docs/benchmarks.md, "Sampled tokens on the device"). Rows under a model\'s logit rules '
        "(Whisper's) or scored, and greedy rows with a penalty, are drawn on the host either way",
        choices=("auto", "on", "off"),
    )
    data_dir: str = _setting(
        "",
        "where the server keeps what must outlive a restart (DeepL's glossaries, in glossaries.sqlite3; document "
        "jobs, in documents.sqlite3 and documents/, run again after a restart); empty: kept in memory (documents "
        "in a temporary directory; with --api-processes over 1, both in a temporary directory the processes "
        "share), lost when the server stops",
    )
    document_max_bytes: int = _setting(
        30 << 20, "most bytes of one uploaded document (/v2/document, /translate_file); DeepL takes 30 MB"
    )
    document_max_characters: int = _setting(
        1_000_000, "most characters of one document's text (/v2/document, /translate_file)"
    )
    translation_max_texts: int = _setting(
        50, "most texts of one translation call (Translate, /v2/translate, /translate); DeepL takes 50"
    )
    translation_unserved_confidence: float = _setting(
        0.9,
        "a text whose language is left to detection, detected among every language the detector knows as one "
        "no served model reads with at least this confidence, is refused (naming the language) rather than "
        "translated from the nearest served one; above 1: never refused",
    )
    translation_max_characters: int = _setting(
        128 << 10,
        "most characters of one translation call's texts together (Translate, /v2/translate, /translate); the "
        "default takes any call DeepL takes (a request of at most 128 KiB)",
    )
    translation_max_sentences: int = _setting(
        512,
        "most sentences one translation call's texts are cut into, together (each is a generation of its own, "
        "so keep this under max_waiting_sequences)",
    )
    rerank_max_documents: int = _setting(1000, "most documents one Rerank or /v1/rerank call ranks")
    max_upload_bytes: int = _setting(
        25 * 1024 * 1024, "largest audio upload to transcribe (OpenAI's limit); its HTTP body may be this large"
    )
    max_audio_seconds: float = _setting(4 * 3600.0, "longest audio one transcription call takes, in seconds")
    max_waiting_sequences: int = _setting(1024, "Generate calls waiting for cache space; beyond: RESOURCE_EXHAUSTED")
    max_concurrent_requests: int = _setting(512, "calls in progress at once; beyond: RESOURCE_EXHAUSTED at once")
    max_message_bytes: int = _setting(4 * 1024 * 1024, "largest request or response message")
    drain_seconds: float = _setting(30.0, "on SIGTERM, how long calls in flight may take to finish")
    stream_messages_per_second: float = _setting(
        -1.0,
        "the messages a second all streamed answers together aim at: each stream's messages are at least "
        "(streams open / this) seconds apart, but never more than a quarter second, and the tokens that come "
        "meanwhile go in the next one. 0: a message for every token, merged only while the stream is behind. "
        "-1 (the default): 0 on a GPU; 1000 on the CPU, where a message's CPU (about 80 microseconds) is taken "
        "from the model's and 1000 gave 1.8-2x the tokens/s of 0 at 32 streams and more (docs/benchmarks.md)",
    )
    stream_write_timeout: float = _setting(
        30.0,
        "a streamed answer whose client takes no message for this long is given up, on every door: gRPC "
        "GenerateStream and KServe ModelStreamInfer end with DEADLINE_EXCEEDED, and the HTTP API's server-sent "
        "events (/v1/completions with stream) reset the connection (their 200 is already sent); counted in "
        "attnserve_streams_stalled_total",
    )
    attention_maps: bool = _setting(
        False,
        "serve the Attention RPC: load each model's attention-map graph (onnx/attention.onnx, a second copy "
        "of its weights) at start; off, Attention answers FAILED_PRECONDITION and nothing more is loaded",
    )
    tag_alignment: bool = _setting(
        True,
        "place a translation's inline tags (tag_handling, format=html) through its word alignment: load each "
        "seq2seq model's attention-map graph where its directory has one (float32, a second copy of its "
        "weights; none over 2 GiB); off, or a model without one: tags are placed by their share of the text",
    )
    attention_max_input_tokens: int = _setting(
        128, "most tokens of an Attention call's input, and most decoder positions (start token included)"
    )
    attention_max_response_bytes: int = _setting(
        3 << 20, "most bytes of attention weights in one Attention answer, checked before any model work"
    )
    attention_max_concurrent: int = _setting(2, "Attention calls in progress at once; beyond: RESOURCE_EXHAUSTED")
    fault_threshold: int = _setting(
        3, "consecutive failed model calls after which health turns NOT_SERVING until a probe call passes"
    )
    probe_seconds: float = _setting(5.0, "how often a model that failed is probed with a small call")
    tls_cert: str = _setting("", "PEM certificate chain: serve gRPC over TLS (with tls_key)")
    tls_key: str = _setting("", "PEM private key of tls_cert")
    tls_client_ca: str = _setting("", "PEM CA bundle: require client certificates signed by it (mutual TLS)")
    auth_token_file: str = _setting(
        "",
        "file of bearer tokens, one a line: calls must send 'authorization: Bearer <token>' on the gRPC and HTTP "
        "ports (health exempt)",
    )
    log_level: str = _setting("info", "logging level", ("debug", "info", "warning", "error"))
    access_log_share: float = _setting(
        1.0,
        "share of answered calls that get an access-log line (0 to 1, spread evenly); refused and failed calls "
        "always get theirs, and the metrics count every call",
    )
    log_format: str = _setting(
        "json", "json: one JSON object a line (one per call too); text: for people", ("json", "text")
    )

    def __post_init__(self) -> None:
        positive = [
            "max_batch_tokens",
            "max_batch_size",
            "max_queue_inputs",
            "max_client_batch_size",
            "max_concurrent_requests",
            "max_message_bytes",
            "max_new_tokens",
            "max_waiting_sequences",
            "max_beams",
            "attention_max_input_tokens",
            "attention_max_response_bytes",
            "attention_max_concurrent",
            "translation_max_texts",
            "translation_max_characters",
            "translation_max_sentences",
            "rerank_max_documents",
            "max_upload_bytes",
            "max_audio_seconds",
            "document_max_bytes",
            "document_max_characters",
        ]
        problems = [f"{name} must be > 0, not {getattr(self, name)}" for name in positive if getattr(self, name) <= 0]
        if not 0.0 <= self.access_log_share <= 1.0:
            problems.append(f"access_log_share must be from 0 to 1, not {self.access_log_share}")
        if self.split_cost_tokens < 0 and self.split_cost_tokens != -1:
            problems.append(f"split_cost_tokens must be >= 0, or -1 (measured), not {self.split_cost_tokens}")
        if self.stream_messages_per_second < 0 and self.stream_messages_per_second != -1:
            problems.append(
                f"stream_messages_per_second must be >= 0, or -1 (by device), not {self.stream_messages_per_second}"
            )
        non_negative = [
            "intra_op_threads",
            "max_delay_ms",
            "drain_seconds",
            "kv_cache_tokens",
            "kv_cache_bytes",
            "gpu_mem_limit",
            "max_running_sequences",
            "max_batch_attention_bytes",
        ]
        for name in non_negative:
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0, not {getattr(self, name)}")
        if self.translation_unserved_confidence <= 0:
            problems.append(f"translation_unserved_confidence must be > 0, not {self.translation_unserved_confidence}")
        for name in ("stream_write_timeout", "fault_threshold", "probe_seconds"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0, not {getattr(self, name)}")
        room = self.max_message_bytes - ATTENTION_RESPONSE_OVERHEAD
        if self.attention_maps and self.attention_max_response_bytes > room:
            problems.append(
                f"attention_max_response_bytes {self.attention_max_response_bytes} must leave "
                f"{ATTENTION_RESPONSE_OVERHEAD} bytes of max_message_bytes {self.max_message_bytes} for the tokens: "
                f"at most {room}"
            )
        if bool(self.tls_cert) != bool(self.tls_key):
            problems.append("tls_cert and tls_key go together")
        try:
            input_caps(self.model_max_input_tokens)
        except ValueError as error:
            problems.append(str(error))
        if self.tls_client_ca and not self.tls_cert:
            problems.append("tls_client_ca (mutual TLS) needs tls_cert and tls_key")
        for name in ("tls_cert", "tls_key", "tls_client_ca", "auth_token_file"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                problems.append(f"{name}: {path} is not a readable file")
        for name in ("port", "metrics_port"):
            if not 0 <= getattr(self, name) <= 65535:
                problems.append(f"{name} must be 0..65535, not {getattr(self, name)}")
        if not -1 <= self.http_port <= 65535:
            problems.append(f"http_port must be 0..65535, or -1 (off), not {self.http_port}")
        fixed = [
            (name, getattr(self, name)) for name in ("port", "metrics_port", "http_port") if getattr(self, name) > 0
        ]
        for i, (name, port) in enumerate(fixed):
            for other, other_port in fixed[i + 1 :]:
                if port == other_port:
                    problems.append(f"{name} and {other} are both {port}")
        if not self.models:
            problems.append("models: at least one model directory is needed")
        if not 0 <= self.api_processes <= MAX_API_PROCESSES:
            problems.append(f"api_processes must be 0..{MAX_API_PROCESSES} (0: by cores), not {self.api_processes}")
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            if choices and getattr(self, f.name) not in choices:
                problems.append(f"{f.name} must be one of {', '.join(choices)}, not {getattr(self, f.name)!r}")
        if problems:
            raise ConfigError("; ".join(problems))

    @property
    def max_delay_seconds(self) -> float:
        return self.max_delay_ms / 1000.0

    @property
    def front_processes(self) -> int:
        """api_processes, 0 resolved by the cores this process may use."""
        if self.api_processes:
            return self.api_processes
        return max(1, min(len(os.sched_getaffinity(0)) // 2, 8))


def input_caps(text: str) -> dict[str, int]:
    """model_max_input_tokens as model name -> tokens ("" -> {}); ValueError naming what is wrong."""
    caps = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, tokens = part.partition("=")
        if not name.strip() or not tokens.strip().isdigit() or int(tokens) < 1:
            raise ValueError(f"model_max_input_tokens: {part!r} is not NAME=TOKENS (TOKENS >= 1)")
        caps[name.strip()] = int(tokens)
    return caps
