"""The serving core: what every front door calls. Each call's lifecycle (calls.py) and admission, the
loaded models, one object per capability (embeddings, generation, translation, transcription, reranking
and classification, tokenize, models, attention maps), and the server's lifecycle (load, health probes,
drain, stop). It knows no transport: plain dataclasses in and out, domain errors raised."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path

from modeldir.languages import language_tag

from ..errors import ServiceError, Unavailable, invalid
from ..ops.call_record import AccessLog
from ..ops.metrics import Metrics
from .attention.maps import AttentionLimits, AttentionMaps
from .calls.admission import Admission
from .calls.lifecycle import Call, Refusal, Refused, Status, StatusTable, refused, run_call
from .calls.tokenization import Tokenization
from .embedding.embeddings import EmbeddingService
from .generation.generation import Generation
from .generation.streaming import StreamPolicy
from .info import ModelInfo, ServerLimits, TranslationLanguages
from .models.loader import load_models
from .models.opening import LoadSettings
from .models.registry import ModelRegistry
from .ranking.cross_encoding import CrossEncoding
from .transcription.audio_decoding import AudioLimits
from .transcription.transcription import TranscriptionService
from .translation.detection import Detected
from .translation.document_jobs import JOB_STATUSES, DocumentJobs, DocumentLimits
from .translation.glossaries import GlossaryStore
from .translation.routing import LanguageRouter
from .translation.translation import TranslateRequest, TranslationLimits, TranslationService

log = logging.getLogger("attnserve.core")


@dataclass(frozen=True, kw_only=True)
class CoreSettings:
    model_dirs: tuple[Path, ...]
    load: LoadSettings
    max_concurrent_requests: int
    max_client_batch_size: int
    max_beams: int
    attention: AttentionLimits
    probe_seconds: float  # how often an unhealthy model is probed
    stream_write_timeout: float  # how long a streamed message may wait for its client
    translation_characters: int = 128 << 10  # all texts of one Translate call together
    translation_texts: int = 50  # texts of one Translate call
    unserved_confidence: float = 0.9  # a detected language no model reads, this sure: refused
    data_dir: Path | None = None  # what outlives a restart (glossaries, document jobs); None: in memory
    document_max_bytes: int = 30 << 20  # of one uploaded document
    document_max_characters: int = 1_000_000  # of one document's text
    translation_sentences: int = 512  # the sentences one Translate call's texts are cut into
    rerank_documents: int = 1000  # documents of one Rerank call
    audio: AudioLimits = AudioLimits(max_upload_bytes=25 << 20, max_audio_seconds=4 * 3600.0)  # of one upload
    stream_messages: float = -1.0  # messages a second all streams aim at (0: every token; -1: by device)
    access_log_share: float = 1.0  # of answered calls, the share that get an access-log line


TOKENIZE_THREADS = 2  # long texts are cut into tokens in these, off the event loop


# Where an API process's core gets its models (--api-processes): (metrics, on_health_change) -> a registry.
OpenRegistry = Callable[[Metrics, Callable[[], None]], Awaitable[ModelRegistry]]


class ServingCore:
    def __init__(self, settings: CoreSettings, metrics: Metrics, open_registry: OpenRegistry | None = None):
        """open_registry: where the models come from; None: loaded here (load_models), run by this process."""
        self.settings, self.metrics, self.open_registry = settings, metrics, open_registry
        self.access_log = AccessLog(settings.access_log_share)
        # One thread runs every model call: on a CPU, concurrent calls would only fight over the cores.
        self.model_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        self.tokenize_executor = ThreadPoolExecutor(max_workers=TOKENIZE_THREADS, thread_name_prefix="tokenize")
        self.admission = Admission(settings.max_concurrent_requests)
        self.streams = StreamPolicy(settings.stream_write_timeout, metrics)
        self.registry: ModelRegistry | None = None  # once the models are loaded and warm
        self.embeddings: EmbeddingService | None = None
        self.generation: Generation | None = None
        self.tokenization: Tokenization | None = None
        self.attention_maps: AttentionMaps | None = None
        self.routing: LanguageRouter | None = None
        self.translation: TranslationService | None = None
        self.glossaries = GlossaryStore(settings.data_dir)  # open before any model: a bad --data-dir stops the start
        document_limits = DocumentLimits(
            max_bytes=settings.document_max_bytes,
            max_characters=settings.document_max_characters,
            chunk_texts=settings.translation_texts,
            chunk_characters=settings.translation_characters,
        )
        # An API process's core leaves the jobs a stop cut off to its engine process (split/engine_process.py).
        self.documents = DocumentJobs(settings.data_dir, document_limits, resume=open_registry is None)
        self._document_worker: asyncio.Task | None = None
        self.cross_encoding: CrossEncoding | None = None
        self.transcription: TranscriptionService | None = None
        self._readiness_listeners: list[Callable[[bool], None]] = []
        self._probes: asyncio.Task | None = None

    def ready(self) -> bool:
        """Models loaded and healthy, and not draining: what every front door's health reports."""
        return self.registry is not None and not self.admission.draining and self.registry.healthy

    def on_readiness_change(self, listener: Callable[[bool], None]) -> None:
        """listener(ready) is called on the event loop whenever ready() may have changed."""
        self._readiness_listeners.append(listener)

    def _readiness_changed(self) -> None:
        ready = self.ready()
        for listener in self._readiness_listeners:
            listener(ready)

    def _health_changed(self) -> None:
        """A model turned unhealthy or healthy again (called on the event loop)."""
        for model in self.registry.models.values():
            if not model.health.healthy:
                log.error(
                    "model %s: %d model calls failed in a row: health NOT_SERVING", model.name, model.health.failures
                )
        self._readiness_changed()

    async def load(self) -> None:
        """Load, start and warm every model; then calls are admitted."""
        s = self.settings
        if self.open_registry is not None:
            registry = await self.open_registry(self.metrics, self._health_changed)
        else:
            registry = await load_models(
                list(s.model_dirs), s.load, self.model_executor, self.metrics, self._health_changed
            )
        self.tokenization = Tokenization(registry, self.tokenize_executor, s.max_client_batch_size)
        self.embeddings = EmbeddingService(registry, self.tokenization, s.max_client_batch_size)
        self.routing = LanguageRouter(registry, s.translation_characters, s.unserved_confidence)
        self.generation = Generation(
            registry, self.tokenization, s.max_beams, s.max_client_batch_size, s.stream_messages, self.routing
        )
        self.attention_maps = AttentionMaps(registry, self.tokenization, s.attention)
        self.cross_encoding = CrossEncoding(registry, self.tokenization, s.rerank_documents, s.max_client_batch_size)
        limits = TranslationLimits(
            max_texts=s.translation_texts,
            max_characters=s.translation_characters,
            max_sentences=s.translation_sentences,
        )
        self.translation = TranslationService(self.routing, self.tokenization, limits, s.max_beams)
        self.transcription = TranscriptionService(registry, s.audio, self.tokenize_executor, s.max_client_batch_size)
        self.registry = registry
        self.admission.loaded = True
        loop = asyncio.get_running_loop()
        self._probes = loop.create_task(self._probe_unhealthy_models(), name="probes")
        jobs = self.documents.run(self._translate_for_job, self._document_language, self.glossaries.terms_for)
        self._document_worker = loop.create_task(jobs, name="documents")
        log.info("serving %s", ", ".join(f"{m.name} ({m.task}, {m.provider})" for m in registry.models.values()))
        self._readiness_changed()

    def call(
        self,
        rpc: str,
        request_id: str,
        table: StatusTable[Status],
        names: Mapping[str, str] | None = None,
        cancelled: Callable[[], str] | None = None,
    ) -> AbstractAsyncContextManager[Call[Status]]:
        """`async with core.call(...) as call:` one call of a front door, admitted and recorded; a refusal
        leaves the block as calls.Refused, in the door's statuses, its fields named by `names`."""
        return run_call(
            self.admission,
            self.metrics,
            rpc,
            request_id,
            table,
            names or {},
            cancelled=cancelled,
            access=self.access_log,
        )

    def refuse(
        self,
        rpc: str,
        request_id: str,
        table: StatusTable[Status],
        error: ServiceError,
        names: Mapping[str, str] | None = None,
    ) -> Refusal[Status]:
        """A call a door turns away before admission, recorded like any other."""
        return refused(self.metrics, rpc, request_id, table, error, names, access=self.access_log)

    async def _translate_for_job(self, request: TranslateRequest, document_id: str) -> list:
        """One translation call of a document job, admitted and recorded like a door's; a refusal raised
        as the domain error it was."""
        try:
            async with self.call("Documents.Translate", document_id, JOB_STATUSES) as call:
                return await self.translation.translate(request, call.record)
        except Refused as refused:
            raise refused.refusal.status(refused.refusal.message, refused.refusal.field) from None

    def _document_language(self, sample: str) -> str | None:
        """The language a document's sample of text is in, as a language code (None: none found)."""
        try:
            ranked = self.routing.rank(sample)
        except ServiceError:
            return None
        tag = language_tag(ranked[0].code) if ranked else None
        return tag.language if tag and tag.language else (ranked[0].code if ranked else None)

    def models(self) -> list[ModelInfo]:
        return self.registry.infos()

    def model_for(self, name: str, task: str, rpc: str) -> ModelInfo:
        """The model a call of `rpc` goes to: the one named, which must be of `task` (empty: the task's
        default; NotFound where none is served)."""
        return self.registry.info(self.registry.get(name, task, rpc))

    def default_model(self, tasks: tuple[str, ...]) -> ModelInfo:
        """The default model of the first of `tasks` served; else the first model loaded."""
        for task in tasks:
            if task in self.registry.defaults:
                return self.registry.info(self.registry.defaults[task])
        return self.registry.info(self.registry.find(""))

    def translation_languages(self) -> list[TranslationLanguages]:
        """Each translating model's languages, in the order the models were loaded."""
        router = self.routing
        return [
            TranslationLanguages(m.name, router.source_codes(m), router.target_codes(m))
            for m in router.seq2seq_models()
        ]

    def detect_languages(self, text: str) -> list[Detected]:
        """The languages `text` may be in, among those the served models read, the likeliest first."""
        return self.routing.rank(text)

    def limits(self) -> ServerLimits:
        s, batching = self.settings, self.settings.load.batching
        return ServerLimits(
            max_concurrent_requests=s.max_concurrent_requests,
            max_client_batch_size=s.max_client_batch_size,
            max_batch_tokens=batching.max_batch_tokens,
            max_batch_size=batching.max_batch_size,
            tokenize_threads=TOKENIZE_THREADS,
            max_beams=s.max_beams,
            rerank_max_documents=s.rerank_documents,
            translation_max_characters=s.translation_characters,
            translation_max_texts=s.translation_texts,
            document_max_bytes=s.document_max_bytes,
        )

    def model(self, name: str, stream: bool = False) -> ModelInfo:
        """One served model by name (NotFound names the served ones); with `stream`, one whose answers
        stream."""
        if not name:
            raise invalid("model", f"empty; name a model ({', '.join(m.name for m in self.models())})")
        found = self.registry.find(name)
        if stream and found.task != "seq2seq":
            article = "an" if found.task[0] in "aeiou" else "a"
            raise invalid("stream", f"model {found.name!r} is {article} {found.task} model; only seq2seq models stream")
        return next(m for m in self.registry.infos() if m.name == found.name)

    def model_ready(self, name: str) -> bool:
        """The server is ready and serves a model of this name that is healthy."""
        return self.ready() and name in self.registry.models and self.registry.models[name].health.healthy

    async def _probe_unhealthy_models(self) -> None:
        """Every probe_seconds, a small call through each unhealthy model; one that passes restores it."""
        while True:
            await asyncio.sleep(self.settings.probe_seconds)
            for model in self.registry.models.values():
                if model.health.healthy:
                    continue
                try:
                    await model.probe(self.model_executor)
                except Exception as error:
                    log.warning("model %s: probe failed: %s", model.name, error)
                else:
                    log.info("model %s: probe passed: healthy again", model.name)
                    model.health.succeeded()

    def start_draining(self) -> None:
        """Turn new calls away (Unavailable) from now on; calls in flight go on."""
        log.info("draining: %d calls in flight", self.admission.in_flight)
        self.admission.draining = True
        self._readiness_changed()

    async def wait_idle(self, seconds: float) -> None:
        """Until no call is in flight, or `seconds` have passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.admission.in_flight and loop.time() < deadline:
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        """Fail what is still queued or running with Unavailable."""
        for task in (self._probes, self._document_worker):
            if task is not None:
                task.cancel()
        if self.registry is not None:
            await self.registry.stop(Unavailable("the server shut down before this call finished; retry"))

    def close(self) -> None:
        """Stop the model and tokenization threads (after the front doors have closed)."""
        self.model_executor.shutdown(wait=False, cancel_futures=True)
        self.tokenize_executor.shutdown(wait=False, cancel_futures=True)
        self.documents.close()
