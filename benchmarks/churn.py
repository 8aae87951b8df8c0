"""Client churn: clients killed with SIGKILL at random moments of their calls, then a check that the
server came back to its baseline (calls running, queues, cache, memory, file descriptors).

    .venv/bin/python -m benchmarks.churn [--seconds 180] [--workers 6]
"""

from __future__ import annotations

import argparse
import time

from testing.churn import churn
from testing.server_process import ServerProcess

from .common import print_table, write_results


def at_rest(server: ServerProcess) -> dict:
    return {
        "requests_running": server.metric("attnserve_requests_running"),
        "queue_depth": server.metric("attnserve_queue_depth"),
        "kv_cache_usage_ratio": server.metric("attnserve_kv_cache_usage_ratio"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--workers", type=int, default=6)
    args = parser.parse_args()
    server = ServerProcess()
    try:
        time.sleep(2)
        rss_before, fds_before = server.rss_mb(), server.open_fds()
        killed = churn(server.target, args.seconds, args.workers)
        time.sleep(3)  # calls of killed clients end when their connections close
        rest, rss_after, fds_after = at_rest(server), server.rss_mb(), server.open_fds()
        ready = server.ready()
        ok_calls = server.metric("attnserve_requests_total", code="OK")
        cancelled = server.metric("attnserve_requests_total", code="CANCELLED")
    finally:
        exit_code = server.stop()
    rows = [
        ["clients killed mid-call", killed],
        ["calls answered OK during the churn", int(ok_calls)],
        ["calls ended CANCELLED (their client gone)", int(cancelled)],
        [
            "after: calls running / queue depth / cache usage",
            f"{rest['requests_running']:g} / {rest['queue_depth']:g} / {rest['kv_cache_usage_ratio']:g}",
        ],
        ["after: ready", ready],
        ["server RSS before -> after (MB)", f"{rss_before:.0f} -> {rss_after:.0f}"],
        ["server open file descriptors before -> after", f"{fds_before} -> {fds_after}"],
        ["exit code after SIGTERM", exit_code],
    ]
    print_table(f"Client churn, {args.seconds:g} s, {args.workers} clients at a time", ["", "value"], rows)
    write_results(
        "churn",
        {
            "seconds": args.seconds,
            "workers": args.workers,
            "killed": killed,
            "ok_calls": ok_calls,
            "cancelled": cancelled,
            "at_rest": rest,
            "ready": ready,
            "rss_before_mb": rss_before,
            "rss_after_mb": rss_after,
            "fds_before": fds_before,
            "fds_after": fds_after,
            "exit_code": exit_code,
        },
    )


if __name__ == "__main__":
    main()
