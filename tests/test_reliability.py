"""Reliability: bad input, overload, deadlines, cancellation, faults, drain, slow readers, churn.
Every case checks status codes and counts, and that the server is healthy and back to its baseline
afterwards: no calls in flight, nothing queued, no cache rows, no extra tasks or file descriptors."""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from benchmarks.churn import churn
from benchmarks.server_process import ServerProcess
from model.numbers import pair, sample_number
from service.grpc_api.pb import inference_pb2 as pb
from service.server_thread import ServerThread

from .waits import wait_until


@dataclass(frozen=True)
class Baseline:
    tasks: int
    fds: int


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def baseline(server: ServerThread) -> Baseline:
    return Baseline(server.call_soon(lambda: len(asyncio.all_tasks())), open_fds())


def assert_back_to(server: ServerThread, before: Baseline, timeout: float = 60.0) -> None:
    """Nothing left behind: in flight, queued, running, cached, tasks, descriptors; and health SERVING."""

    def state():
        registry = server.server.core.registry
        out = {"in_flight": server.server.core.admission.in_flight, "tasks": len(asyncio.all_tasks())}
        for model in registry.models.values():
            if model.task == "embedding":
                out[f"{model.name} queued"] = model.batcher.queue_depth + len(model.batcher.running)
            else:
                s = model.scheduler
                out[f"{model.name} sequences"] = len(s.waiting) + s.running + s.cache.used
                out[f"{model.name} reserved"] = s.cache.reserved_tokens
        return out

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = server.call_soon(state)
        tasks = now.pop("tasks")
        if not any(now.values()) and tasks <= before.tasks and open_fds() <= before.fds + 2:
            break
        time.sleep(0.05)
    assert not any(now.values()), now
    assert tasks <= before.tasks, (tasks, before.tasks)
    assert open_fds() <= before.fds + 2, (open_fds(), before.fds)
    health = health_pb2_grpc.HealthStub(server.channel())
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING


def status_of(call) -> tuple[grpc.StatusCode, str]:
    try:
        call()
    except grpc.RpcError as error:
        return error.code(), error.details()
    return grpc.StatusCode.OK, ""


@pytest.fixture(scope="module")
def served(minilm_dir, numbers_dir):
    server = ServerThread(
        [minilm_dir, numbers_dir], max_message_bytes=1 << 20, stream_write_timeout=1.0, probe_seconds=0.2
    )
    yield server
    server.close()


def model_work(server) -> tuple[int, int]:
    models = server.server.core.registry.models
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
    ("Generate", pb.GenerateRequest(input="1", params=pb.GenerationParams(max_new_tokens=4000)),
     "INVALID_ARGUMENT", "params.max_new_tokens: 4000; at most 63"),
    ("Generate", pb.GenerateRequest(input="1", params=pb.GenerationParams(temperature=-0.5)),
     "INVALID_ARGUMENT", "params.temperature: -0.5; must be finite and >= 0"),
    ("Generate", pb.GenerateRequest(input="1", params=pb.GenerationParams(temperature=float("inf"))),
     "INVALID_ARGUMENT", "params.temperature: inf"),
    ("Generate", pb.GenerateRequest(input="1", params=pb.GenerationParams(temperature=1, top_p=float("nan"))),
     "INVALID_ARGUMENT", "params.top_p: nan; must be in (0, 1]"),
    ("Generate", pb.GenerateRequest(input="1", params=pb.GenerationParams(temperature=1, top_p=1.01)),
     "INVALID_ARGUMENT", "params.top_p: 1.01"),
    ("Generate", pb.GenerateRequest(input="1", params=pb.GenerationParams(top_k=5)),
     "INVALID_ARGUMENT", "params.top_k: only with sampling (temperature > 0)"),
    ("Generate", pb.GenerateRequest(input="1", params=pb.GenerationParams(seed=3)),
     "INVALID_ARGUMENT", "params.seed: only with sampling"),
    ("GenerateStream", pb.GenerateRequest(model="minilm", input="1"), "INVALID_ARGUMENT", "is an embedding model"),
]  # fmt: skip


