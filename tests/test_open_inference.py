"""The KServe v2 / Open Inference Protocol on the gRPC port: a real server (the real models), called with
Triton's own client (tritonclient, in a process of its own: tests/triton_client_calls.py) and with stubs
generated from our proto for what tritonclient does not send (`contents` instead of raw bytes, broken raw
bytes). Its answers must be the attnserve.v1 API's, and its refusals name the same limits."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from hypothesis import given
from hypothesis import strategies as st

from service.grpc_api.client import Client
from service.grpc_api.pb import open_inference_pb2 as oip
from service.grpc_api.pb import open_inference_pb2_grpc as oip_grpc
from testing.server_thread import ServerThread

from .waits import wait_until

CALLS = Path(__file__).with_name("triton_client_calls.py")
PERF_ANALYZER = Path(__file__).resolve().parent.parent / "benchmarks" / "perf_analyzer.sh"
TEXTS = ["The delivery truck blocked the narrow street.", "A cat sleeps on the warm windowsill.", "Hello"]
NUMBERS = ["12", "345", "7"]


def triton_calls(target: str, *args: str) -> dict:
    result = subprocess.run([sys.executable, str(CALLS), target, *args], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def triton(served) -> dict:
    """Everything tests/triton_client_calls.py asked with tritonclient, and the answers."""
    return triton_calls(served.target)


@pytest.fixture(scope="module")
def stub(served) -> oip_grpc.GRPCInferenceServiceStub:
    return oip_grpc.GRPCInferenceServiceStub(served.channel())


def ok(outcome: dict):
    assert "ok" in outcome, outcome
    return outcome["ok"]


def test_liveness_readiness_and_metadata(triton):
    assert ok(triton["live"]) is True and ok(triton["ready"]) is True
    ready = {name: ok(answer) for name, answer in triton["model_ready"].items()}
    assert ready == {"minilm@": True, "numbers@1": True, "absent@": False, "minilm@2": False}
    assert ok(triton["server_metadata"])["name"] == "attnserve"
    minilm, numbers = ok(triton["metadata"]["minilm"]), ok(triton["metadata"]["numbers"])
    assert minilm["versions"] == ["1"]
    assert minilm["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": ["-1"]}]
    assert minilm["outputs"] == [{"name": "embedding", "datatype": "FP32", "shape": ["-1", "384"]}]
    assert [(o["name"], o["datatype"]) for o in numbers["outputs"]] == [
        ("text", "BYTES"),
        ("token_ids", "INT64"),
        ("finish_reason", "BYTES"),
    ]
    config = ok(triton["config"])["config"]
    assert config["name"] == "minilm" and config.get("max_batch_size", 0) == 0
    assert config["input"] == [{"name": "text", "data_type": "TYPE_STRING", "dims": ["-1"]}]


def test_embeddings_are_the_grpc_api_vectors(served, triton):
    with Client(served.target) as client:
        expected = client.embed(TEXTS, model="minilm").vectors
    answer = ok(triton["embed"])
    embedding = answer["outputs"]["embedding"]
    assert answer["model"] == "minilm" and answer["id"] == "e1"  # the request's id comes back
    assert embedding["shape"] == [3, 384] and embedding["datatype"] == "FP32"
    np.testing.assert_allclose(np.array(embedding["values"]), expected, atol=1e-6)
    assert answer["parameters"]["prompt_tokens"] > len(TEXTS)
    # [N, 1], as Triton models with a batch dimension take texts, gives the same
    np.testing.assert_allclose(
        np.array(ok(triton["embed_column"])["outputs"]["embedding"]["values"]), expected, atol=1e-6
    )
    short = np.array(ok(triton["embed_dimensions"])["outputs"]["embedding"]["values"])
    assert short.shape == (3, 64)
    np.testing.assert_allclose(np.linalg.norm(short, axis=1), 1.0, atol=1e-5)
    cut = expected[:, :64] / np.linalg.norm(expected[:, :64], axis=1, keepdims=True)
    np.testing.assert_allclose(short, cut, atol=1e-5)


def test_generation_is_the_grpc_api_generation(served, triton):
    with Client(served.target) as client:
        expected = [client.generate(text, model="numbers", max_new_tokens=20) for text in NUMBERS]
        beams = client.generate("345", model="numbers", num_beams=3, num_return_sequences=3)
    outputs = ok(triton["generate"])["outputs"]
    assert (
        outputs["text"]["values"] == [r.text for r in expected] == ["twelve", "three hundred and forty-five", "seven"]
    )
    longest = max(len(r.token_ids) for r in expected)
    assert outputs["token_ids"]["shape"] == [3, longest]
    assert outputs["token_ids"]["values"] == [list(r.token_ids) + [-1] * (longest - len(r.token_ids)) for r in expected]
    assert outputs["finish_reason"]["values"] == ["eos"] * 3
    assert list(ok(triton["generate_text_only"])["outputs"]) == ["text"]
    with Client(served.target) as client:
        sampled = [client.generate(text, model="numbers", **triton["sampled_with"]).text for text in NUMBERS]
    assert ok(triton["generate_sampled"])["outputs"]["text"]["values"] == sampled
    n_best = ok(triton["beams"])["outputs"]
    assert n_best["text"]["shape"] == [1, 3] and n_best["token_ids"]["shape"][:2] == [1, 3]
    assert n_best["text"]["values"] == [[h.text for h in beams.hypotheses]]


@pytest.mark.parametrize(
    "case, code, message",
    [
        ("unknown_model", "NOT_FOUND", "model_name: 'absent' is not served here (served: minilm, numbers)"),
        ("version", "NOT_FOUND", "model_version: '2' is not served; model 'minilm' has version 1"),
        ("input_name", "INVALID_ARGUMENT", "inputs.name: ['sentence']; the model takes one input tensor, 'text'"),
        ("datatype", "INVALID_ARGUMENT", "text: datatype 'FP32'; send BYTES"),
        ("empty_text", "INVALID_ARGUMENT", "text[1]: empty text"),
        ("too_many", "INVALID_ARGUMENT", "text: 33 texts; at most 32 per call (max_client_batch_size)"),
        ("dimensions", "INVALID_ARGUMENT", "parameters.dimensions: 999; 1 to 384 for model 'minilm'"),
        (
            "unknown_parameter",
            "INVALID_ARGUMENT",
            "parameters.temperature: not a parameter of this model; it takes normalize",
        ),
        ("parameter_kind", "INVALID_ARGUMENT", "parameters.temperature: string_param; send a number (double_param)"),
        ("max_new_tokens", "INVALID_ARGUMENT", "parameters.max_new_tokens: 1000000; at most 63 for model 'numbers'"),
        ("prompt_empty", "INVALID_ARGUMENT", "text[1]: empty text"),
        ("output_name", "INVALID_ARGUMENT", "outputs: 'logits' is not an output of model 'minilm'"),
    ],
)
def test_refusals_name_the_tensor_or_parameter_and_the_limit(triton, case, code, message):
    refusal = triton["errors"][case]
    assert refusal.get("code") == code, refusal
    assert refusal["message"].startswith(message), refusal


def test_refusals_state_the_same_limits_as_the_grpc_api(served, triton):
    """The same mistake on both services: the same words after the field's name."""
    with Client(served.target) as client:
        with pytest.raises(grpc.RpcError) as error:
            client.generate("12", model="numbers", max_new_tokens=10**6)
        grpc_message = error.value.details()
        with pytest.raises(grpc.RpcError) as error:
            client.embed(["x"] * 33, model="minilm")
        grpc_count = error.value.details()
    assert grpc_message.split(": ", 1)[1] == triton["errors"]["max_new_tokens"]["message"].split(": ", 1)[1]
    assert grpc_count.split(": ", 1)[1] == triton["errors"]["too_many"]["message"].split(": ", 1)[1]


