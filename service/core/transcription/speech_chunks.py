"""A long recording cut at its silences into chunks of at most 30 seconds, as faster-whisper's batched
pipeline cuts it: Silero VAD's speech probabilities (one per 32 ms frame) into speech spans by Silero's own
state machine (get_speech_timestamps_from_probs, ported to run without torch), the spans joined end to end
into chunks (collect_chunks, the silence between them left out), and each chunk's times mapped back to the
recording's (SpeechTimestampsMap). Every chunk is then a window decoded at once beside the others."""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass

import numpy as np

from ...errors import invalid
from .log_mel import SAMPLE_RATE

FRAME_SAMPLES = 512  # Silero VAD's frame at 16 kHz: one probability per 32 ms


@dataclass(frozen=True)
class SilenceCuts:
    """Where a recording is cut: OpenAI's server_vad fields, with faster-whisper's batched defaults."""

    threshold: float = 0.5  # a frame is speech at this probability or more
    silence_duration_ms: int = 160  # a silence this long ends a span
    prefix_padding_ms: int = 400  # kept on each side of a span (split in half between spans nearer than twice)
    max_speech_seconds: float = 30.0  # a span is cut at its longest silence before this length (the window's)


FIELD = "chunking_strategy"  # OpenAI's name for it, which every door uses
SERVER_VAD_FIELDS = {"threshold": float, "silence_duration_ms": int, "prefix_padding_ms": int}


def silence_cuts(value: str | dict) -> SilenceCuts:
    """A chunking strategy as a caller sends it: "auto", or a server_vad object (or its JSON text), every
    wrong value refused by its field's name. (The ranges are the transcription's to check.)"""
    if value == "auto":
        return SilenceCuts()
    if isinstance(value, str):
        if not value.lstrip().startswith("{"):
            raise invalid(FIELD, f"{value!r}; auto, or a server_vad object")
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as error:
            raise invalid(FIELD, f"not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise invalid(FIELD, "auto, or a server_vad object")
    if value.get("type") != "server_vad":
        raise invalid(f"{FIELD}.type", f"{value.get('type')!r}; server_vad")
    values = {}
    for key, given in value.items():
        if key in SERVER_VAD_FIELDS:
            values[key] = _number(key, given)
        elif key != "type":
            raise invalid(f"{FIELD}.{key}", f"not a field of server_vad; one of type, {', '.join(SERVER_VAD_FIELDS)}")
    return SilenceCuts(**values)


def _number(key: str, value) -> float | int:
    """A number as its JSON value, or as the text a form field holds."""
    kind = SERVER_VAD_FIELDS[key]
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError
        parsed = float(value)
        if not math.isfinite(parsed) or (kind is int and not parsed.is_integer()):
            raise ValueError
    except ValueError:
        raise invalid(f"{FIELD}.{key}", f"{value!r}; {'an integer' if kind is int else 'a number'}") from None
    return kind(parsed)


@dataclass(frozen=True)
class Chunk:
    """Spans of a recording joined end to end: one window's audio."""

    audio: np.ndarray  # float32 samples at 16 kHz
    offset: float  # seconds before it on the timeline of the spans alone (silences left out)
    spans: tuple[tuple[int, int], ...]  # (start, end) samples of the recording it holds


def speech_spans(probabilities: np.ndarray, length: int, cuts: SilenceCuts) -> list[tuple[int, int]]:
    """(start, end) samples of each span of speech: Silero's get_speech_timestamps_from_probs at 16 kHz
    (min_speech_duration_ms 0, min_silence_at_max_speech 98 ms, the longest silence chosen at the maximum)."""
    pad = SAMPLE_RATE * cuts.prefix_padding_ms / 1000
    max_speech = SAMPLE_RATE * cuts.max_speech_seconds - FRAME_SAMPLES - 2 * pad
    min_silence = SAMPLE_RATE * cuts.silence_duration_ms / 1000
    min_silence_at_max = SAMPLE_RATE * 98 / 1000
    threshold = cuts.threshold
    negative = max(threshold - 0.15, 0.01)  # below it a frame is silence; between the two, what came before
    triggered, speeches, current = False, [], {}
    temp_end = 0  # where the silence now heard inside a span began (0: none)
    possible_ends: list[tuple[int, int]] = []  # (where a silence began, how long it lasted) inside the span
    for i, probability in enumerate(probabilities.tolist()):
        sample = FRAME_SAMPLES * i
        if probability >= threshold and temp_end:
            if sample - temp_end > min_silence_at_max:
                possible_ends.append((temp_end, sample - temp_end))
            temp_end = 0
        if probability >= threshold and not triggered:
            triggered, current["start"] = True, sample
            continue
        if triggered and sample - current["start"] > max_speech:
            if possible_ends:  # cut at the longest silence of the span so far; speech goes on after it
                end, duration = max(possible_ends, key=lambda possible: possible[1])
                speeches.append({**current, "end": end})
                current = {"start": end + duration}
            else:  # no silence to cut at: cut here
                speeches.append({**current, "end": sample})
                current, triggered = {}, False
            temp_end, possible_ends = 0, []
            if not triggered:
                continue
        if probability < negative and triggered:
            temp_end = temp_end or sample
            if sample - temp_end < min_silence:
                continue
            if temp_end - current["start"] > 0:
                speeches.append({**current, "end": temp_end})
            current, triggered = {}, False
            temp_end, possible_ends = 0, []
    if current and length - current["start"] > 0:
        current["end"] = length
        speeches.append(current)
    for i, speech in enumerate(speeches):  # padded, and nearby spans meet half-way
        if i == 0:
            speech["start"] = int(max(0, speech["start"] - pad))
        if i != len(speeches) - 1:
            silence = speeches[i + 1]["start"] - speech["end"]
            if silence < 2 * pad:
                speech["end"] += int(silence // 2)
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - silence // 2))
            else:
                speech["end"] = int(min(length, speech["end"] + pad))
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - pad))
        else:
            speech["end"] = int(min(length, speech["end"] + pad))
    return [(s["start"], s["end"]) for s in speeches]


