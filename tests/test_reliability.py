"""Reliability: bad input, overload, deadlines, cancellation, faults, drain, churn (slow readers:
test_stalled_streams.py).
Every case checks status codes and counts, and that the server is healthy and back to its baseline
afterwards: no calls in flight, nothing queued, no cache rows, no extra tasks or file descriptors."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from model.bundled.numbers import pair, sample_number
from service.grpc_api.pb import inference_pb2 as pb
from testing.churn import churn
from testing.server_thread import ServerThread

from .grpc_outcomes import status_of
from .server_state import assert_back_to, baseline
from .waits import wait_until


@pytest.fixture(scope="module")
def strict_server(minilm_dir, numbers_dir):
    server = ServerThread(
        [minilm_dir, numbers_dir], max_message_bytes=1 << 20, stream_write_timeout=1.0, probe_seconds=0.2
    )
    yield server
    server.close()


def model_work(server) -> tuple[int, int]:
    models = server.engine_core.registry.models
    return models["minilm"].batcher.texts_run, models["numbers"].scheduler.steps_run


NUMBERS = "nine hundred and ninety-nine"

BAD_REQUESTS = [
    ("Embed", pb.EmbedRequest(), "INVALID_ARGUMENT", "inputs: empty; send 1 to 32 texts"),
    ("Embed", pb.EmbedRequest(inputs=["x"] * 1000), "INVALID_ARGUMENT", "inputs: 1000 texts; at most 32"),
    ("Embed", pb.EmbedRequest(inputs=["ok", "a\x00b"]), "INVALID_ARGUMENT", "inputs[1]: contains a NUL character"),
    ("Embed", pb.EmbedRequest(inputs=["word " * 400], truncate=False), "INVALID_ARGUMENT", "more than 256 tokens"),
    ("Embed", pb.EmbedRequest(model="gpt-99", inputs=["x"]), "NOT_FOUND", "model: 'gpt-99' is not served here"),
    ("Tokenize", pb.TokenizeRequest(inputs=[""]), "INVALID_ARGUMENT", "inputs[0]: empty text"),
    ("Generate", pb.GenerateRequest(input="1\x00"), "INVALID_ARGUMENT", "input: contains a NUL character"),
    ("Generate", pb.GenerateRequest(input="9" * 100), "INVALID_ARGUMENT", "input: more than 32 tokens"),
    (
        "Generate",
        pb.GenerateRequest(input="1", params=pb.GenerationParams(max_new_tokens=4000)),
        "INVALID_ARGUMENT",
        "params.max_new_tokens: 4000; at most 63",
    ),
    (
        "Generate",
        pb.GenerateRequest(input="1", params=pb.GenerationParams(temperature=-0.5)),
        "INVALID_ARGUMENT",
        "params.temperature: -0.5; must be finite and >= 0",
    ),
    (
        "Generate",
        pb.GenerateRequest(input="1", params=pb.GenerationParams(temperature=float("inf"))),
        "INVALID_ARGUMENT",
        "params.temperature: inf",
    ),
    (
        "Generate",
        pb.GenerateRequest(input="1", params=pb.GenerationParams(temperature=1, top_p=float("nan"))),
        "INVALID_ARGUMENT",
        "params.top_p: nan; must be in (0, 1]",
    ),
    (
        "Generate",
        pb.GenerateRequest(input="1", params=pb.GenerationParams(temperature=1, top_p=1.01)),
        "INVALID_ARGUMENT",
        "params.top_p: 1.01",
    ),
    (
        "Generate",
        pb.GenerateRequest(input="1", params=pb.GenerationParams(top_k=5)),
        "INVALID_ARGUMENT",
        "params.top_k: only with sampling (temperature > 0)",
    ),
    (
        "Generate",
        pb.GenerateRequest(input="1", params=pb.GenerationParams(seed=3)),
        "INVALID_ARGUMENT",
        "params.seed: only with sampling",
    ),
    ("GenerateStream", pb.GenerateRequest(model="minilm", input="1"), "INVALID_ARGUMENT", "is an embedding model"),
]


@pytest.mark.parametrize("rpc, request_, code, message", BAD_REQUESTS)
def test_bad_input_is_refused_with_the_field_and_the_limit(strict_server, rpc, request_, code, message):
    before, work = baseline(strict_server), model_work(strict_server)
    method = getattr(strict_server.stub(), rpc)
    got, details = status_of(lambda: list(method(request_)) if rpc == "GenerateStream" else method(request_))
    assert got.name == code and message in details, details
    assert model_work(strict_server) == work  # no model work for a refused call
    assert_back_to(strict_server, before)


def test_unparsable_bytes_are_invalid_argument_not_internal(strict_server):
    channel = strict_server.channel()
    for method in ("Embed", "Generate", "GenerateStream", "Tokenize"):
        rpc = f"/attnserve.v1.Inference/{method}"
        call = (channel.unary_stream if method == "GenerateStream" else channel.unary_unary)(rpc)
        got, details = status_of(
            lambda: list(call(b"\xff\x00garbage")) if method == "GenerateStream" else call(b"\xff\x00garbage")
        )
        assert got == grpc.StatusCode.INVALID_ARGUMENT and "not a valid message" in details, (method, details)
    assert strict_server.stub().Generate(pb.GenerateRequest(input="5")).text == "five"


def test_a_message_too_large_is_resource_exhausted_and_the_next_call_succeeds(strict_server):
    before = baseline(strict_server)
    got, details = status_of(lambda: strict_server.stub().Embed(pb.EmbedRequest(inputs=["x" * (2 << 20)])))
    assert got == grpc.StatusCode.RESOURCE_EXHAUSTED, details
    assert len(strict_server.stub().Embed(pb.EmbedRequest(inputs=["small"])).embeddings) == 1
    assert_back_to(strict_server, before)


def test_overload_rejects_exactly_the_excess_at_once_and_health_still_answers(minilm_dir):
    limit, excess = 4, 6
    server = ServerThread([minilm_dir], max_concurrent_requests=limit)
    try:
        before = baseline(server)
        release = server.hold_model_thread()
        stub = server.stub()
        held = [stub.Embed.future(pb.EmbedRequest(inputs=[f"held {i}"])) for i in range(limit)]
        wait_until(lambda: server.call_and_wait(lambda: server.server.core.admission.in_flight) == limit, what="held")

        def extra(i):
            started = time.perf_counter()
            code, details = status_of(lambda: stub.Embed(pb.EmbedRequest(inputs=[f"extra {i}"]), timeout=5))
            return code, details, time.perf_counter() - started

        with ThreadPoolExecutor(excess) as pool:
            results = list(pool.map(extra, range(excess)))
        assert [c for c, _, _ in results] == [grpc.StatusCode.RESOURCE_EXHAUSTED] * excess
        assert all("max_concurrent_requests 4" in d for _, d, _ in results)
        # At once: a call that waited would wait for the held model thread, past its 5 s deadline.
        assert max(s for _, _, s in results) < 2.5, [round(s, 4) for _, _, s in results]
        health = health_pb2_grpc.HealthStub(server.channel())
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=1).status == health_pb2.HealthCheckResponse.SERVING
        release.set()
        assert all(len(f.result(timeout=10).embeddings) == 1 for f in held)
        assert_back_to(server, before)
    finally:
        server.close()


def test_a_running_batch_whose_callers_all_left_is_stopped(strict_server):
    """RunOptions.terminate: a long embedding call is cut short when its only caller's deadline passes."""
    before = baseline(strict_server)
    batcher = strict_server.engine_core.registry.models["minilm"].batcher
    long = pb.EmbedRequest(inputs=[f"{i} " + "many words in a long text " * 50 for i in range(32)])
    started = time.perf_counter()
    stub = strict_server.stub()
    stub.Embed(long)  # how long the whole call takes
    whole = time.perf_counter() - started
    assert whole > 0.3, "the call is too quick to be cut short measurably"
    runs = batcher.batches_run
    started = time.perf_counter()
    got, _ = status_of(lambda: stub.Embed(long, timeout=0.1))
    assert got == grpc.StatusCode.DEADLINE_EXCEEDED
    stub.Embed(pb.EmbedRequest(inputs=["next"]))  # waits for the model thread
    freed_after = time.perf_counter() - started
    assert freed_after < 0.1 + whole / 2, (freed_after, whole)
    assert batcher.batches_run == runs + 1  # only "next" completed
    assert_back_to(strict_server, before)