@pytest.mark.parametrize("rpc, request_, code, message", BAD_REQUESTS)
def test_bad_input_is_refused_with_the_field_and_the_limit(served, rpc, request_, code, message):
    before, work = baseline(served), model_work(served)
    method = getattr(served.stub(), rpc)
    got, details = status_of(lambda: list(method(request_)) if rpc == "GenerateStream" else method(request_))
    assert got.name == code and message in details, details
    assert model_work(served) == work  # no model work for a refused call
    assert_back_to(served, before)


def test_unparsable_bytes_are_invalid_argument_not_internal(served):
    channel = served.channel()
    for method in ("Embed", "Generate", "GenerateStream", "Tokenize"):
        rpc = f"/attnserve.v1.Inference/{method}"
        call = (channel.unary_stream if method == "GenerateStream" else channel.unary_unary)(rpc)
        got, details = status_of(
            lambda: list(call(b"\xff\x00garbage")) if method == "GenerateStream" else call(b"\xff\x00garbage")
        )
        assert got == grpc.StatusCode.INVALID_ARGUMENT and "not a valid message" in details, (method, details)
    assert served.stub().Generate(pb.GenerateRequest(input="5")).text == "five"


def test_a_message_too_large_is_resource_exhausted_and_the_next_call_succeeds(served):
    before = baseline(served)
    got, details = status_of(lambda: served.stub().Embed(pb.EmbedRequest(inputs=["x" * (2 << 20)])))
    assert got == grpc.StatusCode.RESOURCE_EXHAUSTED, details
    assert len(served.stub().Embed(pb.EmbedRequest(inputs=["small"])).embeddings) == 1
    assert_back_to(served, before)


def test_overload_rejects_exactly_the_excess_at_once_and_health_still_answers(minilm_dir):
    limit, excess = 4, 6
    server = ServerThread([minilm_dir], max_concurrent_requests=limit)
    try:
        before = baseline(server)
        release = server.hold_model_thread()
        stub = server.stub()
        held = [stub.Embed.future(pb.EmbedRequest(inputs=[f"held {i}"])) for i in range(limit)]
        wait_until(lambda: server.call_soon(lambda: server.server.core.admission.in_flight) == limit, what="held")

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


def test_a_running_batch_whose_callers_all_left_is_stopped(served):
    """RunOptions.terminate: a long embedding call is cut short when its only caller's deadline passes."""
    before = baseline(served)
    batcher = served.server.core.registry.models["minilm"].batcher
    long = pb.EmbedRequest(inputs=[f"{i} " + "many words in a long text " * 50 for i in range(32)])
    started = time.perf_counter()
    stub = served.stub()
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
    assert_back_to(served, before)


def test_cancelling_10_of_100_streams_leaves_the_others_exact(served):
    before = baseline(served)
    rng = random.Random(11)
    inputs = [str(sample_number(rng)) for _ in range(100)]
    expected = [pair(int(text), to_digits=False)[1] for text in inputs]

    def run(i):
        stub = served.stub()
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
    assert_back_to(served, before)


def test_runner_faults_fail_only_their_batch_then_flip_health_until_a_probe_passes(served):
    before = baseline(served)
    model = served.server.core.registry.models["minilm"]
    real = model.runner.session
    health = health_pb2_grpc.HealthStub(served.channel())

    class Failing:
        def run(self, *args, **kwargs):
            raise RuntimeError("injected fault")

    def status():
        return health.Check(health_pb2.HealthCheckRequest(service="attnserve.v1.Inference")).status

    stub = served.stub()
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
    assert_back_to(served, before)