def collect_chunks(audio: np.ndarray, spans: list[tuple[int, int]], max_seconds: float) -> list[Chunk]:
    """The spans joined in order into chunks of at most max_seconds (faster-whisper's collect_chunks,
    without the empty chunk it makes when a first span alone is longer)."""
    chunks, current, filled, before = [], [], 0, 0
    for start, end in spans:
        if current and filled + end - start > max_seconds * SAMPLE_RATE:
            chunks.append(_chunk(audio, current, before))
            before += filled
            current, filled = [], 0
        current.append((start, end))
        filled += end - start
    if current:
        chunks.append(_chunk(audio, current, before))
    return chunks


def _chunk(audio: np.ndarray, spans: list[tuple[int, int]], before: int) -> Chunk:
    joined = np.concatenate([audio[start:end] for start, end in spans]).astype(np.float32, copy=False)
    return Chunk(joined, before / SAMPLE_RATE, tuple(spans))


class Timeline:
    """Times on the spans' timeline (silences left out) mapped back to the recording's, to 0.01 s
    (faster-whisper's SpeechTimestampsMap)."""

    def __init__(self, spans: list[tuple[int, int]]):
        self.span_ends, self.silence_before = [], []  # per span: its end on the spans' timeline (samples)
        previous_end = silent = 0
        for start, end in spans:
            silent += start - previous_end
            previous_end = end
            self.span_ends.append(end - silent)
            self.silence_before.append(silent / SAMPLE_RATE)

    def span_at(self, time: float, is_end: bool = False) -> int:
        """The span a time falls in; an end exactly at a span's end stays in that span."""
        sample = int(time * SAMPLE_RATE)
        if is_end and sample in self.span_ends:
            return self.span_ends.index(sample)
        return min(bisect.bisect(self.span_ends, sample), len(self.span_ends) - 1)

    def original(self, time: float, span: int | None = None, is_end: bool = False) -> float:
        span = self.span_at(time, is_end) if span is None else span
        return round(self.silence_before[span] + time, 2)
