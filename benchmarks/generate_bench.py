"""Generation figures on a Transformer-base-sized random seq2seq model (d_model 512, 8 heads, 6+6 layers,
d_ff 2048, vocab 32000), greedy, ignore_eos, 32-word sources:

1. the serving step's time per token at prefix 16 and at prefix 500, batch 1 (ONNX Runtime through the
   runner and its cache, as the server runs it);
2. 256 new tokens with the KV cache against recomputing the whole prefix at every step (ONNX Runtime);
3. the same model in PyTorch eager (our model, with its cache) against ONNX Runtime, 32 greedy steps at
   batch 1 and at batch 32;
4. the service (`attnserve serve`): 32 concurrent GenerateStream calls against a single stream, with time
   to first token and inter-token latency.

Every engine runs in a fresh process of its own (ONNX Runtime, PyTorch, the server and its clients), --rounds
times, the order turned round each round; medians. The machine and its GEMM probe come first.

    .venv/bin/python -m benchmarks.generate_bench [--threads 2] [--rounds 3] [--new-tokens 128]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from testing.server_process import ServerProcess

from .common import median_seconds, print_table, write_results
from .machine import describe, print_machine
from .stream_clients import source

WORK = Path("build/bench/transformer-base")
SOURCE_WORDS = 32
LONG_PREFIX = 500  # the step's position must stay inside the model's 512 positions and the buffer


def build() -> Path:
    from model.architecture.random_model import BASE_SEQ2SEQ, random_model_dir
    from model.export.model_dir import export_model_dir

    if not (WORK / "manifest.json").exists():
        random_model_dir(BASE_SEQ2SEQ, WORK, "base", seed=0)
        export_model_dir(WORK, progress_stream=io.StringIO())
    return WORK


def sources(model_dir: Path, batch: int) -> tuple[np.ndarray, np.ndarray]:
    from modeldir.files import open_model_dir
    from modeldir.tokenizer import TextTokenizer, pad_batch

    files = open_model_dir(model_dir)
    tokenizer = TextTokenizer(files.tokenizer, files.config.max_input_tokens)
    return pad_batch([e.ids for e in tokenizer.encode([source(i, SOURCE_WORDS) for i in range(batch)])], 0)


def timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def onnx_engine(model_dir: Path, threads: int, repeats: int) -> dict:
    """ONNX Runtime through the serving runner (in a process without PyTorch)."""
    from .runner_harness import RunnerHarness

    h = RunnerHarness(model_dir, threads)
    out = {}
    cache = h.cache(*sources(model_dir, 1), h.config.max_positions)
    step = np.array([[7]], np.int64)
    for prefix in (16, LONG_PREFIX):

        def decode(prefix=prefix):
            cache.lengths[0] = prefix  # a step at this prefix, again and again
            h.step(cache, step)

        out[f"prefix_{prefix}_ms"] = median_seconds(decode, repeats, warmup=10) * 1e3
    out["cache_256_s"], cached = timed(lambda: h.greedy(*sources(model_dir, 1), 256)[0])
    cache = h.cache(*sources(model_dir, 1), 257)
    tokens = [h.config.bos_id]

    def recompute():
        for _ in range(256):
            cache.lengths[0] = 0  # forget what the last step filled: the whole prefix again
            tokens.append(int(h.step(cache, np.array([tokens], np.int64)).next_tokens[0]))

    out["recompute_256_s"], _ = timed(recompute)
    out["same_tokens"] = cached == tokens[1:]
    for batch in (1, 32):
        ids, mask = sources(model_dir, batch)
        h.greedy(ids, mask, 4)  # warm up this batch size
        seconds, _ = timed(lambda: h.greedy(ids, mask, 32))
        out[f"batch_{batch}_tokens_per_s"] = batch * 32 / seconds
    return out


def torch_engine(model_dir: Path, threads: int) -> dict:
    """Our model in PyTorch eager with its cache (ConcatCache), greedy, 32 steps."""
    import torch

    from model.architecture.decoder_cache import ConcatCache
    from model.architecture.weights import load_model_dir

    torch.set_num_threads(threads)
    _, config, model = load_model_dir(model_dir)

    @torch.inference_mode()
    def greedy(batch: int, steps: int) -> None:
        ids, mask = (torch.from_numpy(a) for a in sources(model_dir, batch))
        cross = model.project_cross(model.encode(ids, mask))
        cache = model.empty_cache(batch)
        tokens = torch.full((batch, 1), config.bos_id)
        for step in range(steps):
            logits = model.decode(tokens[:, -1:], cache, cross, mask)
            tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
            past = [
                (torch.cat([pk, nk], 2), torch.cat([pv, nv], 2)) for (pk, pv), (nk, nv) in zip(cache.past, cache.new)
            ]
            cache = ConcatCache(past, torch.ones(batch, step + 1, dtype=torch.long))

    out = {}
    for batch in (1, 32):
        greedy(batch, 4)  # warm up, as ONNX Runtime is
        seconds, _ = timed(lambda: greedy(batch, 32))
        out[f"batch_{batch}_tokens_per_s"] = batch * 32 / seconds
    return out


def service_engine(model_dir: Path, threads: int, new_tokens: int) -> dict:
    server = ServerProcess("--intra-op-threads", str(threads), models=[str(model_dir)])
    try:
        out = {}
        for streams in (1, 32):
            command = [
                sys.executable,
                "-m",
                "benchmarks.stream_clients",
                "--target",
                server.target,
                "--streams",
                str(streams),
                "--new-tokens",
                str(new_tokens),
            ]
            run = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
            ttft, itl = np.array(run["ttft"]) * 1e3, np.array(run["itl"]) * 1e3
            out[streams] = {
                "tokens_per_s": run["tokens"] / run["wall"],
                "ttft_p50_ms": float(np.percentile(ttft, 50)),
                "ttft_p99_ms": float(np.percentile(ttft, 99)),
                "itl_p50_ms": float(np.percentile(itl, 50)),
                "itl_p99_ms": float(np.percentile(itl, 99)),
            }
        return out
    finally:
        server.stop()


def in_process(engine: str, *args: str) -> dict:
    command = [sys.executable, "-m", "benchmarks.generate_bench", "--engine", engine, *args]
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{engine}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30, help="steps timed per prefix")
    parser.add_argument("--new-tokens", type=int, default=128, help="per stream, in the service runs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engine", choices=["onnx", "torch"], help="(internal) one engine, in this process")
    args = parser.parse_args()
    if args.engine:  # the model is built: the ONNX Runtime engine's process never imports torch
        result = (
            onnx_engine(WORK, args.threads, args.repeats) if args.engine == "onnx" else torch_engine(WORK, args.threads)
        )
        print(json.dumps(result))
        return
    machine = describe(args.threads)
    print_machine(machine)
    model_dir = build()
    common = ["--threads", str(args.threads), "--repeats", str(args.repeats)]
    engines = {
        "onnx": lambda: in_process("onnx", *common),
        "torch": lambda: in_process("torch", *common),
        "service": lambda: service_engine(model_dir, args.threads, args.new_tokens),
    }
    runs: dict[str, list[dict]] = {name: [] for name in engines}
    names = list(engines)
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            runs[name].append(engines[name]())
            print(f"round {round_ + 1}: {name} done", file=sys.stderr, flush=True)

    def median(name: str, key, sub=None) -> float:
        return statistics.median(r[key] if sub is None else r[key][sub] for r in runs[name])

    assert all(r["same_tokens"] for r in runs["onnx"]), "the cache changed the greedy output"
    p16, p_long = median("onnx", "prefix_16_ms"), median("onnx", f"prefix_{LONG_PREFIX}_ms")
    print_table(
        f"Decode time per token, batch 1, the serving step (median ms; medians of {args.rounds} rounds)",
        ["prefix 16", f"prefix {LONG_PREFIX}", f"{LONG_PREFIX} / 16"],
        [[p16, p_long, p_long / p16]],
    )
    cached, recompute = median("onnx", "cache_256_s"), median("onnx", "recompute_256_s")
    print_table(
        "256 new tokens, batch 1, greedy (the same tokens both ways)",
        ["with the KV cache s", "recomputing the prefix s", "speed-up"],
        [[cached, recompute, recompute / cached]],
    )
    rows = []
    for batch in (1, 32):
        ort_rate, torch_rate = (
            median("onnx", f"batch_{batch}_tokens_per_s"),
            median("torch", f"batch_{batch}_tokens_per_s"),
        )
        rows.append([batch, ort_rate, torch_rate, ort_rate / torch_rate])
    print_table(
        "32 greedy steps with the cache: ONNX Runtime vs PyTorch eager (our model), each in its own process",
        ["batch", "ORT tokens/s", "PyTorch tokens/s", "ORT / PyTorch"],
        rows,
    )
    one, many = ({k: median("service", streams, k) for k in runs["service"][0][streams]} for streams in (1, 32))
    print_table(
        f"Service: GenerateStream, {args.new_tokens} new tokens each; 32 streams / 1 = "
        f"{many['tokens_per_s'] / one['tokens_per_s']:.2f}x",
        ["streams", "tokens/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms"],
        [
            [n, f["tokens_per_s"], f["ttft_p50_ms"], f["ttft_p99_ms"], f["itl_p50_ms"], f["itl_p99_ms"]]
            for n, f in ((1, one), (32, many))
        ],
    )
    write_results("generate_bench", {"machine": machine, "rounds": args.rounds, "runs": runs})


if __name__ == "__main__":
    main()
