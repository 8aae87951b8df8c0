"""The transcription capability: an audio upload into text by a speech model (Whisper), with its segments
and their timestamps: the upload decoded (audio_decoding.py), its log-mel frames made once, its language
detected where none is given (one decoder step over the language tokens), and its windows decoded one after
another by timestamp seeking (long_form.py), or, where the request asks for it, cut at its silences and all
decoded at once (chunked.py); each window a row of the model's continuous batch. Translation is Whisper's
other task: any language's speech into English text."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np

from ...engine.sequence import GenerationParams
from ...errors import FailedPrecondition, NotFound, ServiceError, invalid
from ..models.registry import ModelRegistry
from ..models.served_models import ServedSpeechModel
from .audio_decoding import AudioLimits, decode_audio
from .chunked import ChunkedRecording, cut_at_silences, transcribe_chunks
from .log_mel import SAMPLE_RATE, WINDOW_FRAMES
from .long_form import Segment, recording_features, transcribe_features
from .speech_chunks import SilenceCuts
from .window_decoding import TASKS, DecodeOptions

TASK = "transcription"  # the served models' task
MAX_PROMPT_CHARACTERS = 4000  # a prompt's text: only its last 223 tokens are read
FALLBACK_STEP = 0.2  # OpenAI's temperature_increment_on_fallback
MAX_BEAMS = 16
MAX_SILENCE_MS = 10_000  # of chunking's silence_duration_ms and prefix_padding_ms


@dataclass(frozen=True, kw_only=True)
class TranscribeRequest:
    audio: bytes  # an upload in any format FFmpeg reads
    model: str = ""  # empty: the first speech model served
    task: str = "transcribe"  # or "translate": into English
    language: str = ""  # ISO 639-1 code of the speech; empty: detected (an English-only model: English)
    prompt: str = ""  # text the speech continues (names, spellings, style)
    temperature: float = 0.0  # the first; on fallback it rises by 0.2 up to 1
    beam_size: int = 5  # at temperature 0 (1: greedy)
    without_timestamps: bool = False
    word_timestamps: bool = False  # each segment's words timed (openai-whisper's timing)
    # Cut at its silences, the pieces decoded at once (None: window after window, by timestamp seeking).
    chunking_strategy: SilenceCuts | None = None


@dataclass(frozen=True)
class Heard:
    """A request ready for its windows."""

    model: ServedSpeechModel
    options: DecodeOptions
    recording: np.ndarray | ChunkedRecording  # the log-mel frames (n_mels, frames) of all of it, or its chunks
    duration: float  # seconds
    language: str


@dataclass(frozen=True)
class TokenLogprob:
    token: str  # its text
    logprob: float  # as it was chosen (Whisper's rules applied)
    bytes: bytes  # its own bytes, which may end inside a character


@dataclass(frozen=True)
class Transcript:
    text: str
    model: str
    task: str
    language: str
    duration: float  # seconds of audio
    segments: tuple[Segment, ...]


class TranscriptionService:
    def __init__(self, registry: ModelRegistry, limits: AudioLimits, executor: Executor, max_recordings: int):
        """executor: where uploads are decoded and their log-mel frames made, off the event loop;
        max_recordings: of one call that sends several (max_client_batch_size)."""
        self.registry, self.limits, self.executor = registry, limits, executor
        self.max_recordings = max_recordings

    def model(self, name: str, rpc: str, task: str = "transcribe") -> ServedSpeechModel:
        """The speech model named; unnamed, the first served (for a translation, the first multilingual one)."""
        if name or task != "translate":
            return self.registry.get(name, TASK, rpc)
        for candidate in self.translating_models():
            return self.registry.get(candidate, TASK, rpc)
        raise NotFound(f"model: no multilingual speech model is served, so {rpc} has no default", "model")

    def translating_models(self) -> list[str]:
        """The speech models that translate: the multilingual ones."""
        models = self.registry.models.values()
        return [m.name for m in models if m.task == TASK and m.whisper.multilingual]

    def options(self, model: ServedSpeechModel, request: TranscribeRequest) -> DecodeOptions:
        """The request's options checked against the model, each refusal naming its field."""
        if request.task not in TASKS:
            raise invalid("task", f"{request.task!r}; one of {', '.join(TASKS)}")
        whisper = model.whisper
        if request.task == "translate" and not whisper.multilingual:
            raise invalid("task", f"model {model.name!r} is English-only: it transcribes, it does not translate")
        if request.language:
            if whisper.multilingual and request.language not in whisper.languages:
                raise invalid("language", f"{request.language!r}; one of {', '.join(whisper.languages)}")
            if not whisper.multilingual and request.language != "en":
                raise invalid("language", f"{request.language!r}; model {model.name!r} hears English only (en)")
        if not math.isfinite(request.temperature) or not 0.0 <= request.temperature <= 1.0:
            raise invalid("temperature", f"{request.temperature:.7g}; 0 to 1")
        if not 1 <= request.beam_size <= MAX_BEAMS:
            raise invalid("beam_size", f"{request.beam_size}; 1 to {MAX_BEAMS}")
        if len(request.prompt) > MAX_PROMPT_CHARACTERS or "\x00" in request.prompt:
            raise invalid("prompt", f"{len(request.prompt)} characters; at most {MAX_PROMPT_CHARACTERS}, no NUL")
        if request.word_timestamps and model.word_alignment is None:
            raise FailedPrecondition(
                f"word_timestamps: model {model.name!r} is served without its word-alignment graph "
                "(onnx/word_alignment.onnx: export the model again, or copy the file beside its other graphs)",
                "word_timestamps",
            )
        if request.chunking_strategy is not None:
            self.check_chunking(model, request.chunking_strategy)
        steps = int(round((1.0 - request.temperature) / FALLBACK_STEP))
        temperatures = tuple(round(request.temperature + FALLBACK_STEP * i, 4) for i in range(steps + 1))
        return DecodeOptions(
            task=request.task,
            beam_size=request.beam_size,
            temperatures=temperatures or (request.temperature,),
            initial_prompt=request.prompt or None,
            without_timestamps=request.without_timestamps,
            word_timestamps=request.word_timestamps,
        )

    @staticmethod
    def check_chunking(model: ServedSpeechModel, cuts: SilenceCuts) -> None:
        if model.voice_activity is None:
            raise FailedPrecondition(
                f"chunking_strategy: model {model.name!r} is served without its voice activity detector "
                "(onnx/voice_activity.onnx: export the model again)",
                "chunking_strategy",
            )
        if not math.isfinite(cuts.threshold) or not 0.0 < cuts.threshold < 1.0:
            raise invalid("chunking_strategy.threshold", f"{cuts.threshold:.7g}; above 0, below 1")
        for name in ("silence_duration_ms", "prefix_padding_ms"):
            value = getattr(cuts, name)
            if not 0 <= value <= MAX_SILENCE_MS:
                raise invalid(f"chunking_strategy.{name}", f"{value}; 0 to {MAX_SILENCE_MS}")

    async def prepare(self, request: TranscribeRequest, rpc: str = "Transcribe") -> Heard:
        """The request checked, its audio decoded into log-mel frames and its language known (given, or
        detected on the first window): everything before the first window is decoded."""
        model = self.model(request.model, rpc, request.task)
        options = self.options(model, request)
        loop = asyncio.get_running_loop()
        audio = await loop.run_in_executor(self.executor, decode_audio, request.audio, self.limits)
        cuts = request.chunking_strategy
        if cuts is None:
            recording = await loop.run_in_executor(self.executor, recording_features, audio, model.n_mels)
            first = recording
        else:
            recording = await loop.run_in_executor(self.executor, cut_at_silences, model, audio, cuts)
            # The language of the first speech heard (of silence, where none was).
            first = recording.chunks[0].features if recording.chunks else np.zeros((model.n_mels, 0), np.float32)
        language = request.language or await self.detect_language(model, first)
        return Heard(model, options, recording, len(audio) / SAMPLE_RATE, language)

    async def segments(self, heard: Heard) -> AsyncIterator[Segment]:
        """The segments as each window's are final."""
        model = heard.model
        model.metrics.audio_heard(heard.duration)
        started = time.perf_counter()
        spoken = heard.language if model.whisper.multilingual else None
        if isinstance(heard.recording, ChunkedRecording):
            segments = transcribe_chunks(model, heard.recording, heard.options, spoken)
        else:
            segments = transcribe_features(model, heard.recording, heard.options, spoken)
        async for segment in segments:
            yield segment
        model.metrics.transcribed(heard.duration, time.perf_counter() - started)

    async def transcribe(self, request: TranscribeRequest, rpc: str = "Transcribe") -> Transcript:
        """The whole transcript: every segment, and the text."""
        heard = await self.prepare(request, rpc)
        segments = tuple([segment async for segment in self.segments(heard)])
        text = "".join(s.text for s in segments)
        return Transcript(text, heard.model.name, request.task, heard.language, heard.duration, segments)

    async def transcribe_all(self, requests: list[TranscribeRequest], rpc: str) -> list[Transcript]:
        """1 to max_recordings recordings transcribed at once, every window a row of the model's batch,
        answered in order. One refused or failed recording stops the others."""
        limit = self.max_recordings
        if not 1 <= len(requests) <= limit:
            raise invalid("file", f"{len(requests)} recordings; send 1 to {limit} (max_client_batch_size)")

        async def one(i: int, request: TranscribeRequest) -> Transcript:
            try:
                return await self.transcribe(request, rpc)
            except ServiceError as error:
                if len(requests) > 1 and error.field == "file":  # which recording: "file[3]: ..."
                    error.field, error.message = f"file[{i}]", f"file[{i}]" + error.message[len("file") :]
                raise

        tasks = [asyncio.ensure_future(one(i, request)) for i, request in enumerate(requests)]
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()

    def text_logprobs(self, model: str, segments) -> list[TokenLogprob]:
        """The log-probability of each text token of these segments (timestamps left out), in order."""
        served = self.registry.models[model]
        end_of_text = served.whisper.end_of_text_id
        tokens = [(t, p) for s in segments for t, p in zip(s.tokens, s.token_log_probs) if t < end_of_text]
        tokenizer = served.tokenizer
        return [TokenLogprob(tokenizer.decode([t]), p, tokenizer.token_bytes(t)) for t, p in tokens]

    async def detect_language(self, model: ServedSpeechModel, features: np.ndarray) -> str:
        """The likeliest language of the first window: one decoder step after <|startoftranscript|>, its
        probabilities over the language tokens alone (faster-whisper's detect_language). English for an
        English-only model."""
        whisper = model.whisper
        if not whisper.multilingual:
            return "en"
        window = np.zeros((features.shape[0], WINDOW_FRAMES), np.float32)
        first = features[:, :WINDOW_FRAMES]
        window[:, : first.shape[1]] = first
        probe = LanguageProbe(whisper.first_language_id, len(whisper.languages))
        params = GenerationParams(max_new_tokens=1, ignore_eos=True, stream=False, rules=probe)
        async for _ in model.scheduler.generate([], params, features=window):
            pass
        return whisper.languages[int(np.argmax(probe.probabilities))]


class LanguageProbe:
    """Logit rules that read the first step's probabilities over the language tokens."""

    def __init__(self, first: int, count: int):
        self.first, self.count = first, count
        self.probabilities = np.zeros(count)

    def apply(self, logits: np.ndarray, tokens: np.ndarray) -> None:
        if len(tokens) == 0:
            scores = logits[self.first : self.first + self.count].astype(np.float64)
            scores = np.exp(scores - scores.max())
            self.probabilities = scores / scores.sum()
