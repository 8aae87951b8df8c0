"""The host's share of serving: server CPU per generated token and per call, and the part of it outside
ONNX Runtime's runs, on every door that generates (attnserve.v1 Generate and GenerateStream, KServe v2
ModelStreamInfer, OpenAI /v1/completions whole and as server-sent events) at 1, 32 and 256 concurrent
callers, and for Embed calls of 1 and 16 short texts.

One `attnserve serve` process (the numbers model and MiniLM) with one ONNX Runtime thread and no spinning
by default, so that the server's CPU and the wall time of its model runs are comparable: outside = CPU -
run time. The callers run in a process of their own (this script's --caller mode); the server's CPU is
read from /proc, its model run time and tokens from its /metrics. Each case runs --rounds times, the
cases' order turned round each round; medians.

    .venv/bin/python -m benchmarks.host_bench [--rounds 3] [--threads 1] [--spinning] [--cases grpc-stream,...]
        [--profile] [--against DIR]

--against DIR: a second server runs that checkout's code (e.g. `git worktree add ../before <commit>`),
with this checkout's callers and models; each round starts a fresh server of each side in turn, and the
table gives this checkout's medians with their ratio to the other's.

--profile: after the rounds, each case once more under py-spy (sampling the server's threads, 200 a
second), summed up by where the samples' innermost frames are (profile_summary.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from testing.server_process import ServerProcess

from .common import print_table, write_results
from .machine import describe, print_machine
from .profile_summary import profiled

NUMBERS = "nine hundred and ninety-nine thousand"
SHORT_TEXT = "A cat sleeps on the warm windowsill."
NEW_TOKENS = 60  # the numbers model takes 63 at most
GENERATION_CASES = ("grpc-unary", "grpc-stream", "kserve-stream", "openai-unary", "openai-stream")
EMBED_CASES = {"embed-1": 1, "embed-16": 16}  # case -> texts a call
EMBED_CALLS = {"embed-1": 1024, "embed-16": 256}  # a few seconds of MiniLM on 2 cores
CONCURRENCY = (1, 32, 256)
EMBED_CALLERS = 64
# 256 rows a step, room for every caller; streams read by one client process may lag: not given up.
ROOM_FOR_EVERY_CALLER = (
    "--max-running-sequences",
    "256",
    "--max-concurrent-requests",
    "1024",
    "--max-waiting-sequences",
    "1024",
    "--stream-write-timeout",
    "120",
)
MESSAGES = [0]  # (the callers' process) streamed messages received: several tokens may share one


def calls_for(case: str, concurrent: int) -> int:
    """Calls in one run: a few seconds of work at any concurrency."""
    return EMBED_CALLS[case] if case in EMBED_CASES else max(24, 2 * concurrent)


async def grpc_unary(target: str, n: int) -> None:
    import grpc

    from service.grpc_api.pb import inference_pb2 as pb
    from service.grpc_api.pb import inference_pb2_grpc as pb_grpc

    request = pb.GenerateRequest(input=NUMBERS, params=pb.GenerationParams(ignore_eos=True, max_new_tokens=NEW_TOKENS))
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceStub(channel)
        await many(n, calls_for("grpc-unary", n), lambda: stub.Generate(request, timeout=600))


async def grpc_stream(target: str, n: int) -> None:
    import grpc

    from service.grpc_api.pb import inference_pb2 as pb
    from service.grpc_api.pb import inference_pb2_grpc as pb_grpc

    request = pb.GenerateRequest(input=NUMBERS, params=pb.GenerationParams(ignore_eos=True, max_new_tokens=NEW_TOKENS))
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceStub(channel)

        async def one() -> None:
            async for _ in stub.GenerateStream(request, timeout=600):
                MESSAGES[0] += 1

        await many(n, calls_for("grpc-stream", n), one)


async def kserve_stream(target: str, n: int) -> None:
    import grpc

    from service.grpc_api.pb import open_inference_pb2 as oip
    from service.grpc_api.pb import open_inference_pb2_grpc as oip_grpc

    def request() -> oip.ModelInferRequest:
        r = oip.ModelInferRequest(model_name="numbers")
        r.inputs.add(name="text", datatype="BYTES", shape=[1]).contents.bytes_contents.append(NUMBERS.encode())
        r.parameters["stream"].bool_param = True
        r.parameters["ignore_eos"].bool_param = True
        r.parameters["max_new_tokens"].int64_param = NEW_TOKENS
        return r

    async with grpc.aio.insecure_channel(target) as channel:
        stub = oip_grpc.GRPCInferenceServiceStub(channel)

        async def one() -> None:  # one stream of one request: it ends after the request's final response
            async for answer in stub.ModelStreamInfer(iter([request()]), timeout=600):
                if answer.error_message:
                    raise RuntimeError(answer.error_message)
                MESSAGES[0] += 1

        await many(n, calls_for("kserve-stream", n), one)


async def openai_calls(base_url: str, n: int, stream: bool) -> None:
    import httpx

    body = {"model": "numbers", "prompt": NUMBERS, "max_tokens": NEW_TOKENS, "ignore_eos": True, "stream": stream}
    # Idle connections expire before the server's keep-alive timeout (uvicorn's 5 s) could close one under a
    # request: a POST is not retried.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=1.0)
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=limits) as client:

        async def one() -> None:
            if not stream:
                (await client.post("/v1/completions", json=body)).raise_for_status()
                return
            async with client.stream("POST", "/v1/completions", json=body) as response:
                response.raise_for_status()
                async for line in response.aiter_lines():
                    MESSAGES[0] += line.startswith("data: {")

        await many(n, calls_for("openai-stream", n), one)


async def embed(target: str, n: int, case: str) -> None:
    import grpc

    from service.grpc_api.pb import inference_pb2 as pb
    from service.grpc_api.pb import inference_pb2_grpc as pb_grpc

    request = pb.EmbedRequest(model="minilm", inputs=[SHORT_TEXT] * EMBED_CASES[case])
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceStub(channel)
        await many(n, calls_for(case, n), lambda: stub.Embed(request, timeout=600))


async def many(concurrent: int, calls: int, call) -> None:
    """`calls` calls, at most `concurrent` at once."""
    remaining = calls

    async def caller() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call()

    await asyncio.gather(*(caller() for _ in range(concurrent)))


def caller_main(args) -> None:
    """(The callers' process) run one case, print its wall seconds."""
    started = time.perf_counter()
    case, n = args.caller, args.concurrent
    if case == "grpc-unary":
        asyncio.run(grpc_unary(args.target, n))
    elif case == "grpc-stream":
        asyncio.run(grpc_stream(args.target, n))
    elif case == "kserve-stream":
        asyncio.run(kserve_stream(args.target, n))
    elif case in ("openai-unary", "openai-stream"):
        asyncio.run(openai_calls(args.http, n, stream=case == "openai-stream"))
    else:
        asyncio.run(embed(args.target, n, case))
    print(json.dumps({"wall": time.perf_counter() - started, "messages": MESSAGES[0]}))


def run_case(server: ServerProcess, case: str, concurrent: int) -> dict:
    """One case against the server: its callers' wall time, and the server's CPU, model run time, tokens
    and calls over it."""

    def totals() -> tuple[float, float, float, float]:
        return (
            server.cpu_seconds(),
            server.metric("attnserve_inference_duration_seconds_sum"),
            server.metric("attnserve_generated_tokens_total"),
            server.children_cpu_seconds(),
        )

    before = totals()
    command = [
        sys.executable,
        "-m",
        "benchmarks.host_bench",
        "--caller",
        case,
        "--concurrent",
        str(concurrent),
        "--target",
        server.target,
        "--http",
        f"http://127.0.0.1:{server.http_port}",
    ]
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{case} x{concurrent}: {out.stderr[-2000:]}")
    callers = json.loads(out.stdout.strip().splitlines()[-1])
    after = totals()
    cpu, runs, tokens, api_cpu = (a - b for a, b in zip(after, before))
    return {
        "wall": callers["wall"],
        "cpu": cpu,
        "engine_cpu": cpu - api_cpu,  # the server's own process: with --api-processes over 1, the engine alone
        "runs": runs,
        "tokens": tokens,
        "calls": calls_for(case, concurrent),
        "messages": callers["messages"],
    }


def figures(case: str, r: dict) -> dict[str, float]:
    if case in EMBED_CASES:
        calls = r["calls"]
        return {
            "calls/s": calls / r["wall"],
            "CPU us/call": r["cpu"] / calls * 1e6,
            "outside us/call": (r["cpu"] - r["runs"]) / calls * 1e6,
            "outside us/text": (r["cpu"] - r["runs"]) / (calls * EMBED_CASES[case]) * 1e6,
        }
    tokens = r["tokens"]
    out = {
        "tokens/s": tokens / r["wall"],
        "CPU us/token": r["cpu"] / tokens * 1e6,
        "outside us/token": (r["cpu"] - r["runs"]) / tokens * 1e6,
    }
    if r["messages"]:
        out["tokens/message"] = tokens / r["messages"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime's intra-op threads")
    parser.add_argument("--spinning", action="store_true", help="let ONNX Runtime's threads spin")
    parser.add_argument("--cases", default=",".join([*GENERATION_CASES, *EMBED_CASES]))
    parser.add_argument("--stream-messages-per-second", help="the server's setting (default: the server's)")
    parser.add_argument("--profile", action="store_true", help="then each case once more under py-spy")
    parser.add_argument("--against", type=Path, help="a checkout whose server runs too, alternately (before)")
    parser.add_argument("--caller", help="(internal) run this case's callers")
    parser.add_argument("--concurrent", type=int, default=1, help="(internal)")
    parser.add_argument("--target", help="(internal)")
    parser.add_argument("--http", help="(internal)")
    args = parser.parse_args()
    if args.caller:
        return caller_main(args)
    machine = describe(args.threads)
    print_machine(machine)
    cases = [(c, n) for c in args.cases.split(",") for n in ((EMBED_CALLERS,) if c in EMBED_CASES else CONCURRENCY)]
    settings = [
        "--intra-op-threads",
        str(args.threads),
        "--ort-spinning" if args.spinning else "--no-ort-spinning",
        *ROOM_FOR_EVERY_CALLER,
    ]
    if args.stream_messages_per_second is not None:
        settings += ["--stream-messages-per-second", args.stream_messages_per_second]
    root = Path(__file__).resolve().parents[1]
    models = [str(root / "build" / "models" / name) for name in ("minilm", "numbers")]
    sides = {"before": args.against.resolve(), "after": None} if args.against else {"after": None}
    runs: dict[str, dict[str, list[dict]]] = {side: {} for side in sides}
    profiles = {}
    for round_ in range(args.rounds):
        for side, checkout in sides.items():  # a fresh server each round, the sides taking turns
            server = ServerProcess(*settings, models=models, cwd=checkout)
            try:
                run_case(server, "grpc-unary", 32)  # warm: first calls allocate
                for case, n in cases if round_ % 2 == 0 else cases[::-1]:
                    runs[side].setdefault(f"{case} x{n}", []).append(figures(case, run_case(server, case, n)))
                if args.profile and round_ == args.rounds - 1 and side == "after":
                    for case, n in cases:
                        try:
                            profiles[f"{case} x{n}"] = profiled(server.pid, lambda: run_case(server, case, n))
                        except Exception as error:  # the figures above stand; this profile is missing
                            profiles[f"{case} x{n}"] = [(f"no profile: {type(error).__name__}", 1.0)]
            finally:
                server.stop()
        print(f"round {round_ + 1} done", flush=True)
    medians = {
        side: {
            name: {k: statistics.median(r[k] for r in results) for k in results[0]}
            for name, results in side_runs.items()
        }
        for side, side_runs in runs.items()
    }
    rows = []
    for name, after in medians["after"].items():
        before = medians.get("before", {}).get(name)
        cells = [
            f"{v:,.1f} {k}" + (f" ({v / before[k]:.2f}x)" if before and before.get(k) else "") for k, v in after.items()
        ]
        rows.append([name, *cells, *[""] * (4 - len(cells))])
    header = ["case", "throughput", "server CPU", "outside ONNX Runtime", "per text, or tokens a message"]
    spinning = "spinning" if args.spinning else "no spinning"
    title = f"server CPU per token and per call, {args.threads} ORT thread(s), {spinning}; medians of {args.rounds}"
    if args.against:
        title += f"; (x): against {args.against}"
    print_table(title, header, rows)
    for name, summary in profiles.items():
        print(f"\n{name}: where the server's samples were (innermost frame)")
        for place, share in summary:
            print(f"  {share:5.1%}  {place}")
    write_results(
        "host_bench",
        {
            "machine": machine,
            "settings": settings,
            "against": str(args.against or ""),
            "medians": medians,
            "runs": runs,
            "rows": rows,
            "profiles": profiles,
        },
    )


if __name__ == "__main__":
    main()
