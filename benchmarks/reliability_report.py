"""Figures for docs/reliability.md, measured against real servers: how fast overload is refused, how
long a refused bad request takes, how a fault turns health and how a probe restores it, how long a
drain takes, how long a server takes to become ready. (The pass/fail checks are the tests.)

    .venv/bin/python -m benchmarks.reliability_report
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.grpc_api.pb import inference_pb2 as pb
from testing.server_process import ServerProcess
from testing.server_thread import ServerThread

from .common import print_table, write_results

MODELS = ["build/models/minilm", "build/models/numbers"]


def timed_status(call) -> tuple[str, float]:
    started = time.perf_counter()
    try:
        call()
        code = "OK"
    except grpc.RpcError as error:
        code = error.code().name
    return code, (time.perf_counter() - started) * 1e3


def overload(limit: int = 8, excess: int = 32) -> dict:
    server = ServerThread(MODELS, max_concurrent_requests=limit)
    try:
        release = server.hold_model_thread()
        stub = server.stub()
        held = [stub.Embed.future(pb.EmbedRequest(inputs=[f"held {i}"])) for i in range(limit)]
        while server.server.core.admission.in_flight < limit:
            time.sleep(0.01)
        with ThreadPoolExecutor(excess) as pool:
            refused = list(
                pool.map(lambda i: timed_status(lambda: stub.Embed(pb.EmbedRequest(inputs=["x"]))), range(excess))
            )
        health = health_pb2_grpc.HealthStub(server.channel())
        checks = [timed_status(lambda: health.Check(health_pb2.HealthCheckRequest())) for _ in range(20)]
        release.set()
        [f.result() for f in held]
    finally:
        server.close()
    latencies = [ms for _, ms in refused]
    return {
        "limit": limit,
        "excess": excess,
        "refused": sum(code == "RESOURCE_EXHAUSTED" for code, _ in refused),
        "refusal_ms_p50": statistics.median(latencies),
        "refusal_ms_max": max(latencies),
        "health_ms_p50": statistics.median(ms for _, ms in checks),
        "health_codes": sorted({c for c, _ in checks}),
    }


def bad_requests(n: int = 200) -> dict:
    server = ServerThread(MODELS)
    try:
        stub = server.stub()
        cases = {
            "Embed, 40 inputs": lambda: stub.Embed(pb.EmbedRequest(inputs=["x"] * 40)),
            "Generate, temperature NaN": lambda: stub.Generate(
                pb.GenerateRequest(input="1", params=pb.GenerationParams(temperature=float("nan")))
            ),
            "Generate, unknown model": lambda: stub.Generate(pb.GenerateRequest(model="nope", input="1")),
        }
        out = {}
        for name, call in cases.items():
            results = [timed_status(call) for _ in range(n)]
            out[name] = {"code": results[0][0], "ms_p50": statistics.median(ms for _, ms in results)}
    finally:
        server.close()
    return out


def fault_and_probe() -> dict:
    server = ServerThread(MODELS, probe_seconds=1.0, fault_threshold=3)
    try:
        model = server.server.core.registry.models["minilm"]
        real = model.runner.session
        health = health_pb2_grpc.HealthStub(server.channel())

        class Failing:
            def run(self, *args, **kwargs):
                raise RuntimeError("injected fault")

        def serving() -> bool:
            return health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING

        stub = server.stub()
        model.runner.session = Failing()
        codes = [timed_status(lambda: stub.Embed(pb.EmbedRequest(inputs=["f"])))[0] for _ in range(3)]
        started = time.perf_counter()
        while serving():
            time.sleep(0.005)
        flipped = time.perf_counter() - started
        other_model = stub.Generate(pb.GenerateRequest(input="2")).text
        model.runner.session = real
        started = time.perf_counter()
        while not serving():
            time.sleep(0.01)
        restored = time.perf_counter() - started
    finally:
        server.close()
    return {
        "fault_codes": codes,
        "not_serving_after_ms": flipped * 1e3,
        "other_model_meanwhile": other_model,
        "serving_again_after_s": restored,
    }


def startup_and_drain() -> dict:
    started = time.perf_counter()
    process = ServerProcess()
    ready = time.perf_counter() - started
    channel = grpc.insecure_channel(process.target)
    from service.grpc_api.pb import inference_pb2_grpc

    stub = inference_pb2_grpc.InferenceStub(channel)
    futures = [stub.Embed.future(pb.EmbedRequest(inputs=[f"{i} " + "words " * 100] * 8)) for i in range(6)]
    time.sleep(0.1)
    code = process.stop()
    codes = sorted({(f.code() or grpc.StatusCode.OK).name for f in futures})
    channel.close()
    return {
        "ready_after_s": ready,
        "drain_exit_code": code,
        "drain_seconds": process.stop_seconds,
        "in_flight_codes": codes,
    }


def main() -> None:
    figures = {
        "overload": overload(),
        "bad_requests": bad_requests(),
        "fault": fault_and_probe(),
        "startup_drain": startup_and_drain(),
    }
    o, f, s = figures["overload"], figures["fault"], figures["startup_drain"]
    print_table(
        "Overload (max_concurrent_requests 8, 32 more at once)",
        ["", "value"],
        [
            ["refused with RESOURCE_EXHAUSTED", f"{o['refused']} of {o['excess']}"],
            ["refusal latency p50 / max (ms)", f"{o['refusal_ms_p50']:.2f} / {o['refusal_ms_max']:.2f}"],
            ["health check meanwhile, p50 (ms)", f"{o['health_ms_p50']:.2f} ({', '.join(o['health_codes'])})"],
        ],
    )
    print_table(
        "Bad requests (200 each)",
        ["request", "code", "p50 ms"],
        [[n, v["code"], v["ms_p50"]] for n, v in figures["bad_requests"].items()],
    )
    print_table(
        "Runner faults (fault_threshold 3, probe every 1 s)",
        ["", "value"],
        [
            ["codes of the faulty calls", ", ".join(f["fault_codes"])],
            ["health NOT_SERVING after the third (ms)", f"{f['not_serving_after_ms']:.1f}"],
            ["the other model meanwhile", f["other_model_meanwhile"]],
            ["SERVING again after the fault was removed (s)", f"{f['serving_again_after_s']:.2f}"],
        ],
    )
    print_table(
        "Process",
        ["", "value"],
        [
            ["start to ready (s)", f"{s['ready_after_s']:.2f}"],
            [
                "SIGTERM with 6 long calls in flight: exit code, seconds",
                f"{s['drain_exit_code']}, {s['drain_seconds']:.2f}",
            ],
            ["their codes", ", ".join(s["in_flight_codes"])],
        ],
    )
    write_results("reliability", figures)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
