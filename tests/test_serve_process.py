"""`attnserve serve` as a process: configuration, startup failures, SIGTERM drain."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.grpc_api.pb import inference_pb2 as pb
from service.grpc_api.pb import inference_pb2_grpc as pb_grpc
from service.ops.config import ConfigError, ServerConfig, add_arguments, from_sources
from service.runner.sessions import nvidia_driver_present
from testing.server_process import ServerProcess

from .waits import wait_until


def parse(*argv: str, environ: dict | None = None) -> ServerConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_sources(parser.parse_args(list(argv)), environ or {})


def test_flags_override_environment_which_overrides_defaults():
    config = parse("--port", "6000", "--no-ort-spinning", environ={"ATTNSERVE_PORT": "7000",
                   "ATTNSERVE_MAX_BATCH_TOKENS": "999", "ATTNSERVE_ORT_SPINNING": "true", "ATTNSERVE_MODELS": "a,b"})  # fmt: skip
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
    result = subprocess.run(
        [sys.executable, "-m", "cli", "serve", "--host", "127.0.0.1", "--port", "0", "--http-port", "0", *argv],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert message in result.stderr
