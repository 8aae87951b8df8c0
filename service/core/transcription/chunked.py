"""A recording transcribed as faster-whisper's batched pipeline does it, but with every one of Whisper's
rules kept: cut at its silences into chunks of at most 30 seconds (speech_chunks.py), and every chunk
transcribed at once beside the others, as a recording of its own (long_form.py: its windows, usually one, a
row or a beam's rows of the model's continuous batch each, with the request's prompt and none of the text
of the chunks before it); its segments' and words' times mapped back to the recording's. Segments come out
in order as soon as every chunk before theirs is done."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from ..models.served_models import ServedSpeechModel
from .long_form import FRAMES_PER_SECOND, Segment, Word, recording_features, transcribe_features
from .speech_chunks import SilenceCuts, Timeline, collect_chunks, speech_spans
from .window_decoding import DecodeOptions

# A request's pieces decoded at once, the others waiting in order: a 4-hour upload cuts into about 480, and
# another request's windows wait behind 16 of them, not all (16 pieces of 5 beams still fill the 64 rows a
# step of a CPU).
PIECES_AT_ONCE = 16


@dataclass(frozen=True)
class ChunkFeatures:
    features: np.ndarray  # (n_mels, frames): the chunk's log-mel frames, as a recording of its own
    offset: float  # seconds before the chunk on the timeline of speech alone


@dataclass(frozen=True)
class ChunkedRecording:
    chunks: tuple[ChunkFeatures, ...]  # none where no speech was heard
    timeline: Timeline


def cut_at_silences(model: ServedSpeechModel, audio: np.ndarray, cuts: SilenceCuts) -> ChunkedRecording:
    """The recording's chunks, each with its own log-mel frames (blocking: run it off the event loop)."""
    probabilities = model.voice_activity.probabilities(audio)
    spans = speech_spans(probabilities, len(audio), cuts)
    chunks = collect_chunks(audio, spans, cuts.max_speech_seconds)
    return ChunkedRecording(
        tuple(ChunkFeatures(recording_features(c.audio, model.n_mels), c.offset) for c in chunks), Timeline(spans)
    )


async def transcribe_chunks(
    model: ServedSpeechModel, recording: ChunkedRecording, options: DecodeOptions, language: str | None
) -> AsyncIterator[Segment]:
    """The recording's segments (language: the one spoken, on a multilingual model; None on an English-only
    one). Up to PIECES_AT_ONCE chunks are decoded at once; one that fails stops the others."""

    room = asyncio.Semaphore(PIECES_AT_ONCE)  # its waiters go in the order they came: the pieces' order

    async def transcribe(chunk: ChunkFeatures) -> list[Segment]:
        async with room:
            segments = transcribe_features(model, chunk.features, options, language)
            return [on_the_recording(s, chunk.offset, recording.timeline) async for s in segments]

    tasks = [asyncio.ensure_future(transcribe(chunk)) for chunk in recording.chunks]
    try:
        count = 0
        for task in tasks:
            for segment in await task:
                count += 1
                yield dataclasses.replace(segment, id=count)
    finally:
        for task in tasks:
            task.cancel()


def on_the_recording(segment: Segment, offset: float, timeline: Timeline) -> Segment:
    """A chunk's segment with its times on the recording's clock (faster-whisper's restore_speech_timestamps):
    a word's start and end both in the span its middle falls in, and a segment with words from its first
    word's start to its last word's end."""
    seek = round(timeline.original(offset + segment.seek / FRAMES_PER_SECOND) * FRAMES_PER_SECOND)
    if not segment.words:
        start, end = timeline.original(offset + segment.start), timeline.original(offset + segment.end, is_end=True)
        return dataclasses.replace(segment, seek=seek, start=start, end=end)
    words = []
    for w in segment.words:
        span = timeline.span_at(offset + (w.start + w.end) / 2)
        start, end = timeline.original(offset + w.start, span), timeline.original(offset + w.end, span)
        words.append(Word(w.word, start, end, w.probability))
    return dataclasses.replace(segment, seek=seek, start=words[0].start, end=words[-1].end, words=tuple(words))
