"""What grpc.aio itself costs a Python server on this machine: server CPU per unary call and per streamed
message of handlers that do nothing else (a 40-byte message in, one out; a stream of 60 such messages),
with the callers in a process of their own (64 concurrent unary callers; 256 concurrent streams). The
floor under attnserve's own per-call and per-message figures (host_bench.py), the same way measured: the
server's CPU read from /proc. Medians of --rounds.

    .venv/bin/python -m benchmarks.grpc_floor [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

from .common import print_table, write_results
from .machine import describe, print_machine

UNARY, STREAM = "/floor.Floor/Unary", "/floor.Floor/Stream"
PAYLOAD = b"x" * 40
UNARY_CALLERS, UNARY_CALLS = 64, 8192
STREAMS, MESSAGES = 256, 60


def server_main() -> None:
    import grpc

    async def unary(request: bytes, context) -> bytes:
        return request

    async def stream(request: bytes, context):
        for _ in range(MESSAGES):
            yield request

    async def serve() -> None:
        server = grpc.aio.server()
        handlers = {
            "Unary": grpc.unary_unary_rpc_method_handler(unary),
            "Stream": grpc.unary_stream_rpc_method_handler(stream),
        }
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("floor.Floor", handlers)])
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(port, flush=True)
        await server.wait_for_termination()

    asyncio.run(serve())


def callers_main(target: str, case: str) -> None:
    import grpc

    async def run() -> None:
        async with grpc.aio.insecure_channel(target) as channel:
            if case == "unary":
                call = channel.unary_unary(UNARY)
                left = [UNARY_CALLS]

                async def caller():
                    while left[0] > 0:
                        left[0] -= 1
                        await call(PAYLOAD)

                await asyncio.gather(*(caller() for _ in range(UNARY_CALLERS)))
            else:
                call = channel.unary_stream(STREAM)

                async def consume():
                    count = 0
                    async for _ in call(PAYLOAD):
                        count += 1
                    assert count == MESSAGES

                await asyncio.gather(*(consume() for _ in range(STREAMS)))

    asyncio.run(run())


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(case: str) -> tuple[float, float]:
    """A fresh server, one run of the case's callers: -> (server CPU us per call or message, per second)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.grpc_floor", "--serve"], stdout=subprocess.PIPE, text=True
    )
    try:
        target = f"127.0.0.1:{server.stdout.readline().strip()}"
        before, started = cpu_seconds(server.pid), time.perf_counter()
        subprocess.run([sys.executable, "-m", "benchmarks.grpc_floor", "--callers", target, "--case", case], check=True)
        wall, cpu = time.perf_counter() - started, cpu_seconds(server.pid) - before
    finally:
        server.terminate()
        server.wait()
    count = UNARY_CALLS if case == "unary" else STREAMS * MESSAGES
    return cpu / count * 1e6, count / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", action="store_true", help="(internal)")
    parser.add_argument("--callers", help="(internal) the server's address")
    parser.add_argument("--case", help="(internal)")
    args = parser.parse_args()
    if args.serve:
        return server_main()
    if args.callers:
        return callers_main(args.callers, args.case)
    machine = describe(1)
    print_machine(machine)
    rows, figures = [], {}
    for case, unit in (("unary", "call"), ("stream", "message")):
        runs = [measure(case) for _ in range(args.rounds)]
        cpu, rate = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        figures[case] = {f"server_cpu_us_per_{unit}": cpu, f"{unit}s_per_second": rate}
        rows.append([case, f"{cpu:,.0f} us a {unit}", f"{rate:,.0f} {unit}s/s"])
    print_table(f"grpc.aio, handlers that do nothing; medians of {args.rounds}", ["case", "server CPU", "rate"], rows)
    write_results("grpc_floor", {"machine": machine, "figures": figures})


if __name__ == "__main__":
    main()