def test_stream_answers_each_request_and_goes_on_after_an_error(triton):
    responses = ok(triton["stream"])
    pieces = [r for r in responses if r.get("id") == "s1"]
    assert "".join(r["text"] for r in pieces) == "one hundred and twenty-three" and len(pieces) > 2
    assert [r["final"] for r in pieces] == [False] * (len(pieces) - 1) + [True]
    assert [r for r in responses if "error" in r] == [
        {"error": "model_name: 'absent' is not served here (served: minilm, numbers)"}
    ]
    assert [r["final"] for r in responses if r.get("id") == "s2"] == [True]


def text_request(model: str, texts: list[bytes], raw: bool, **parameters) -> oip.ModelInferRequest:
    request = oip.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="text", datatype="BYTES", shape=[len(texts)])
    if raw:
        request.raw_input_contents.append(b"".join(struct.pack("<I", len(t)) + t for t in texts))
    else:
        tensor.contents.bytes_contents.extend(texts)
    for name, value in parameters.items():
        request.parameters[name].int64_param = value
    return request


def test_contents_come_back_as_contents(stub, served):
    """A client that sends `contents` (KServe's own clients may) gets `contents`; raw gets raw."""
    texts = [t.encode() for t in TEXTS]
    plain = stub.ModelInfer(text_request("minilm", texts, raw=False))
    raw = stub.ModelInfer(text_request("minilm", texts, raw=True))
    assert not plain.raw_output_contents and len(raw.raw_output_contents) == 1
    (output,) = plain.outputs
    assert (output.name, output.datatype, list(output.shape)) == ("embedding", "FP32", [3, 384])
    from_contents = np.array(output.contents.fp32_contents, np.float32).reshape(3, 384)
    np.testing.assert_array_equal(from_contents, np.frombuffer(raw.raw_output_contents[0], "<f4").reshape(3, 384))
    generated = stub.ModelInfer(text_request("numbers", [b"12", b"345"], raw=False, max_new_tokens=20))
    text, token_ids, _ = generated.outputs
    assert list(text.contents.bytes_contents) == [b"twelve", b"three hundred and forty-five"]
    assert list(token_ids.shape) == [2, 4] and token_ids.contents.int64_contents[4:] == [106, 54, 16, 44]


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"\x05\x00\x00", "text: raw contents end inside the length of element 0"),
        (b"\x09\x00\x00\x00short", "text: element 0 claims 9 bytes; 5 are left"),
        (b"\x02\x00\x00\x00\xff\xfe", "text[0]: not UTF-8 (invalid start byte at byte 0)"),
        (b"\x01\x00\x00\x00a\x01\x00\x00\x00b", "text: shape [1] holds 1 elements; the contents have 2"),
    ],
)
def test_broken_raw_bytes_are_refused(stub, raw, message):
    request = oip.ModelInferRequest(model_name="minilm", raw_input_contents=[raw])
    request.inputs.add(name="text", datatype="BYTES", shape=[1])
    with pytest.raises(grpc.RpcError) as error:
        stub.ModelInfer(request)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and error.value.details() == message


