"""The engines the benchmarks measure, each run in a process of its own: a runtime in a process where
another has run is not what it is alone (CTranslate2 ran 1.7x slower after a few PyTorch matrix
products in its process). One engine a call, one JSON line out.

    python -m benchmarks.engines st-embed --model DIR [--device cuda] --count 512 --batch 32 --threads 2
    python -m benchmarks.engines ort-embed --model DIR --precision int8 --count 512 --batch 32 --threads 2
    python -m benchmarks.engines hf-generate --model HF_DIR --count 64 --batch 32 --new-tokens 64 --threads 2
    python -m benchmarks.engines ct2-generate --model CT2_DIR --tokenizer DIR --compute-type int8 ...
    python -m benchmarks.engines attnserve-generate --target HOST:PORT --served NAME --count 64 --concurrency 32

Embeddings: the benchmark sentences (benchmarks/common.py, 10-60 words). Generation: written-out numbers
(benchmarks/translation_load.py `texts`), greedy, exactly --new-tokens tokens (eos held off) in every engine,
or --beams N: beam search up to --new-tokens tokens, ending at eos.
On --device cuda the PyTorch baselines run in float16; on the CPU in float32 with --threads threads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from .common import sentences
from .translation_load import clients, parse_languages, summary, texts


def chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def embed_texts(count: int) -> list[str]:
    return sentences(count, 10, 60, seed=11)


def st_embed(args) -> dict:
    """sentence-transformers encode (float16 on CUDA)."""
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    model = SentenceTransformer(args.model, device=args.device)
    if args.device == "cuda":
        model = model.half()
    texts = embed_texts(args.count)
    model.encode(texts[: args.batch], batch_size=args.batch)  # warm-up
    if args.device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    model.encode(texts, batch_size=args.batch)
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    return {
        "engine": "sentence-transformers",
        "sentences": len(texts),
        "seconds": seconds,
        "sentences_per_second": len(texts) / seconds,
    }


def ort_embed(args) -> dict:
    """ONNX Runtime in-process on a model directory's serving graph of --precision. --grouping sorted:
    batches of --batch sorted by length, as sentence-transformers sorts all its texts first; online:
    batches of 16 in the texts' own order, each cut into calls of similar lengths as the server's batcher
    cuts them (with 32 callers of one sentence each, about 16 wait while a batch runs)."""
    import numpy as np

    from modeldir.files import open_model_dir
    from modeldir.tokenizer import TextTokenizer, pad_batch
    from service.engine.batcher import split_by_length
    from service.engine.call_price import PROBE_TOKENS, measure_call_price
    from service.runner.sessions import CPU, CUDA, SessionSettings, create_session

    files = open_model_dir(args.model, precision=args.precision)
    settings = SessionSettings(device=args.device, intra_op_threads=args.threads)
    session = create_session(files.encoder, settings, CUDA if args.device == "cuda" else CPU)
    tokenizer = TextTokenizer(files.tokenizer, files.config.max_input_tokens)
    encoded = [e.ids for e in tokenizer.encode(embed_texts(args.count))]
    if args.grouping == "sorted":
        groups = chunks(sorted(encoded, key=len), args.batch)
    else:

        def run(tokens: int) -> None:  # the server's default price: measured at warm-up, so here too
            ids = np.array([encoded[0][:1] * tokens], np.int64)
            session.run(["embedding"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})

        cost = measure_call_price(run, min(PROBE_TOKENS, files.config.max_input_tokens))
        groups = [g for batch in chunks(encoded, 16) for g in split_by_length(batch, cost, len)]
    batches = [pad_batch(group, files.config.pad_id) for group in groups]
    session.run(["embedding"], {"input_ids": batches[-1][0], "attention_mask": batches[-1][1]})  # warm-up
    started = time.perf_counter()
    for ids, mask in batches:
        session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})
    seconds = time.perf_counter() - started
    return {
        "engine": f"onnxruntime ({args.precision}, {args.grouping})",
        "sentences": len(encoded),
        "seconds": seconds,
        "sentences_per_second": len(encoded) / seconds,
    }


def hf_generate(args) -> dict:
    """transformers' generate of a text-to-text checkpoint (Marian, T5), greedy, exactly --new-tokens tokens
    (float16 on CUDA, with what the model keeps float32 there: T5's wo)."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    dtype = torch.float16 if args.device == "cuda" else torch.float32
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model, dtype=dtype).eval().to(args.device)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    settings = {"num_beams": args.beams, "do_sample": False, "max_new_tokens": args.new_tokens}
    if args.beams == 1:  # greedy: exactly new_tokens (beam search ends at eos, as in every engine)
        settings["min_new_tokens"] = args.new_tokens
    sources = texts(args.count)
    eos = model.generation_config.eos_token_id

    def run(group):
        batch = tokenizer(group, return_tensors="pt", padding=True).to(args.device)
        out = model.generate(**batch, **settings)
        if args.device == "cuda":
            torch.cuda.synchronize()
        return out

    with torch.no_grad():
        run(sources[: args.batch])  # warm-up
        tokens, latencies = 0, []
        started = time.perf_counter()
        for group in chunks(sources, args.batch):
            begun = time.perf_counter()
            out = run(group)
            latencies += [time.perf_counter() - begun] * len(group)
            tokens += sum(generated_length(row, eos) for row in out.tolist())
        wall = time.perf_counter() - started
    return {"engine": "transformers", "batch": args.batch, **summary(tokens, wall, latencies, args.new_tokens)}


