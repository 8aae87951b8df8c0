"""Generation figures, side by side in one run, on a Transformer-base-sized random seq2seq model
(d_model 512, 8 heads, 6+6 layers, d_ff 2048, vocab 32000), greedy, ignore_eos, 32-token sources:

1. decode time per token at prefix 512 against prefix 16, batch 1 (the serving step: buffers bound);
2. 256 new tokens with the KV cache against recomputing the prefix at every step;
3. the same model in PyTorch (our model, eager, with its cache) against ONNX Runtime, batch 1 and 32;
4. the service: 32 concurrent GenerateStream calls against a single stream, with time to first token
   and inter-token latency (server in this process as `attnserve serve` runs it, clients in another).

    .venv/bin/python -m benchmarks.generate_bench [--threads 2] [--new-tokens 128]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from model.decoder_cache import ConcatCache
from model.export import export_model_dir
from model.random_model import BASE_SEQ2SEQ, random_model_dir
from model.weights import load_model_dir
from modeldir.files import open_model_dir
from modeldir.tokenizer import TextTokenizer, pad_batch
from service.server_thread import ServerThread

from .common import median_seconds, print_table, write_results
from .runner_harness import RunnerHarness
from .stream_clients import source

SOURCE_WORDS = 32


class Harness:
    def __init__(self, model_dir: Path, threads: int, spinning: bool):
        self.onnx = RunnerHarness(model_dir, threads, spinning)
        self.config = c = self.onnx.config
        self.tokenizer = TextTokenizer(open_model_dir(model_dir).tokenizer, c["max_input_tokens"])
        _, _, self.torch_model = load_model_dir(model_dir)

    def sources(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        return pad_batch([e.ids for e in self.tokenizer.encode([source(i) for i in range(batch)])], 0)

    def greedy_with_cache(self, batch: int, steps: int) -> list[list[int]]:
        return self.onnx.greedy(*self.sources(batch), steps)

    def greedy_recomputing(self, steps: int) -> list[int]:
        """Every step runs the decoder over the whole prefix again (nothing filled before it)."""
        cache = self.onnx.cache(*self.sources(1), steps + 1)
        tokens = [self.config["bos_id"]]
        for _ in range(steps):
            cache.lengths[0] = 0  # forget what the last step filled
            tokens.append(int(self.onnx.step(cache, np.array([tokens], np.int64)).next_tokens[0]))
        return tokens[1:]

    @torch.inference_mode()
    def torch_greedy_with_cache(self, batch: int, steps: int) -> None:
        ids, mask = (torch.from_numpy(a) for a in self.sources(batch))
        model = self.torch_model
        cross = model.project_cross(model.encode(ids, mask))
        cache = model.empty_cache(batch)
        tokens = torch.full((batch, 1), self.config["bos_id"])
        for step in range(steps):
            logits = model.decode(tokens[:, -1:], cache, cross, mask)
            tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
            past = [
                (torch.cat([pk, nk], 2), torch.cat([pv, nv], 2)) for (pk, pv), (nk, nv) in zip(cache.past, cache.new)
            ]
            cache = ConcatCache(past, torch.ones(batch, step + 1, dtype=torch.long))


def per_token_decode(h: Harness, repeats: int) -> dict:
    cache = h.onnx.cache(*h.sources(1), h.config["max_positions"])
    step = np.array([[7]], np.int64)
    out = {}
    for prefix in (16, 512):

        def decode():
            cache.lengths[0] = prefix  # a step at this prefix, again and again
            h.onnx.step(cache, step)

        out[prefix] = median_seconds(decode, repeats) * 1e3
    return out


def timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def service_streams(model_dir: Path, threads: int, spinning: bool, new_tokens: int, rounds: int) -> dict:
    server = ServerThread([model_dir], intra_op_threads=threads, ort_spinning=spinning)
    results: dict[int, list[dict]] = {1: [], 32: []}
    try:
        for _ in range(rounds):
            for streams in (1, 32):
                command = [sys.executable, "-m", "benchmarks.stream_clients", "--target", server.target,
                           "--streams", str(streams), "--new-tokens", str(new_tokens)]  # fmt: skip
                run = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
                results[streams].append(run)
        largest = server.server.core.registry.models["base"].scheduler.largest_step
    finally:
        server.close()
    figures = {"largest_step": largest}
    for streams, runs in results.items():
        ttft = np.array([x for r in runs for x in r["ttft"]]) * 1e3
        itl = np.array([x for r in runs for x in r["itl"]]) * 1e3
        figures[streams] = {
            "tokens_per_s": statistics.median(r["tokens"] / r["wall"] for r in runs),
            "ttft_p50_ms": float(np.percentile(ttft, 50)), "ttft_p99_ms": float(np.percentile(ttft, 99)),
            "itl_p50_ms": float(np.percentile(itl, 50)), "itl_p99_ms": float(np.percentile(itl, 99)),
        }  # fmt: skip
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--new-tokens", type=int, default=128, help="per stream, in the service runs")
    parser.add_argument("--rounds", type=int, default=2, help="of the service runs")
    parser.add_argument(
        "--spinning",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ONNX Runtime's threads spin between calls (as --ort-spinning)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    figures = {
        "threads": args.threads,
        "spinning": args.spinning,
        "versions": {"onnxruntime": ort.__version__, "torch": torch.__version__},
    }
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = random_model_dir(BASE_SEQ2SEQ, Path(tmp) / "base", "base", seed=0)
        export_model_dir(model_dir, progress_stream=io.StringIO())
        h = Harness(model_dir, args.threads, args.spinning)

        decode = per_token_decode(h, args.repeats)
        figures["per_token_ms"] = decode
        print_table(
            "Decode time per token, batch 1, ONNX Runtime serving step (median ms)",
            ["prefix 16", "prefix 512", "512 / 16"],
            [[decode[16], decode[512], decode[512] / decode[16]]],
        )

        cached_s, cached_tokens = timed(lambda: h.greedy_with_cache(1, 256)[0])
        recompute_s, recomputed_tokens = timed(lambda: h.greedy_recomputing(256))
        assert cached_tokens == recomputed_tokens, "the cache changed the greedy output"
        figures["256_tokens"] = {"cache_s": cached_s, "recompute_s": recompute_s}
        print_table(
            "256 new tokens, batch 1, greedy (same tokens both ways)",
            ["with the KV cache s", "recomputing the prefix s", "speed-up"],
            [[cached_s, recompute_s, recompute_s / cached_s]],
        )

        rows, steps = [], 32
        for batch in (1, 32):
            h.greedy_with_cache(batch, 4)  # warm up this batch size
            onnx_s, _ = timed(lambda: h.greedy_with_cache(batch, steps))
            torch_s, _ = timed(lambda: h.torch_greedy_with_cache(batch, steps))
            figures[f"torch_vs_onnx_b{batch}"] = {"onnx_tokens_per_s": batch * steps / onnx_s,
                                                  "torch_tokens_per_s": batch * steps / torch_s}  # fmt: skip
            rows.append([batch, batch * steps / onnx_s, batch * steps / torch_s, torch_s / onnx_s])
        print_table(
            f"{steps} greedy steps with the cache, in-process: ONNX Runtime vs PyTorch eager (our model)",
            ["batch", "ORT tokens/s", "PyTorch tokens/s", "ORT / PyTorch"],
            rows,
        )

        service = service_streams(model_dir, args.threads, args.spinning, args.new_tokens, args.rounds)
        figures["service"] = service
        one, many = service[1], service[32]
        print_table(
            f"Service: GenerateStream, {args.new_tokens} new tokens each, median of {args.rounds}; "
            f"32 streams / 1 = {many['tokens_per_s'] / one['tokens_per_s']:.2f}x (largest step: "
            f"{service['largest_step']} sequences)",
            ["streams", "tokens/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms"],
            [[n, f["tokens_per_s"], f["ttft_p50_ms"], f["ttft_p99_ms"], f["itl_p50_ms"], f["itl_p99_ms"]]
             for n, f in ((1, one), (32, many))],
        )  # fmt: skip
    write_results("generate_bench", figures)


if __name__ == "__main__":
    main()