def test_a_request_that_does_not_parse_is_invalid_argument(served):
    infer = served.channel().unary_unary("/inference.GRPCInferenceService/ModelInfer")
    with pytest.raises(grpc.RpcError) as error:
        infer(b"\xff\xff\xff")
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details().startswith("request: not a valid message for ModelInfer")


@given(
    raw=st.binary(max_size=64),
    shape=st.lists(st.integers(-2, 40), min_size=0, max_size=3),
    datatype=st.sampled_from(["BYTES", "FP32", ""]),
)
def test_any_tensor_is_answered_or_refused_never_failed(stub, raw, shape, datatype):
    request = oip.ModelInferRequest(model_name="minilm", raw_input_contents=[raw])
    request.inputs.add(name="text", datatype=datatype, shape=shape)
    try:
        response = stub.ModelInfer(request)
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    else:
        assert list(response.outputs[0].shape) == [shape[0], 384]


def test_health_reflection_and_metrics_cover_the_service(served, stub):
    channel = served.channel()
    health = health_pb2_grpc.HealthStub(channel)
    status = health.Check(health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService")).status
    assert status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    (answer,) = reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    assert "inference.GRPCInferenceService" in {s.name for s in answer.list_services_response.service}
    sample = {"rpc": "ModelInfer", "model": "minilm", "code": "OK"}
    before = served.metrics_registry.get_sample_value("attnserve_requests_total", sample) or 0
    stub.ModelInfer(text_request("minilm", [b"counted"], raw=True))
    assert served.metrics_registry.get_sample_value("attnserve_requests_total", sample) == before + 1


def test_draining_turns_inference_away_and_readiness_false(minilm_dir):
    server = ServerThread([minilm_dir])
    try:
        stub = oip_grpc.GRPCInferenceServiceStub(server.channel())
        assert stub.ServerReady(oip.ServerReadyRequest()).ready
        assert stub.ModelReady(oip.ModelReadyRequest(name="minilm")).ready
        server.loop.call_soon_threadsafe(server.server.core.start_draining)
        wait_until(lambda: not stub.ServerReady(oip.ServerReadyRequest()).ready, what="ServerReady to turn false")
        assert stub.ServerLive(oip.ServerLiveRequest()).live
        assert not stub.ModelReady(oip.ModelReadyRequest(name="minilm")).ready
        with pytest.raises(grpc.RpcError) as error:
            stub.ModelInfer(text_request("minilm", [b"after"], raw=True))
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE and "shutting down" in error.value.details()
    finally:
        server.close()


def test_bearer_tokens_guard_the_service(minilm_dir, tmp_path):
    (tmp_path / "tokens").write_text("kserve-secret\n")
    server = ServerThread([minilm_dir], auth_token_file=str(tmp_path / "tokens"))
    try:
        answers = triton_calls(server.target, "--token", "kserve-secret")
        assert answers["without_token"]["code"] == "UNAUTHENTICATED"
        assert ok(answers["with_token"])["outputs"]["embedding"]["shape"] == [3, 384]
    finally:
        server.close()


def test_perf_analyzer_drives_model_infer(served, tmp_path):
    """NVIDIA's load generator, unchanged (make test installs it: make perf-analyzer): it reads the model's
    metadata and Triton config, then sends raw BYTES from two workers. A functional check, not a
    measurement: any throughput counts as stable (-s 1000)."""
    assert PERF_ANALYZER.exists()
    sample = {"rpc": "ModelInfer", "model": "minilm", "code": "OK"}
    before = served.metrics_registry.get_sample_value("attnserve_requests_total", sample) or 0
    report = tmp_path / "report.csv"
    command = [
        str(PERF_ANALYZER),
        "-m",
        "minilm",
        "-u",
        served.target,
        "-i",
        "grpc",
        "--shape",
        "text:1",
        "--string-data",
        "The delivery truck blocked the narrow street.",
        "--concurrency-range",
        "2:2",
        "--measurement-mode",
        "count_windows",
        "--measurement-request-count",
        "40",
        "-s",
        "1000",
        "-f",
        str(report),
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    header, row = report.read_text().splitlines()[:2]
    figures = dict(zip(header.split(","), row.split(",")))
    assert figures["Concurrency"] == "2" and float(figures["Inferences/Second"]) > 0
    assert int(figures["p99 latency"]) >= int(figures["p50 latency"]) > 0
    served_now = served.metrics_registry.get_sample_value("attnserve_requests_total", sample)
    assert served_now - before >= 3 * 40  # at least three windows of 40 requests
