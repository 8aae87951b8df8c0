"""The `attnserve` command: one parser, each subcommand dispatched to the side it belongs to (build.py,
serve.py, remote.py). Nothing is imported before a subcommand runs but what its parser needs, so the
serving commands work in an image without torch."""

from __future__ import annotations

import argparse
from pathlib import Path

from .build import (
    CHECKPOINTS_DIR,
    DEFAULT_MODELS_DIR,
    NUMBER_RANKERS,
    cmd_build,
    cmd_eval_number_rankers,
    cmd_eval_numbers,
    cmd_export,
    cmd_import,
    cmd_train_multilingual_numbers,
    cmd_train_number_rankers,
    cmd_train_numbers,
    cmd_train_t5_numbers,
)
from .prepare import cmd_prepare
from .remote import KINDS, cmd_embed, cmd_generate, cmd_heads, cmd_health, cmd_models, cmd_transcribe
from .serve import cmd_serve


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


PRECISIONS = ("fp32", "fp16", "int8")


class PrecisionsThenDirectory(argparse.Action):
    """--precision takes one or more precisions; a value after them that is not one is the model
    directory (`export --precision fp16 DIR`), which argparse would otherwise count as a precision. It is
    kept apart (the positional, left empty, is set after the options) and taken by cmd_export."""

    def __call__(self, parser, namespace, values, option_string=None):
        count = next((i for i, v in enumerate(values) if v not in PRECISIONS), len(values))
        if count == 0 or len(values) > count + 1:
            parser.error(f"argument {option_string}: give one or more of {', '.join(PRECISIONS)}, not {values}")
        setattr(namespace, self.dest, values[:count])
        namespace.directory_after_precision = Path(values[count]) if count < len(values) else None


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="localhost:50051", help="server address; default: %(default)s")
    parser.add_argument("--tls-ca", help="PEM CA to trust the server with (TLS)")
    parser.add_argument("--tls-cert", help="this client's PEM certificate (mutual TLS)")
    parser.add_argument("--tls-key", help="its PEM private key")
    parser.add_argument("--token-file", help="a file holding the bearer token to send")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve", description="Transformer inference server on ONNX Runtime")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    from service.ops.config_sources import add_arguments

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
    gen.add_argument("--source-language", default="", help="a multilingual model's: the text's language")
    gen.add_argument("--target-language", default="", help="a multilingual model's: the language to write in")
    gen.add_argument("--num-beams", type=int, default=0, help="beam search (> 1: the answer comes whole); default: 1")
    gen.add_argument(
        "--num-return-sequences",
        type=int,
        default=0,
        metavar="N",
        help="with --num-beams: print the N best hypotheses, a line each with its score",
    )
    gen.add_argument("--timeout", type=float, default=120.0, help="seconds; default: %(default)s")
    gen.set_defaults(run=cmd_generate)

    transcribe = commands.add_parser(
        "transcribe", help="transcribe a recording with a running server, each segment printed when final"
    )
    transcribe.add_argument("file", help="audio in any format FFmpeg reads (wav, mp3, flac, ogg, m4a, webm, ...)")
    transcribe.add_argument("--model", default="", help="default: the server's first speech model")
    _client_options(transcribe)
    transcribe.add_argument("--task", choices=["transcribe", "translate"], default="transcribe")
    transcribe.add_argument("--language", default="", help="ISO 639-1 code of the speech; default: detected")
    transcribe.add_argument("--prompt", default="", help="text the speech continues (names, spellings)")
    transcribe.add_argument("--temperature", type=float, default=0.0, help="the first; rises by 0.2 on fallback")
    transcribe.add_argument("--beam-size", type=int, default=5, help="at temperature 0; 1: greedy")
    transcribe.add_argument("--word-timestamps", action="store_true", help="time every word (with --format json)")
    transcribe.add_argument(
        "--cut-at-silences",
        action="store_true",
        help="cut the recording at its silences (voice activity) and decode the pieces at once: faster on long "
        "recordings, each piece without the text before it",
    )
    transcribe.add_argument(
        "--format", choices=["timed", "text", "json"], default="timed", help="timed: [start --> end] text lines"
    )
    transcribe.add_argument("--timeout", type=float, default=3600.0, help="seconds; default: %(default)s")
    transcribe.set_defaults(run=cmd_transcribe)

    heads = commands.add_parser(
        "heads",
        help="what each attention head attends to: a summary per head and a grid of heatmaps",
        description="Asks a running server for the attention maps of TEXT (the server needs --attention-maps), "
        "prints per head: entropy (nats), mean distance attended, and the shares of attention on special "
        "tokens, on the previous token and on itself; with --out, draws them (layers x heads).",
    )
    heads.add_argument("text")
    heads.add_argument("--model", default="", help="default: the server's first model")
    heads.add_argument("--out", type=Path, help="write the heatmaps to this PNG (needs matplotlib)")
    heads.add_argument(
        "--kind",
        choices=list(KINDS),
        help="which attention: encoder (self), decoder (self) or cross; default: cross for seq2seq "
        "models, encoder for embedding models",
    )
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
    export.add_argument("model_dir", type=Path, nargs="?", help="holds config.json, model.safetensors, tokenizer.json")
    export.add_argument(
        "--precision",
        nargs="+",
        action=PrecisionsThenDirectory,
        default=["fp32"],
        metavar="{fp32,fp16,int8}",
        help="graphs to write besides the float32 ones (always written): fp16 for GPUs, int8 for CPUs; "
        "default: fp32 only",
    )
    export.add_argument(
        "--external-data",
        choices=["auto", "always"],
        default="auto",
        help="where graphs keep their weights: auto puts those of a graph over 1 GiB in a data file beside it "
        "(<graph>.onnx.data; an ONNX file holds at most 2 GiB), always every graph's; default: %(default)s",
    )
    export.set_defaults(run=cmd_export)

    imp = commands.add_parser(
        "import",
        help="convert a checkpoint (MarianMT, M2M100, NLLB-200, mBART-50, BART, T5, Whisper, sentence-transformers "
        "BERT, XLM-RoBERTa or T5, a cross-encoder, SPLADE or ColBERT) into a model directory",
    )
    imp.add_argument(
        "source", type=Path, help="Hugging Face directory (config.json, model.safetensors, tokenizer files, ...)"
    )
    imp.add_argument("out", type=Path, help="model directory to write")
    imp.add_argument("--name", required=True, help="the model's name when served")
    imp.set_defaults(run=cmd_import)

    prepare = commands.add_parser(
        "prepare",
        help="make what a storageUri delivered ready to serve: model directories as they are, Hugging Face "
        "checkpoints imported and exported into a cache keyed by their checksum (before serve, in KServe's pod)",
    )
    prepare.add_argument("sources", type=Path, nargs="+", help="model directories, checkpoints, or directories of them")
    prepare.add_argument(
        "--out", type=Path, required=True, help="where the ready models are linked (serve --models OUT)"
    )
    prepare.add_argument("--cache", type=Path, required=True, help="the exports, by checksum (a volume pods share)")
    prepare.add_argument(
        "--precision",
        nargs="+",
        choices=["fp32", "fp16", "int8"],
        default=["fp32"],
        help="graphs to write besides the float32 ones: fp16 for GPUs, int8 for CPUs; default: fp32 only",
    )
    prepare.add_argument(
        "--name",
        help="the name of a model delivered as a source itself (hf:// leaves the checkpoint at the top of "
        "/mnt/models); models inside a source keep their directory's name. Default: the directory's name",
    )
    prepare.set_defaults(run=cmd_prepare)

    build = commands.add_parser("build", help="build the bundled models (import and export)")
    build.add_argument("--out", type=Path, default=DEFAULT_MODELS_DIR, help="default: %(default)s")
    build.set_defaults(run=cmd_build)

    # The defaults live with the trainer (model/bundled/numbers.py): importing it here would load the build side
    # for every subcommand, serve included.
    train = commands.add_parser(
        "train-numbers",
        help="train the bundled seq2seq model 'numbers' (about 4 min on 2 cores)",
        description="Train the numbers model. Options left out keep the settings the committed model was "
        "trained with; the first line printed lists them all",
    )
    train.add_argument("--out", type=Path, default=CHECKPOINTS_DIR / "numbers", help="default: %(default)s")
    train.add_argument("--seed", type=int, help="default: the committed model's")
    train.add_argument("--steps", type=int, help="default: the committed model's")
    train.add_argument("--heads", type=int, help="default: the committed model's")
    train.add_argument("--d-model", type=int, help="default: the committed model's")
    train.add_argument("--threads", type=int, help="default: the committed model's (results depend on it)")
    train.set_defaults(run=cmd_train_numbers)

    train_t5 = commands.add_parser(
        "train-t5-numbers",
        help="train the bundled T5 model 'numbers-t5' (Flan-T5's layout, task prefixes; about 5 min on 2 cores)",
        description="Train the T5 numbers model. Options left out keep the settings the committed model was "
        "trained with; the first line printed lists them all",
    )
    train_t5.add_argument("--out", type=Path, default=CHECKPOINTS_DIR / "numbers-t5", help="default: %(default)s")
    train_t5.add_argument("--seed", type=int, help="default: the committed model's")
    train_t5.add_argument("--steps", type=int, help="default: the committed model's")
    train_t5.add_argument("--threads", type=int, help="default: the committed model's (results depend on it)")
    train_t5.set_defaults(run=cmd_train_t5_numbers)

    train_multilingual = commands.add_parser(
        "train-multilingual-numbers",
        help="train the bundled multilingual model 'numbers-multilingual' (NLLB-200's architecture)",
        description="Train the multilingual numbers model. Options left out keep the settings the committed "
        "model was trained with; the first line printed lists them all",
    )
    train_multilingual.add_argument(
        "--out", type=Path, default=CHECKPOINTS_DIR / "numbers-multilingual", help="default: %(default)s"
    )
    train_multilingual.add_argument("--seed", type=int, help="default: the committed model's")
    train_multilingual.add_argument("--steps", type=int, help="default: the committed model's")
    train_multilingual.add_argument("--threads", type=int, help="default: the committed model's (results depend on it)")
    train_multilingual.set_defaults(run=cmd_train_multilingual_numbers)

    rankers = commands.add_parser(
        "train-number-rankers",
        help="train the bundled cross-encoders 'numbers-reranker' and 'numbers-language' (about 9 min on 2 cores)",
        description="Train the bundled reranker (digits -> which number words are they) and language classifier "
        "(number words -> en, fr, de or es), and print their held-out accuracy. Options left out keep the settings "
        "the committed models were trained with; the first line printed for each lists them all",
    )
    rankers.add_argument("models", nargs="*", metavar="MODEL", help=f"of {', '.join(NUMBER_RANKERS)}; default: both")
    rankers.add_argument(
        "--out", type=Path, default=CHECKPOINTS_DIR, help="a folder for each model; default: %(default)s"
    )
    rankers.add_argument("--seed", type=int, help="default: the committed models'")
    rankers.add_argument("--steps", type=int, help="default: the committed models'")
    rankers.add_argument("--threads", type=int, help="default: the committed models' (results depend on it)")
    rankers.set_defaults(run=cmd_train_number_rankers)

    rankers_eval = commands.add_parser(
        "eval-number-rankers", help="held-out accuracy of the bundled cross-encoders (their checkpoints)"
    )
    rankers_eval.add_argument(
        "models", nargs="*", metavar="MODEL", help=f"of {', '.join(NUMBER_RANKERS)}; default: both"
    )
    rankers_eval.add_argument("--checkpoints", type=Path, default=CHECKPOINTS_DIR, help="default: %(default)s")
    rankers_eval.add_argument("--count", type=int, default=2000, help="held-out examples; default: %(default)s")
    rankers_eval.set_defaults(run=cmd_eval_number_rankers)

    evaluate = commands.add_parser("eval-numbers", help="exact-match accuracy of an exported numbers model (ONNX)")
    evaluate.add_argument("model_dir", type=Path)
    evaluate.add_argument("--count", type=int, default=2000, help="numbers per direction; default: %(default)s")
    evaluate.add_argument("--seed", type=int, help="default: the evaluation seed, never a training seed")
    evaluate.add_argument("--threads", type=int, default=2)
    evaluate.add_argument(
        "--precision", choices=["fp32", "fp16", "int8"], default="fp32", help="the graphs to decode with"
    )
    evaluate.add_argument("--json", type=Path, help="also write the full report here")
    evaluate.set_defaults(run=cmd_eval_numbers)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
