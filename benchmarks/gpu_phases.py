"""The GPU check's phases after the preflight, each a function of the check's context returning its figures:
parity (MiniLM, the numbers model and the HTTP door; then the Marian-shaped model), throughput against
PyTorch on the same GPU (embeddings, generation), the moonshot figures and memory. Every engine runs in a
process of its own: the server, its callers, each baseline (engines.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from service.grpc_api.client import Client

GOALS = {"embed_vs_st": 1.2, "embed_vs_ort": 0.8, "generate_64_vs_hf": 2.0, "latency_1_vs_hf": 0.5}
MOONSHOT = {"minilm_sentences_per_second": 20000, "marian_tokens_per_second_256_streams": 20000}


def run_json(*command: str) -> dict:
    out = subprocess.run([sys.executable, *command], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{' '.join(command)}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def nvidia_smi(fields: str) -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


class Utilization:
    """nvidia-smi's GPU utilisation sampled every 0.2 s while the block runs (nothing on a machine without
    it): a host-bound server shows as a low figure."""

    def __enter__(self):
        self.samples: list[float] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()
        return self

    def sample(self) -> None:
        while not self.done.wait(0.2):
            value = nvidia_smi("utilization.gpu")
            if value.strip().isdigit():
                self.samples.append(float(value))

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join(5)

    def figures(self) -> dict:
        if not self.samples:
            return {"gpu_utilization": None}
        return {"gpu_utilization_mean": float(np.mean(self.samples)), "gpu_utilization_max": max(self.samples)}


def parity(ctx) -> dict:
    refs = ctx.references
    with Client(ctx.server.target, timeout=120) as client:
        served = np.array(client.embed(refs["minilm"]["texts"], model="minilm").vectors)
        cosines = (served * np.array(refs["minilm"]["embeddings"])).sum(axis=1)
        report = {
            "minilm": {"texts": len(cosines), "min_cosine": float(cosines.min()), "mean_cosine": float(cosines.mean())}
        }
        numbers = {}
        with ThreadPoolExecutor(32) as pool:  # one channel, 32 calls at a time
            for direction, pairs in refs["numbers"]["pairs"].items():
                answers = list(pool.map(lambda s: client.generate(s, model="numbers").text, [s for s, _ in pairs]))
                exact = sum(got == expected for got, (_, expected) in zip(answers, pairs))
                numbers[direction] = {"exact": exact, "total": len(pairs), "share": exact / len(pairs)}
        report["numbers"] = numbers
    body = json.dumps({"model": "minilm", "input": refs["minilm"]["texts"][:2]}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{ctx.server.http_port}/v1/embeddings", body, {"content-type": "application/json"}
    )
    http = json.loads(urllib.request.urlopen(request, timeout=60).read())
    by_http = np.array([d["embedding"] for d in http["data"]])
    report["http_door"] = {"max_abs_diff_to_grpc": float(np.abs(by_http - served[:2]).max())}
    return report


def parity_marian(ctx) -> dict:
    """Greedy token ids served on the device against the float32 graphs on the CPU, prompt by prompt (kept:
    the cuda-graphs phase sets its graphs' tokens beside them)."""
    refs = ctx.references["marian"]
    served = served_tokens(ctx.server, refs)
    same = sum(a == b for a, b in zip(served, refs["tokens"]))
    return {"prompts": len(served), "same": same, "share": same / len(served), "tokens": served}


def embeddings(ctx) -> dict:
    sizes, count, batch = ctx.sizes, str(ctx.sizes.embed_count), "64"
    with Utilization() as busy:
        service = run_json(
            "-m",
            "benchmarks.load_clients",
            "--target",
            ctx.server.target,
            "--clients",
            str(sizes.embed_clients),
            "--per-call",
            str(sizes.per_call),
            "--count",
            count,
        )
    out = {"attnserve": sizes.embed_count / service["wall"], **busy.figures()}
    out["split_cost_tokens"] = ctx.server.metric("attnserve_split_cost_tokens", model="minilm")  # as measured
    out["sentence-transformers"] = run_json(
        "-m",
        "benchmarks.engines",
        "st-embed",
        "--model",
        str(ctx.kit / "minilm-st"),
        "--device",
        ctx.device,
        "--count",
        count,
        "--batch",
        batch,
    )["sentences_per_second"]
    out["onnxruntime"] = run_json(
        "-m",
        "benchmarks.engines",
        "ort-embed",
        "--model",
        str(ctx.kit / "models/minilm"),
        "--device",
        ctx.device,
        "--precision",
        "fp16",
        "--count",
        count,
        "--batch",
        batch,
    )["sentences_per_second"]
    out["vs_st"] = out["attnserve"] / out["sentence-transformers"]
    out["vs_ort"] = out["attnserve"] / out["onnxruntime"]
    return out


def decode_figures(server, model: str = "marian") -> dict:
    """The server's decode-step counters for a model, for a difference over a run."""
    labels = {"model": model, "stage": "decode"}
    return {
        "steps": server.metric("attnserve_inference_duration_seconds_count", **labels),
        "seconds": server.metric("attnserve_inference_duration_seconds_sum", **labels),
        "rows": server.metric("attnserve_batch_size_sum", **labels),
        "sent": server.metric("attnserve_device_transfer_bytes_total", direction="sent", **labels),
        "fetched": server.metric("attnserve_device_transfer_bytes_total", direction="fetched", **labels),
    }


def marian_checkpoint(ctx) -> Path:
    """The Hugging Face checkpoint of the served Marian graphs, remade from its seed (transformers' baseline)."""
    target = Path(tempfile.gettempdir()) / "attnserve-marian-hf"
    if not (target / "model.safetensors").is_file():
        code = (
            "import json, sys; from model.families.marian.random_checkpoint import MarianShape, random_marian_checkpoint;"
            "random_marian_checkpoint(sys.argv[1], MarianShape(**json.loads(sys.argv[2])), seed=int(sys.argv[3]))"
        )
        subprocess.run(
            [sys.executable, "-c", code, str(target), json.dumps(ctx.sizes.marian), str(ctx.sizes.marian_seed)],
            check=True,
            capture_output=True,
        )
    return target


def generate_loads(sizes) -> tuple[tuple[int, int], ...]:
    """(callers, sentences) of the generation measurements: one caller (16 sentences of 64 tokens in the
    lease: a steady rate, and a third of the phase's time at 32), and the check's concurrency."""
    return (1, max(4, sizes.generate_count // 16)), (sizes.concurrency, sizes.generate_count)


def generate_rate(ctx, server, concurrency: int, count: int, model: str = "marian") -> dict:
    """Tokens/s of `concurrency` callers of a text-to-text model, and its decode steps' time, rows and bytes
    meanwhile."""
    args = ["--target", server.target, "--served", model, "--count", str(count)]
    args += ["--concurrency", str(concurrency), "--new-tokens", str(ctx.sizes.new_tokens)]
    before = decode_figures(server, model)
    ours = run_json("-m", "benchmarks.engines", "attnserve-generate", *args)
    after = decode_figures(server, model)
    steps = max(after["steps"] - before["steps"], 1)
    return {
        "tokens_per_second": ours["tokens_per_second"],
        "seconds_per_token": ours["seconds_per_token"],
        "decode_step_ms": 1e3 * (after["seconds"] - before["seconds"]) / steps,
        "rows_per_step": (after["rows"] - before["rows"]) / steps,
        "bytes_sent_per_step": (after["sent"] - before["sent"]) / steps,
        "bytes_fetched_per_step": (after["fetched"] - before["fetched"]) / steps,
    }


def generation(ctx, model: str = "marian", checkpoint: Path | None = None) -> dict:
    """Tokens/s at one caller and at the check's concurrency against transformers' generate on the same
    device, of the Marian model (or `model`, whose Hugging Face checkpoint is `checkpoint`)."""
    sizes, server, out, new = ctx.sizes, ctx.server, {}, str(ctx.sizes.new_tokens)
    checkpoint = checkpoint or marian_checkpoint(ctx)
    for concurrency, count in generate_loads(sizes):
        ours = generate_rate(ctx, server, concurrency, count, model)
        theirs = run_json(
            "-m",
            "benchmarks.engines",
            "hf-generate",
            "--model",
            str(checkpoint),
            "--device",
            ctx.device,
            "--count",
            str(count),
            "--batch",
            str(concurrency),
            "--new-tokens",
            new,
        )
        out[str(concurrency)] = {
            "attnserve_tokens_per_second": ours.pop("tokens_per_second"),
            "attnserve_seconds_per_token": ours.pop("seconds_per_token"),
            "transformers_tokens_per_second": theirs["tokens_per_second"],
            "transformers_seconds_per_token": theirs["seconds_per_token"],
            **ours,
        }
    high, one = out[str(sizes.concurrency)], out["1"]
    out["split_cost_tokens"] = server.metric("attnserve_split_cost_tokens", model=model)  # its encoder's, measured
    out["tokens_per_second_vs_hf"] = high["attnserve_tokens_per_second"] / high["transformers_tokens_per_second"]
    out["latency_1_vs_hf"] = one["attnserve_seconds_per_token"] / one["transformers_seconds_per_token"]
    return out


def served_tokens(server, refs: dict, model: str = "marian") -> list[list[int]]:
    with Client(server.target, timeout=120) as client:
        # num_beams 1: the checkpoint's default may be beam search, the reference greedy.
        return [
            list(client.generate(p, model=model, max_new_tokens=refs["new_tokens"], num_beams=1).token_ids)
            for p in refs["prompts"]
        ]


def eager_tokens(ctx, refs: dict) -> list[list[int]]:
    """The Marian prompts' greedy tokens of eager steps: the parity-marian phase's where it passed (a server of
    the check's settings, each prompt alone: the same kernels give the same tokens), else served now."""
    parity = ctx.results["phases"].get("parity-marian", {})
    if parity.get("ok") and parity.get("prompts") == len(refs["prompts"]) and "tokens" in parity:
        return parity["tokens"]
    return served_tokens(ctx.server, refs)


def cuda_graphs(ctx) -> dict:
    """Greedy decode steps replayed as CUDA graphs (`serve --cuda-graphs`), against the eager steps of the
    check's server in the same run: whether ONNX Runtime captured them, the same tokens, and tokens/s and
    step time at 1 and `concurrency` callers."""
    refs, sizes = ctx.references["marian"], ctx.sizes
    log_file = ctx.out / "server-cuda-graphs.log"
    graphed = ctx.start_server([ctx.kit / "models" / "marian"], log_file, "--cuda-graphs")
    try:
        out = {"captured": "(captured: yes)" in log_file.read_text(errors="replace")}
        eager_ids, graph_ids = eager_tokens(ctx, refs), served_tokens(graphed, refs)
        out["same_tokens"] = sum(a == b for a, b in zip(eager_ids, graph_ids)) / len(eager_ids)
        out["same_as_cpu_reference"] = sum(a == b for a, b in zip(graph_ids, refs["tokens"])) / len(graph_ids)
        for concurrency, count in generate_loads(sizes):
            eager, graphs = (
                generate_rate(ctx, ctx.server, concurrency, count),
                generate_rate(ctx, graphed, concurrency, count),
            )
            out[str(concurrency)] = {
                "eager": eager,
                "graphs": graphs,
                "tokens_per_second_vs_eager": graphs["tokens_per_second"] / eager["tokens_per_second"],
            }
    finally:
        graphed.stop()
    return out


def moonshot(ctx) -> dict:
    """The absolute figures aimed at on one H200, recorded: MiniLM over gRPC from 4 caller processes (16
    sentences of 10-60 words a call), and the Marian model at moonshot_streams concurrent streams."""
    sizes, server = ctx.sizes, ctx.server
    count = sizes.embed_count * 4
    command = [
        sys.executable,
        "-m",
        "benchmarks.load_clients",
        "--target",
        server.target,
        "--clients",
        str(sizes.embed_clients),
        "--per-call",
        "16",
        "--count",
        str(count // 4),
    ]
    with Utilization() as busy:
        started = time.perf_counter()
        callers = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(4)]
        for caller in callers:
            caller.communicate()
        wall = time.perf_counter() - started
    embed = {"sentences_per_second": count / wall, **busy.figures()}
    return {"goals": MOONSHOT, "minilm": embed, "marian": marian_streams(server, sizes)}


def marian_streams(server, sizes) -> dict:
    """The Marian model's moonshot_streams streams at once: tokens/s, time to first token, inter-token
    latency, the server's CPU a token (its API processes' included)."""
    cpu = server.cpu_seconds()
    with Utilization() as busy:
        command = ["-m", "benchmarks.stream_clients", "--target", server.target, "--model", "marian"]
        result = run_json(*command, "--streams", str(sizes.moonshot_streams), "--new-tokens", str(sizes.new_tokens))
    return {
        "tokens_per_second": result["tokens"] / result["wall"],
        "server_cpu_ms_per_token": (server.cpu_seconds() - cpu) / result["tokens"] * 1e3,
        "ttft_p50": float(np.median(result["ttft"])),
        "itl_p50": float(np.median(result["itl"] or [0])),
        "itl_p99": float(np.percentile(result["itl"] or [0], 99)),
        **busy.figures(),
    }


def memory(ctx) -> dict:
    out = {"server_rss_mb": ctx.server.rss_mb(), "kv_cache_bytes": ctx.server.metric("attnserve_kv_cache_bytes")}
    if ctx.device == "cuda":
        out["device_memory_used_bytes"] = ctx.server.metric("attnserve_device_memory_used_bytes")
        out["nvidia_smi_memory_used_mib"] = nvidia_smi("memory.used")
    return out


PHASES = {
    "parity": parity,
    "parity-marian": parity_marian,
    "embeddings": embeddings,
    "generation": generation,
    "memory": memory,
    "moonshot": moonshot,
    "cuda-graphs": cuda_graphs,
}
