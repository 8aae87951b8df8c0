"""Speech on the doors beside OpenAI's: attnserve.v1's Transcribe and TranscribeStream, `attnserve
transcribe FILE` over them, and KServe v2's infer with an `audio` tensor (gRPC, and REST called with
tritonclient.http). Whisper tiny.en's transcript of espeak-ng speech, whole or sent in pieces, is the
core's (segments, their fields, words); refusals name the field or the setting (audio that is not audio,
which recording of several, a stream over max_upload_bytes, a stream with no options, a translation by an
English-only model, recordings sent as JSON strings), and the server goes on serving."""

from __future__ import annotations

import json
import subprocess
import sys

import grpc
import numpy as np
import pytest
import tritonclient.http as triton
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.utils import InferenceServerException

from service.core.transcription.transcription import TranscribeRequest
from service.grpc_api.pb import inference_pb2 as pb
from service.grpc_api.pb import open_inference_pb2 as oip
from service.grpc_api.pb import open_inference_pb2_grpc as oip_grpc
from service.kserve_protocol import pack_bytes
from testing.speech import HARVARD, recording, write_wav

MODEL = "whisper-tiny.en"
LIMIT = 2_000_000  # max_upload_bytes


@pytest.fixture(scope="module")
def server(whisper_tiny_en):
    from testing.server_thread import ServerThread

    server = ServerThread([whisper_tiny_en], max_upload_bytes=LIMIT)
    yield server
    server.close()


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    return write_wav(tmp_path_factory.mktemp("speech") / "four.wav", recording(HARVARD[5:9], seed=5))


@pytest.fixture(scope="module")
def transcript(server, speech):
    """The core's, words timed."""
    request = TranscribeRequest(audio=speech.read_bytes(), model=MODEL, word_timestamps=True)
    return server.run(server.server.core.transcription.transcribe(request), timeout=300)


def assert_segments_are(messages, segments):
    assert len(messages) == len(segments) >= 3
    for i, (message, ours) in enumerate(zip(messages, segments), 1):
        assert (message.id, message.seek, message.text, list(message.tokens)) == (i, ours.seek, ours.text, ours.tokens)
        assert message.start == pytest.approx(ours.start, abs=1e-5) and message.end == pytest.approx(ours.end, abs=1e-5)
        assert message.avg_logprob == pytest.approx(ours.avg_logprob, abs=1e-6)
        assert message.no_speech_prob == pytest.approx(ours.no_speech_prob, abs=1e-6)
        assert list(message.token_logprobs) == pytest.approx(ours.token_log_probs, abs=1e-6)
        assert len(message.token_logprobs) == len(message.tokens)
        assert [(w.word, round(w.start, 2), round(w.end, 2)) for w in message.words] == [
            (w.word, round(w.start, 2), round(w.end, 2)) for w in ours.words
        ]
        assert ours.words


def test_transcribe_gives_the_cores_transcript(server, speech, transcript):
    answer = server.stub().Transcribe(
        pb.TranscribeRequest(audio=speech.read_bytes(), word_timestamps=True), timeout=300
    )
    assert (answer.model, answer.task, answer.language) == (MODEL, pb.SPEECH_TASK_TRANSCRIBE, "en")
    assert answer.text == transcript.text and answer.duration == pytest.approx(transcript.duration, abs=1e-4)
    assert_segments_are(answer.segments, transcript.segments)


def test_a_recording_in_pieces_gives_each_windows_segments_then_the_text(server, speech, transcript):
    audio = speech.read_bytes()

    def pieces():
        yield pb.TranscribeStreamRequest(options=pb.TranscribeRequest(model=MODEL, word_timestamps=True))
        for start in range(0, len(audio), 10_000):
            yield pb.TranscribeStreamRequest(audio=audio[start : start + 10_000])

    messages = list(server.stub().TranscribeStream(pieces(), timeout=300))
    assert [m.done for m in messages] == [False] * (len(messages) - 1) + [True]
    assert_segments_are([s for m in messages for s in m.segments], transcript.segments)
    assert messages[-1].text == transcript.text and messages[-1].duration == pytest.approx(
        transcript.duration, abs=1e-4
    )


