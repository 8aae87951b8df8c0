"""A long recording cut at its silences (chunking_strategy): Whisper tiny.en hears 14 espeak-ng sentences with
pauses between them, cut by the model's voice activity detector into pieces of at most 30 s that are
decoded at once, rows of the same decode steps (where window after window never has two); its text is the
sentences' as closely as window after window's, and every segment and word is timed inside the speech it
holds on the recording's clock. OpenAI's SDK sends "auto" and a server_vad object (and a form its JSON
text), attnserve.v1 a SilenceCuts, KServe v2 a parameter, `attnserve transcribe --cut-at-silences`; wrong
values are refused by their fields' names, and the server goes on serving."""

from __future__ import annotations

import subprocess
import sys

import httpx
import numpy as np
import openai
import pytest
import tritonclient.http as triton
from prometheus_client.parser import text_string_to_metric_families

from service.core.transcription.speech_chunks import SilenceCuts
from service.core.transcription.transcription import TranscribeRequest
from service.grpc_api.pb import inference_pb2 as pb
from testing.speech import HARVARD, timed_recording, write_wav

MODEL = "whisper-tiny.en"
SENTENCES = HARVARD[10:24]


@pytest.fixture(scope="module")
def server(whisper_tiny_en):
    from testing.server_thread import ServerThread

    server = ServerThread([whisper_tiny_en])
    yield server
    server.close()


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.server.http.port}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    """The sentences with 0.2 to 1.5 s of silence before each: its file, and when each is read (seconds)."""
    audio, spans = timed_recording(SENTENCES, seed=7)
    return write_wav(tmp_path_factory.mktemp("speech") / "fourteen.wav", audio), spans


def steps_of_several_windows(server) -> float:
    """Decode steps so far that held two windows or more."""
    text = httpx.get(f"http://127.0.0.1:{server.server.metrics_server.port}/metrics").text
    samples = {(s.name, s.labels.get("le")): s.value for f in text_string_to_metric_families(text) for s in f.samples}
    name = "attnserve_transcription_windows_per_step"
    return samples.get((f"{name}_count", None), 0.0) - samples.get((f"{name}_bucket", "1.0"), 0.0)


def normalized(text: str) -> list[str]:
    return "".join(c if c.isalnum() or c == "'" else " " for c in text.lower()).split()


def word_error_rate(text: str) -> float:
    from jiwer import wer

    return wer(" ".join(normalized(" ".join(SENTENCES))), " ".join(normalized(text)))


@pytest.fixture(scope="module")
def window_after_window(server, speech):
    """The transcript by timestamp seeking, and the steps of several windows it made (none: one window at a
    time)."""
    before = steps_of_several_windows(server)
    request = TranscribeRequest(audio=speech[0].read_bytes(), model=MODEL)
    transcript = server.run(server.server.core.transcription.transcribe(request), timeout=600)
    return transcript, steps_of_several_windows(server) - before


@pytest.fixture(scope="module")
def cut(server, client, speech, window_after_window):
    """verbose_json with words, the recording cut with "auto"; and the steps of several windows it made."""
    before = steps_of_several_windows(server)
    answer = client.audio.transcriptions.create(
        model=MODEL,
        file=speech[0].open("rb"),
        response_format="verbose_json",
        timestamp_granularities=["segment", "word"],
        chunking_strategy="auto",
    )
    return answer, steps_of_several_windows(server) - before


def test_the_pieces_are_decoded_at_once_and_heard_as_well(cut, window_after_window):
    answer, several = cut
    transcript, one_at_a_time = window_after_window
    assert one_at_a_time == 0 and several >= 5  # two pieces of the 40 s of speech, side by side
    assert len({s.seek for s in answer.segments}) >= 2  # from more than one piece
    assert word_error_rate(answer.text) <= word_error_rate(transcript.text) + 0.05 <= 0.25
    assert answer.duration == pytest.approx(transcript.duration, abs=0.01)


def test_a_request_s_pieces_in_the_batch_at_once_are_capped(server, speech, monkeypatch):
    """One piece at a time: no step holds two windows, and the transcript is the same (as near as steps of
    other sizes allow: a row's float32 sums may round otherwise in another batch)."""
    from service.core.transcription import chunked

    audio = speech[0].read_bytes()
    request = TranscribeRequest(audio=audio, model=MODEL, chunking_strategy=SilenceCuts())
    side_by_side = server.run(server.server.core.transcription.transcribe(request), timeout=600)
    monkeypatch.setattr(chunked, "PIECES_AT_ONCE", 1)
    before = steps_of_several_windows(server)
    one_by_one = server.run(server.server.core.transcription.transcribe(request), timeout=600)
    assert steps_of_several_windows(server) == before
    from jiwer import wer

    assert wer(" ".join(normalized(side_by_side.text)), " ".join(normalized(one_by_one.text))) <= 0.05
    assert one_by_one.segments[-1].end == pytest.approx(side_by_side.segments[-1].end, abs=0.5)