def rss_mb() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_slow_readers_are_cut_off_and_free_everything(served):
    """Streams whose clients stop reading: the server writes one message at a time (each within
    stream_write_timeout, 1 s here), generation runs to its end regardless and frees the cache rows, and
    the client's deadline ends what is left. Memory stays put."""
    before, memory = baseline(served), rss_mb()
    scheduler = served.server.core.registry.models["numbers"].scheduler
    steps = served.call_soon(lambda: scheduler.steps_run)
    # A tiny HTTP/2 window, so that an unread stream really blocks the server's writes.
    options = [("grpc.http2.lookahead_bytes", 256), ("grpc.http2.bdp_probe", 0)]
    channels = [grpc.insecure_channel(served.target, options=options) for _ in range(5)]
    streams = []
    request = pb.GenerateRequest(input=NUMBERS, params=pb.GenerationParams(ignore_eos=True, max_new_tokens=63))
    for i in range(50):
        stub = pb_stub(channels[i % 5])
        streams.append(stub.GenerateStream(request, timeout=8))
    # Every sequence is admitted, runs its 63 steps to the end and frees its row, though no client reads.
    wait_until(lambda: served.call_soon(lambda: scheduler.steps_run >= steps + 63 and scheduler.cache.used == 0),
               what="the unread generations finish and free their rows")  # fmt: skip
    codes = []
    for stream in streams:
        try:
            for _ in stream:
                pass
            codes.append(grpc.StatusCode.OK)
        except grpc.RpcError as error:
            codes.append(error.code())
    assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.DEADLINE_EXCEEDED}, set(codes)
    for channel in channels:
        channel.close()
    assert_back_to(served, before)
    assert rss_mb() - memory < 50


def test_a_slow_reader_of_model_stream_infer_is_cut_off_and_frees_everything(served):
    """The KServe v2 stream of requests holds one answer for a client that stops reading: after
    stream_write_timeout the server gives the stream up, and every request on it closes its record, leaves
    admission and frees its cache row. (The status the server then sends cannot leave while its last write
    is stuck in gRPC's core, so such a client meets its own deadline, as with GenerateStream above; this
    one's is far off, so that only the server's giving up can close the requests in time.)"""
    from service.grpc_api.pb import open_inference_pb2 as oip
    from service.grpc_api.pb import open_inference_pb2_grpc as oip_grpc

    before = baseline(served)
    registry = served.server.metrics.registry

    def recorded() -> float:  # ModelStreamInfer's requests closed so far, whatever their code
        return sum(registry.get_sample_value("attnserve_requests_total", {"rpc": "ModelStreamInfer", "model": "numbers",
                   "code": code}) or 0 for code in ("OK", "CANCELLED"))  # fmt: skip

    already = recorded()
    options = [("grpc.http2.lookahead_bytes", 256), ("grpc.http2.bdp_probe", 0)]
    channel = grpc.insecure_channel(served.target, options=options)

    def requests():
        for i in range(20):
            request = oip.ModelInferRequest(model_name="numbers", id=str(i))
            request.inputs.add(name="text", datatype="BYTES", shape=[1]).contents.bytes_contents.append(
                NUMBERS.encode()
            )
            request.parameters["stream"].bool_param = True
            request.parameters["ignore_eos"].bool_param = True
            request.parameters["max_new_tokens"].int64_param = 63
            yield request

    answers = oip_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(requests(), timeout=300)
    # Reading would unblock the server, so read only once it has given the stream up: every request closed.
    wait_until(lambda: recorded() - already == 20, what="the stream cut off and its 20 requests closed")
    answers.cancel()
    channel.close()
    assert_back_to(served, before)


def pb_stub(channel):
    from service.grpc_api.pb import inference_pb2_grpc

    return inference_pb2_grpc.InferenceStub(channel)


def test_clients_killed_mid_call_leave_nothing_behind(served):
    """20 s here; benchmarks/churn.py runs the same for 3 minutes against a server process."""
    before = baseline(served)
    killed = churn(served.target, seconds=20)
    assert killed >= 20
    assert_back_to(served, before)
    assert served.stub().Generate(pb.GenerateRequest(input="3")).text == "three"


