"""Cutting a recording at its silences: the detector's probabilities equal Silero's streaming graph's, frame
after frame; the speech spans equal Silero's own get_speech_timestamps_from_probs on drawn probabilities and
settings; the chunks hold the spans' audio end to end, none over its limit; a time on the chunks' timeline
maps back to the recording's; and a chunking strategy's wrong values are refused by their fields' names."""

from __future__ import annotations

import importlib.util
from importlib.metadata import distribution
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core.transcription.speech_chunks import (
    SilenceCuts,
    Timeline,
    collect_chunks,
    silence_cuts,
    speech_spans,
)
from service.core.transcription.transcription import TranscriptionService
from service.errors import FailedPrecondition, ServiceError
from service.runner import voice_activity
from service.runner.voice_activity import VoiceActivityRunner
from testing.speech import HARVARD, recording

SILERO = distribution("silero-vad")


def silero_module(name: str):
    """One of silero-vad's modules, loaded by its file: the package's __init__ sets torch's thread count
    for the whole process, which would slow the tests that run after."""
    spec = importlib.util.spec_from_file_location(f"silero_{name}", SILERO.locate_file(f"silero_vad/{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def graph(name: str) -> ort.InferenceSession:
    return ort.InferenceSession(str(SILERO.locate_file(f"silero_vad/data/{name}")), providers=["CPUExecutionProvider"])


def streaming_probabilities(audio: np.ndarray) -> np.ndarray:
    """Silero's streaming graph a frame a call, as its OnnxWrapper feeds it (64 samples of context before
    each frame of 512, the state carried)."""
    session = graph("silero_vad.onnx")
    frames = np.pad(audio, (0, -len(audio) % 512)).reshape(-1, 512)
    state, context, out = np.zeros((2, 1, 128), np.float32), np.zeros((1, 64), np.float32), []
    for frame in frames:
        x = np.concatenate([context, frame[None]], axis=1)
        probability, state = session.run(None, {"input": x, "state": state, "sr": np.array(16000, np.int64)})
        out.append(float(probability[0, 0]))
        context = x[:, -64:]
    return np.array(out, np.float32)


@pytest.mark.parametrize("block", [voice_activity.BLOCK, 97])
def test_the_detector_hears_as_silero_streams(monkeypatch, block):
    """Speech with silences between sentences, in one block and across blocks of 97 frames."""
    monkeypatch.setattr(voice_activity, "BLOCK", block)
    audio = recording(HARVARD[:3], seed=2)[: 16000 * 6 + 123]  # not a whole number of frames
    ours = VoiceActivityRunner(graph("silero_vad_16k_sequence.onnx")).probabilities(audio)
    expected = streaming_probabilities(audio)
    assert ours.shape == expected.shape == (-(-len(audio) // 512),)
    assert np.abs(ours - expected).max() < 1e-5
    assert (expected > 0.5).mean() > 0.3 and (expected < 0.2).mean() > 0.1  # it heard speech and silence


def runs():
    """Probabilities in runs, as speech and silence come: (probability, frames) pieces."""
    return st.lists(st.tuples(st.floats(0, 1), st.integers(1, 300)), min_size=1, max_size=30)


@given(
    pieces=runs(),
    slack=st.integers(0, 511),
    threshold=st.floats(0.05, 0.95),
    silence=st.integers(0, 3000),
    padding=st.integers(0, 800),
    longest=st.floats(2.0, 30.0),
)
def test_speech_spans_are_silero_s_own(pieces, slack, threshold, silence, padding, longest):
    probabilities = np.concatenate([np.full(n, p, np.float32) for p, n in pieces])
    length = len(probabilities) * 512 - slack
    cuts = SilenceCuts(threshold, silence, padding, longest)
    expected = silero_module("utils_vad").get_speech_timestamps_from_probs(
        probabilities.tolist(),
        sampling_rate=16000,
        threshold=threshold,
        min_speech_duration_ms=0,
        max_speech_duration_s=longest,
        min_silence_duration_ms=silence,
        speech_pad_ms=padding,
        audio_length_samples=length,
    )
    assert speech_spans(probabilities, length, cuts) == [(s["start"], s["end"]) for s in expected]


@st.composite
def spans_of_a_recording(draw) -> tuple[int, list[tuple[int, int]]]:
    """Disjoint spans in order, from 0 to 40 s each, and the recording's length."""
    edges = sorted(draw(st.sets(st.integers(0, 400 * 16000), min_size=0, max_size=20)))
    edges = edges[: len(edges) // 2 * 2]
    spans = [(a, b) for a, b in zip(edges[::2], edges[1::2]) if 64 <= b - a <= 40 * 16000]
    return (edges[-1] if edges else 0) + draw(st.integers(0, 16000)), spans


@given(drawn=spans_of_a_recording(), max_seconds=st.sampled_from([5.0, 30.0]))
def test_chunks_hold_the_spans_end_to_end_and_map_back(drawn, max_seconds):
    length, spans = drawn
    audio = np.arange(length, dtype=np.float32)  # each sample its own index
    chunks = collect_chunks(audio, spans, max_seconds)
    assert [s for c in chunks for s in c.spans] == spans
    before = 0.0
    for chunk in chunks:
        assert len(chunk.spans) == 1 or len(chunk.audio) <= max_seconds * 16000  # a longer span stands alone
        assert np.array_equal(chunk.audio, np.concatenate([audio[a:b] for a, b in chunk.spans]))
        assert chunk.offset == pytest.approx(before)
        before += len(chunk.audio) / 16000
    timeline = Timeline(spans)
    spoken, inside = 0, 0.001  # seconds inside each edge: a time exactly on one may be read on either side
    for start, end in spans:  # each span's edges, on the speech's timeline, back in the recording
        assert timeline.original(spoken / 16000 + inside) == pytest.approx(start / 16000 + inside, abs=0.006)
        spoken += end - start
        assert timeline.original(spoken / 16000 - inside, is_end=True) == pytest.approx(end / 16000 - inside, abs=0.006)


@pytest.mark.parametrize(
    "value, field, words",
    [
        ("manual", "chunking_strategy", "auto, or a server_vad object"),
        ("{not json", "chunking_strategy", "not valid JSON"),
        ('{"type": "client_vad"}', "chunking_strategy.type", "server_vad"),
        ({"type": "server_vad", "loudness": 3}, "chunking_strategy.loudness", "not a field of server_vad"),
        ({"type": "server_vad", "threshold": "high"}, "chunking_strategy.threshold", "a number"),
        ({"type": "server_vad", "silence_duration_ms": 2.5}, "chunking_strategy.silence_duration_ms", "an integer"),
        ({"type": "server_vad", "prefix_padding_ms": True}, "chunking_strategy.prefix_padding_ms", "an integer"),
        ([1, 2], "chunking_strategy", "auto, or a server_vad object"),
    ],
)
def test_a_wrong_chunking_strategy_is_refused_by_name(value, field, words):
    with pytest.raises(ServiceError) as refused:
        silence_cuts(value)
    assert refused.value.field == field and words in refused.value.message


def test_a_chunking_strategy_is_read_as_sent():
    assert silence_cuts("auto") == SilenceCuts()
    sent = '{"type": "server_vad", "threshold": 0.4, "silence_duration_ms": "500"}'
    assert silence_cuts(sent) == SilenceCuts(threshold=0.4, silence_duration_ms=500)


@pytest.mark.parametrize(
    "cuts, field, words",
    [
        (SilenceCuts(threshold=0.0), "chunking_strategy.threshold", "above 0, below 1"),
        (SilenceCuts(threshold=float("nan")), "chunking_strategy.threshold", "above 0, below 1"),
        (SilenceCuts(prefix_padding_ms=-1), "chunking_strategy.prefix_padding_ms", "0 to 10000"),
        (SilenceCuts(silence_duration_ms=10_001), "chunking_strategy.silence_duration_ms", "0 to 10000"),
    ],
)
def test_cuts_out_of_range_are_refused_by_name(cuts, field, words):
    model = SimpleNamespace(name="speech", voice_activity=object())
    with pytest.raises(ServiceError) as refused:
        TranscriptionService.check_chunking(model, cuts)
    assert refused.value.field == field and words in refused.value.message


def test_a_model_without_its_detector_says_so():
    """A directory exported before the detector was (or copied without it) serves, and says why it cannot cut."""
    with pytest.raises(FailedPrecondition) as refused:
        TranscriptionService.check_chunking(SimpleNamespace(name="speech", voice_activity=None), SilenceCuts())
    assert refused.value.field == "chunking_strategy" and "onnx/voice_activity.onnx" in refused.value.message
