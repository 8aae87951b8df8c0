"""`attnserve serve` as a process: configuration, startup failures (bad settings, a tampered model), SIGTERM
drain."""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.grpc_api.pb import inference_pb2 as pb
from service.grpc_api.pb import inference_pb2_grpc as pb_grpc
from service.ops.config import ConfigError, ServerConfig
from service.ops.config_sources import add_arguments, from_sources
from service.runner.sessions import nvidia_driver_present
from testing.server_process import LOCAL_PORTS, ServerProcess

from .grpc_outcomes import status_of
from .waits import wait_until


def parse(*argv: str, environ: dict | None = None) -> ServerConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_sources(parser.parse_args(list(argv)), environ or {})


def test_flags_override_environment_which_overrides_defaults():
    config = parse(
        "--port",
        "6000",
        "--no-ort-spinning",
        environ={
            "ATTNSERVE_PORT": "7000",
            "ATTNSERVE_MAX_BATCH_TOKENS": "999",
            "ATTNSERVE_ORT_SPINNING": "true",
            "ATTNSERVE_MODELS": "a,b",
        },
    )
    assert config.port == 6000 and config.max_batch_tokens == 999 and config.ort_spinning is False
    assert config.models == (Path("a"), Path("b"))
    assert parse().max_client_batch_size == ServerConfig().max_client_batch_size == 32


@pytest.mark.parametrize(
    "argv, environ, message",
    [
        (["--max-batch-size", "0"], {}, "max_batch_size must be > 0"),
        ([], {"ATTNSERVE_PORT": "http"}, "ATTNSERVE_PORT: invalid literal"),
        ([], {"ATTNSERVE_DEVICE": "tpu"}, "device must be one of auto, cuda, cpu"),
        ([], {"ATTNSERVE_ORT_SPINNING": "maybe"}, "not a boolean"),
    ],
)
def test_bad_settings_are_refused(argv, environ, message):
    with pytest.raises(ConfigError, match=message):
        parse(*argv, environ=environ)


def test_serve_help_documents_every_option_with_its_default():
    result = subprocess.run([sys.executable, "-m", "cli", "serve", "--help"], capture_output=True, text=True)
    text = " ".join(result.stdout.split())
    for name in ServerConfig.__dataclass_fields__:
        assert f"--{name.replace('_', '-')}" in text and f"env ATTNSERVE_{name.upper()}; default:" in text


def health_status(channel) -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2).status


def test_sigterm_drains_calls_in_flight_and_exits_0(minilm_dir):
    server = ServerProcess("--drain-seconds", "20", models=(str(minilm_dir),))
    process = server.process
    channel = grpc.insecure_channel(server.target)
    try:
        wait_until(lambda: health_status(channel) == health_pb2.HealthCheckResponse.SERVING)
        stub = pb_grpc.InferenceStub(channel)
        long_texts = [f"{i} " + "many words in a long text " * 60 for i in range(32)]
        in_flight = [stub.Embed.future(pb.EmbedRequest(inputs=long_texts)) for _ in range(4)]
        wait_until(lambda: server.metric("attnserve_requests_running") == 4, what="the 4 calls arrive")
        process.send_signal(signal.SIGTERM)
        wait_until(lambda: health_status(channel) == health_pb2.HealthCheckResponse.NOT_SERVING)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Embed(pb.EmbedRequest(inputs=["new call"]), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE and "shutting down" in refused.value.details()
        assert all(not f.done() for f in in_flight[1:]), "the calls finished before the drain began"
        for future in in_flight:
            assert len(future.result(timeout=30).embeddings) == 32
        assert process.wait(timeout=30) == 0
    finally:
        channel.close()
        if process.poll() is None:
            process.kill()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--models", "/nonexistent/model"], "manifest.json: missing"),
        (["--device", "cuda"], "CUDA"),
        (["--max-batch-tokens", "100"], "max_batch_tokens 100 is less than the longest input"),
    ],
)
def test_startup_failures_exit_non_zero_with_a_clear_message(minilm_dir, args, message):
    if args[:2] == ["--device", "cuda"] and nvidia_driver_present():
        pytest.skip("a GPU driver is present: --device cuda may well start")
    argv = ["--models", str(minilm_dir), *args] if args[0] != "--models" else args
    result = run_serve(*argv, timeout=120)
    assert result.returncode == 1
    assert message in result.stderr


def run_serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`attnserve serve` on free local ports, to its exit."""
    command = [sys.executable, "-m", "cli", "serve", *LOCAL_PORTS, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


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
        stub, health = pb_grpc.InferenceStub(channel), health_pb2_grpc.HealthStub(channel)
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