def run_serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", "serve", "--host", "127.0.0.1", "--port", "0",
                           "--metrics-port", "0", "--http-port", "0", *args], capture_output=True, text=True, timeout=timeout)  # fmt: skip


def test_a_tampered_model_refuses_to_start(minilm_dir, copy_of):
    model_dir = copy_of(minilm_dir)
    data = bytearray((model_dir / "onnx" / "encoder.onnx").read_bytes())
    data[-100] ^= 0xFF
    (model_dir / "onnx" / "encoder.onnx").write_bytes(bytes(data))
    result = run_serve("--models", str(model_dir))
    assert result.returncode == 1 and re.search(r"encoder.onnx: sha256 \w+ does not match", result.stderr)


def test_contradictory_settings_refuse_to_start(minilm_dir, tmp_path):
    (tmp_path / "cert.pem").write_text("x")
    for args, message in [
        (["--tls-cert", str(tmp_path / "cert.pem")], "tls_cert and tls_key go together"),
        (["--port", "7000", "--metrics-port", "7000"], "port and metrics_port are both 7000"),
        (["--max-batch-tokens", "100"], "max_batch_tokens 100 is less than the longest input"),
    ]:
        result = run_serve("--models", str(minilm_dir), *args)
        assert result.returncode != 0 and message in result.stderr, result.stderr[-500:]


def arrived(server: ServerProcess) -> float:
    """Embed calls the server has taken: answered, then running (read in that order, a call moving from
    running to answered between the two reads is missed, never counted twice)."""
    return server.metric("attnserve_requests_total", rpc="Embed") + server.metric("attnserve_requests_running")


def test_sigterm_finishes_short_calls_and_turns_away_long_and_new_ones(minilm_dir):
    grace = 1.0
    server = ServerProcess("--drain-seconds", str(grace), models=(str(minilm_dir),))
    channel = grpc.insecure_channel(server.target)
    try:
        stub, health = pb_stub(channel), health_pb2_grpc.HealthStub(channel)
        # In this order through the one model thread: short calls (ms), a medium one (tenths of a second),
        # then long ones (32 texts of 256 tokens: seconds each), all in flight when SIGTERM comes.
        short = [stub.Embed.future(pb.EmbedRequest(inputs=[f"short {i}"])) for i in range(3)]
        medium = stub.Embed.future(pb.EmbedRequest(inputs=[f"{i} a sentence of moderate length" for i in range(32)]))
        wait_until(lambda: arrived(server) >= 4, what="the short and medium calls arrive")
        long = pb.EmbedRequest(inputs=[f"{i} " + "many words in a long text " * 50 for i in range(32)])
        longs = [stub.Embed.future(long) for _ in range(4)]
        wait_until(lambda: arrived(server) >= 8, what="the long calls arrive")
        server.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        wait_until(
            lambda: (
                health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
                == health_pb2.HealthCheckResponse.NOT_SERVING
            ),
            what="health turns NOT_SERVING",
        )
        assert (
            status_of(lambda: stub.Embed(pb.EmbedRequest(inputs=["new"]), timeout=5))[0] == grpc.StatusCode.UNAVAILABLE
        )
        assert all(len(f.result(timeout=30).embeddings) == 1 for f in short)
        assert len(medium.result(timeout=30).embeddings) == 32
        codes = [status_of(f.result)[0] for f in longs]
        # Those that could not finish within the grace were turned away (at least the last: seconds of work
        # remained after the grace); none failed any other way.
        assert codes[-1] == grpc.StatusCode.UNAVAILABLE and set(codes) <= {
            grpc.StatusCode.OK,
            grpc.StatusCode.UNAVAILABLE,
        }
        assert server.process.wait(timeout=30) == 0
        # It did not wait for the long calls (seconds each): the grace, then a prompt stop.
        assert time.monotonic() - signalled < grace + 3.0
    finally:
        channel.close()
        if server.process.poll() is None:
            server.process.kill()