def test_cancelling_10_of_100_streams_leaves_the_others_exact(strict_server):
    before = baseline(strict_server)
    rng = random.Random(11)
    inputs = [str(sample_number(rng)) for _ in range(100)]
    expected = [pair(int(text), to_digits=False)[1] for text in inputs]

    def run(i):
        stub = strict_server.stub()
        stream = stub.GenerateStream(
            pb.GenerateRequest(input=inputs[i], params=pb.GenerationParams(max_new_tokens=63, ignore_eos=i % 10 == 0))
        )
        if i % 10 == 0:  # these ask for 63 tokens and leave after 5
            tokens = 0
            for message in stream:
                tokens += len(message.token_ids)
                if tokens >= 5:
                    stream.cancel()
                    break
            return None
        return "".join(m.text for m in stream)

    with ThreadPoolExecutor(100) as pool:
        results = list(pool.map(run, range(100)))
    for i, (text, result) in enumerate(zip(expected, results)):
        if i % 10:
            assert result == text, inputs[i]
    assert_back_to(strict_server, before)


def test_runner_faults_fail_only_their_batch_then_flip_health_until_a_probe_passes(strict_server):
    before = baseline(strict_server)
    model = strict_server.engine_core.registry.models["minilm"]
    real = model.runner.session
    health = health_pb2_grpc.HealthStub(strict_server.channel())

    class Failing:
        def run(self, *args, **kwargs):
            raise RuntimeError("injected fault")

    def status():
        return health.Check(health_pb2.HealthCheckRequest(service="attnserve.v1.Inference")).status

    stub = strict_server.stub()
    try:
        model.runner.session = Failing()
        got, details = status_of(lambda: stub.Embed(pb.EmbedRequest(inputs=["one fault"])))
        assert got == grpc.StatusCode.INTERNAL and "internal error" in details
        model.runner.session = real
        assert len(stub.Embed(pb.EmbedRequest(inputs=["fine again"])).embeddings) == 1
        assert status() == health_pb2.HealthCheckResponse.SERVING
        assert stub.Generate(pb.GenerateRequest(input="4")).text == "four"  # other models unaffected

        model.runner.session = Failing()
        for _ in range(3):  # fault_threshold
            assert status_of(lambda: stub.Embed(pb.EmbedRequest(inputs=["fault"])))[0] == grpc.StatusCode.INTERNAL
        wait_until(lambda: status() == health_pb2.HealthCheckResponse.NOT_SERVING, what="health NOT_SERVING")
        time.sleep(0.5)  # probes run every 0.2 s, and fail while the fault lasts
        assert status() == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        model.runner.session = real
    # a passing probe restores it
    wait_until(lambda: status() == health_pb2.HealthCheckResponse.SERVING, what="health SERVING again")
    assert_back_to(strict_server, before)


def test_clients_killed_mid_call_leave_nothing_behind(strict_server):
    """20 s here; benchmarks/churn.py runs the same for 3 minutes against a server process."""
    before = baseline(strict_server)
    killed = churn(strict_server.target, seconds=20)
    assert killed >= 20
    assert_back_to(strict_server, before)
    assert strict_server.stub().Generate(pb.GenerateRequest(input="3")).text == "three"