def test_segments_and_words_are_timed_on_the_recordings_clock(cut, speech):
    """Each word inside a sentence's reading, give or take the detector's padding and a timestamp's 20 ms;
    the silences the pieces left out are put back."""
    answer, _ = cut
    spans = speech[1]

    def heard(start: float, end: float) -> bool:
        middle = (start + end) / 2
        return any(a - 0.45 <= middle <= b + 0.45 for a, b in spans)

    words = answer.words
    assert len(words) >= 0.9 * len(normalized(" ".join(SENTENCES)))
    assert sum(heard(w.start, w.end) for w in words) >= 0.95 * len(words)
    assert all(a.start <= b.start for a, b in zip(words, words[1:]))  # in order, across pieces
    assert words[-1].end > spans[-1][0]  # the last sentence is where it is said, not where the pieces end
    for segment in answer.segments:
        assert segment.start <= segment.end and any(a - 1 <= segment.start <= b for a, b in spans)


def test_a_server_vad_object_as_the_sdk_sends_it_and_as_json_text(client, server, speech):
    vad = {"type": "server_vad", "threshold": 0.5, "silence_duration_ms": 500, "prefix_padding_ms": 300}
    answer = client.audio.transcriptions.create(model=MODEL, file=speech[0].open("rb"), chunking_strategy=vad)
    assert word_error_rate(answer.text) <= 0.25
    port = server.server.http.port
    as_json = httpx.post(
        f"http://127.0.0.1:{port}/v1/audio/transcriptions",
        files={"file": ("speech.wav", speech[0].read_bytes())},
        data={
            "model": MODEL,
            "chunking_strategy": '{"type": "server_vad", "silence_duration_ms": 500, '
            '"threshold": 0.5, "prefix_padding_ms": 300}',
        },
        timeout=600,
    )
    assert as_json.status_code == 200 and as_json.json()["text"] == answer.text


@pytest.mark.parametrize(
    "strategy, field, words",
    [
        ("silences", "chunking_strategy", "auto, or a server_vad object"),
        ({"type": "server_vad", "threshold": 1.5}, "chunking_strategy.threshold", "above 0, below 1"),
        ({"type": "server_vad", "silence_duration_ms": 20_000}, "chunking_strategy.silence_duration_ms", "0 to 10000"),
        ({"type": "semantic_vad"}, "chunking_strategy.type", "server_vad"),
        ({"type": "server_vad", "eagerness": "low"}, "chunking_strategy.eagerness", "not a field of server_vad"),
    ],
)
def test_a_wrong_strategy_is_refused_by_name(client, speech, strategy, field, words):
    with pytest.raises(openai.APIStatusError) as refused:
        client.audio.transcriptions.create(model=MODEL, file=speech[0].open("rb"), chunking_strategy=strategy)
    assert refused.value.status_code == 400
    assert refused.value.body["param"] == field and words in refused.value.body["message"], refused.value.body


def test_grpc_kserve_and_the_command_cut_alike(server, speech):
    """The same defaults on every door: the core's transcript with SilenceCuts' defaults."""
    audio = speech[0].read_bytes()
    core = TranscribeRequest(audio=audio, model=MODEL, chunking_strategy=SilenceCuts())
    text = server.run(server.server.core.transcription.transcribe(core), timeout=600).text.strip()
    assert word_error_rate(text) <= 0.25
    request = pb.TranscribeRequest(audio=audio, model=MODEL, chunking_strategy=pb.SilenceCuts())
    assert server.stub().Transcribe(request, timeout=600).text.strip() == text
    with triton.InferenceServerClient(f"localhost:{server.server.http.port}", network_timeout=600) as kserve:
        tensor = triton.InferInput("audio", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([audio], dtype=np.object_), binary_data=True)
        result = kserve.infer(MODEL, [tensor], parameters={"chunking_strategy": "auto"})
        assert result.as_numpy("text")[0].decode().strip() == text
    command = [sys.executable, "-m", "cli", "transcribe", str(speech[0]), "--target", server.target]
    done = subprocess.run([*command, "--format", "text", "--cut-at-silences"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == text, done.stderr