def generated_length(row: list[int], eos: int) -> int:
    """The tokens generate made in a row after its start token, up to its first eos (padding after it)."""
    made = row[1:]
    return made.index(eos) if eos in made else len(made)


def ct2_generate(args) -> dict:
    """CTranslate2 translate_batch of a converted checkpoint, greedy, exactly --new-tokens tokens, in
    --compute-type, tokenized by our model directory's tokenizer (the same pieces). With --languages, each
    source framed with its code and each example's target code as its target_prefix (CTranslate2's way to
    mix targets in a batch), the targets in turn; the code is not counted."""
    import ctranslate2

    from modeldir.files import open_model_dir
    from modeldir.language_tokenizer import load_model_tokenizer

    translator = ctranslate2.Translator(
        args.model, device=args.device, compute_type=args.compute_type, intra_threads=args.threads, inter_threads=1
    )
    files = open_model_dir(args.tokenizer)
    tokenizer = load_model_tokenizer(files.config, files.tokenizer)
    languages = parse_languages(args.languages)
    if languages:
        source, targets = languages
        pieces = [e.tokens for e in tokenizer.encode(texts(args.count), source=source)]
        prefixes = [[tokenizer.languages.token_of(targets[i % len(targets)])] for i in range(len(pieces))]
    else:
        pieces, prefixes = [e.tokens for e in tokenizer.encode(texts(args.count))], None
    length = args.new_tokens + (prefixes is not None)  # the prefix counts in CTranslate2's decoding length
    settings = {"beam_size": args.beams, "max_decoding_length": length}
    if args.beams == 1:
        settings["min_decoding_length"] = length

    def run(start: int, size: int):
        prefix = prefixes[start : start + size] if prefixes else None
        return translator.translate_batch(
            pieces[start : start + size], target_prefix=prefix, max_batch_size=args.batch, **settings
        )

    run(0, args.batch)  # warm-up
    tokens, latencies = 0, []
    started = time.perf_counter()
    for start in range(0, len(pieces), args.batch):
        begun = time.perf_counter()
        results = run(start, args.batch)
        latencies += [time.perf_counter() - begun] * len(results)
        tokens += sum(len(r.hypotheses[0]) - (prefixes is not None) for r in results)
    wall = time.perf_counter() - started
    return {
        "engine": f"ctranslate2 ({args.compute_type})",
        "batch": args.batch,
        **summary(tokens, wall, latencies, args.new_tokens),
    }


def attnserve_generate(args) -> dict:
    """Callers of a running server: --concurrency at once, each sending its next sentence when answered."""
    languages = parse_languages(args.languages)
    result = asyncio.run(
        clients(
            args.target,
            texts(args.count),
            args.concurrency,
            args.new_tokens,
            args.served,
            beams=args.beams,
            languages=languages,
        )
    )
    return {"engine": "attnserve", "concurrency": args.concurrency, **result}


ENGINES = {
    "st-embed": st_embed,
    "ort-embed": ort_embed,
    "hf-generate": hf_generate,
    "ct2-generate": ct2_generate,
    "attnserve-generate": attnserve_generate,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("engine", choices=list(ENGINES))
    parser.add_argument("--model", help="a model directory (ours, Hugging Face's or CTranslate2's)")
    parser.add_argument("--tokenizer", help="ct2-generate: our model directory (its tokenizer)")
    parser.add_argument("--languages", help="multilingual models: SOURCE:TARGET,TARGET,... (targets in turn)")
    parser.add_argument("--target", help="attnserve-generate: the server")
    parser.add_argument("--served", default="", help="attnserve-generate: the model's name on the server")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cpu")
    parser.add_argument("--precision", default="fp32", help="ort-embed: the graphs (fp32, fp16, int8)")
    parser.add_argument("--grouping", choices=["sorted", "online"], default="sorted", help="ort-embed: batches")
    parser.add_argument("--compute-type", default="float32", help="ct2-generate: float32, int8, int8_float32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--count", type=int, default=512)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--beams", type=int, default=1, help="generation: 1, greedy (exactly --new-tokens)")
    args = parser.parse_args()
    print(json.dumps(ENGINES[args.engine](args)))


if __name__ == "__main__":
    main()