def refusal(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as refused:
        call()
    return refused.value.code(), refused.value.details()


def test_what_cannot_be_transcribed_is_refused_by_name(server, speech):
    stub = server.stub()
    code, details = refusal(lambda: stub.Transcribe(pb.TranscribeRequest(audio=b"not audio"), timeout=60))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("audio: not audio"), details
    translate = pb.TranscribeRequest(model=MODEL, audio=speech.read_bytes(), task=pb.SPEECH_TASK_TRANSLATE)
    code, details = refusal(lambda: stub.Transcribe(translate, timeout=60))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("task:") and "English-only" in details
    code, details = refusal(lambda: list(stub.TranscribeStream(iter([]), timeout=60)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("options:"), details
    too_much = (pb.TranscribeStreamRequest(audio=b"\0" * 400_000) for _ in range(6))
    code, details = refusal(lambda: list(stub.TranscribeStream(too_much, timeout=60)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "(max_upload_bytes)" in details, details
    answer = stub.Transcribe(pb.TranscribeRequest(audio=speech.read_bytes(), beam_size=1), timeout=300)
    assert len(answer.segments) >= 3  # still serving


def test_the_command_prints_each_segment_as_json(server, speech, transcript):
    command = [sys.executable, "-m", "cli", "transcribe", str(speech), "--target", server.target]
    done = subprocess.run([*command, "--format", "json", "--word-timestamps"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    assert [p["text"] for p in printed] == [s.text for s in transcript.segments]
    assert [w["word"] for p in printed for w in p["words"]] == [w.word for s in transcript.segments for w in s.words]
    assert f"[{MODEL}: {transcript.duration:.1f} s of en]" in done.stderr
    missing = subprocess.run([*command[:4], "nowhere.wav"], capture_output=True, text=True)
    assert missing.returncode == 1 and "nowhere.wav: No such file" in missing.stderr


@pytest.fixture(scope="module")
def short_speech(tmp_path_factory):
    return write_wav(tmp_path_factory.mktemp("speech") / "one.wav", recording(HARVARD[9:10], seed=6))


@pytest.fixture(scope="module")
def short_transcript(server, short_speech):
    request = TranscribeRequest(audio=short_speech.read_bytes(), model=MODEL)
    return server.run(server.server.core.transcription.transcribe(request), timeout=300)


def test_kserve_grpc_infers_each_recording_of_an_audio_tensor(
    server, speech, short_speech, transcript, short_transcript
):
    """Raw contents, as tritonclient sends them: the recordings, then text and language for each."""
    stub = oip_grpc.GRPCInferenceServiceStub(server.channel())
    metadata = stub.ModelMetadata(oip.ModelMetadataRequest(name=MODEL), timeout=30)
    assert [(t.name, t.datatype) for t in metadata.inputs] == [("audio", "BYTES")]
    assert [(t.name, t.datatype) for t in metadata.outputs] == [("text", "BYTES"), ("language", "BYTES")]
    request = oip.ModelInferRequest(
        model_name=MODEL,
        inputs=[oip.ModelInferRequest.InferInputTensor(name="audio", datatype="BYTES", shape=[2])],
        raw_input_contents=[pack_bytes([speech.read_bytes(), short_speech.read_bytes()])],
    )
    request.parameters["beam_size"].int64_param = 5
    answer = stub.ModelInfer(request, timeout=300)
    outputs = {o.name: i for i, o in enumerate(answer.outputs)}
    texts = [t.decode() for t in unpack(answer.raw_output_contents[outputs["text"]])]
    assert texts == [transcript.text, short_transcript.text]
    assert unpack(answer.raw_output_contents[outputs["language"]]) == [b"en", b"en"]
    seconds = answer.parameters["audio_seconds"].int64_param
    assert seconds == int(np.ceil(transcript.duration + short_transcript.duration))
    request.raw_input_contents[0] = pack_bytes([short_speech.read_bytes(), b"not audio"])
    code, details = refusal(lambda: stub.ModelInfer(request, timeout=60))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("audio[1]: not audio"), details


def unpack(raw: bytes) -> list[bytes]:
    from service.kserve_protocol import unpack_bytes

    return unpack_bytes(raw, "output")


def test_kserve_rest_infers_audio_sent_as_binary_data_by_tritonclient(server, short_speech, short_transcript):
    with triton.InferenceServerClient(f"localhost:{server.server.http.port}") as client:
        audio = triton.InferInput("audio", [1], "BYTES")
        audio.set_data_from_numpy(np.array([short_speech.read_bytes()], dtype=np.object_), binary_data=True)
        result = client.infer(MODEL, [audio], parameters={"language": "en"})
        assert [t.decode() for t in result.as_numpy("text")] == [short_transcript.text]
        assert list(result.as_numpy("language")) == [b"en"]
        as_json = triton.InferInput("audio", [1], "BYTES")
        as_json.set_data_from_numpy(np.array([b"RIFF"], dtype=np.object_), binary_data=False)
        with pytest.raises(InferenceServerException) as refused:
            client.infer(MODEL, [as_json])
        assert "audio: send the recordings as binary data" in refused.value.message()


def test_the_metrics_count_audio_windows_and_word_timing(server, transcript):
    """After the transcript's (words timed): the audio heard, each recording's real-time factor, the windows
    each decode step held, and the word-alignment graph's runs, as Prometheus reads them."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"http://127.0.0.1:{server.server.metrics_server.port}/metrics").text
    samples = {
        (s.name, s.labels.get("stage")): s.value for f in text_string_to_metric_families(text) for s in f.samples
    }
    assert samples[("attnserve_audio_seconds_total", None)] >= transcript.duration
    assert samples[("attnserve_transcription_real_time_factor_count", None)] >= 1
    windows = samples[("attnserve_transcription_windows_per_step_count", None)]
    assert windows >= 1 and samples[("attnserve_transcription_windows_per_step_sum", None)] >= windows
    assert samples[("attnserve_batch_size_count", "word_alignment")] >= 1  # the transcript's word-timed window


@pytest.fixture(scope="module")
def blip(tmp_path_factory) -> bytes:
    """A quarter second of a tone: a recording that decodes fast whatever the options."""
    t = np.arange(4000) / 16_000
    path = write_wav(
        tmp_path_factory.mktemp("speech") / "blip.wav", (0.1 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    )
    return path.read_bytes()


FIELDS = ("audio", "task", "language", "prompt", "temperature", "beam_size", "model")


@settings(max_examples=60, deadline=None)
@given(
    audio=st.sampled_from(["blip", "junk", "empty"]),
    junk=st.binary(max_size=64),
    task=st.integers(-1, 3),
    language=st.sampled_from(["", "en", "de", "xx"]) | st.text(max_size=6),
    prompt=st.text(max_size=30),
    temperature=st.floats(width=32, allow_nan=True, allow_infinity=True) | st.just(0.0),
    beam_size=st.integers(0, 2**32 - 1) | st.integers(0, 20),
    word_timestamps=st.booleans(),
    model=st.sampled_from(["", MODEL]) | st.text(max_size=8),
)
def test_any_transcribe_request_is_answered_or_refused_by_name(server, blip, audio, junk, **fields):
    """Only OK, INVALID_ARGUMENT or NOT_FOUND, a refusal naming one of the request's fields; then the server
    still transcribes."""
    stub = server.stub()
    recording = {"blip": blip, "junk": junk, "empty": b""}[audio]
    try:
        stub.Transcribe(pb.TranscribeRequest(audio=recording, **fields), timeout=120)
    except grpc.RpcError as refused:
        assert refused.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), refused.details()
        assert refused.details().split(":")[0].split(".")[0] in FIELDS, refused.details()
    assert stub.Transcribe(pb.TranscribeRequest(audio=blip, beam_size=1), timeout=120).model == MODEL
