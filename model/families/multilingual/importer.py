"""The multilingual families' checkpoints as our Seq2SeqModel: M2M100 and NLLB-200 (transformers'
model_type "m2m_100": the same architecture) and mBART-50 and mBART-25 ("mbart"); config.json read into a
ModelConfig, the safetensors tensors into our parameter names.

Both are pre-norm with a LayerNorm closing each stack and one token table for encoder, decoder and
output layer. M2M100/NLLB: token embeddings scaled by sqrt(d_model), no bias on the logits, fairseq's
sinusoidal positions (model/architecture/positions.py `fairseq_sinusoid_table`) counted from pad_id + 1.
mBART: learned positions counted from 2, a LayerNorm on the embeddings (layernorm_embedding), a bias on
the logits (final_logits_bias). The decoder starts from eos; the target language's code is the first
token generated, forced per request (mBART-25's tokenizer, MBartTokenizer: the decoder starts from the
target's code, and the source's code follows the source's </s>).

Their tokenizers: M2M100's sentencepiece.bpe.model and vocab.json, its language tokens (__fr__) after
the vocabulary in the order of transformers' table that tokenizer_config.json names (language_codes);
NLLB's and mBART-50's tokenizer.json, whose added tokens hold the language codes (fra_Latn, fr_XX). The
source's code goes before the text (NLLB with legacy_behaviour: after its </s>).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

from safetensors import safe_open
from torch import nn

from model.architecture.transformer import Seq2SeqModel
from model.architecture.weights import save_model_dir
from model.families.marian.importer import (
    HF_ACTIVATIONS,
    MarianImportError,
    _token_tables,
    generation_defaults,
    safetensors_file,
    stack_fields,
    stack_problems,
)
from model.families.marian.importer import rename as rename_layer
from modeldir.config import ModelConfig
from modeldir.files import M2M100_TOKENIZER_FILES, TOKENIZER_FILE, tokenizer_files
from modeldir.language_tokenizer import load_model_tokenizer

# Per stack: its closing LayerNorm, and mBART's embedding LayerNorm and learned positions.
STACK_PARTS = {
    f"model.{stack}.{theirs}": f"{stack}.{ours}"
    for stack in ("encoder", "decoder")
    for theirs, ours in (
        ("layer_norm", "final_norm"),
        ("layernorm_embedding", "embeddings.norm"),
        ("embed_positions", "embeddings.positions"),
    )
}
FAMILIES = ("m2m_100", "mbart")
TABLES = {
    "model.shared.weight",
    "model.encoder.embed_tokens.weight",
    "model.decoder.embed_tokens.weight",
    "lm_head.weight",
}
# How each family's tokenizer.json spells a language code.
# mBART-25's tokenizer (mbart-large-cc25, mbart-large-en-ro), not mBART-50's: `text </s> [source code]`, and
# the target's code the decoder's start token.
MBART25_TOKENIZERS = ("MBartTokenizer", "MBartTokenizerFast")
CODE_PATTERNS = {"m2m_100": re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$"), "mbart": re.compile(r"^[a-z]{2}_[A-Z]{2}$")}


class MultilingualImportError(MarianImportError):
    """An M2M100, NLLB or mBART checkpoint this importer cannot take, with the reason."""


def tied_problems(hf: dict, generation: dict, activation: str) -> list[str]:
    """What our model cannot take of a config of BART's layout with one token table (M2M100, NLLB, mBART,
    BART); generation: config.json under generation_config.json; activation: the family's default."""
    problems = []
    if hf.get("activation_function", activation) not in HF_ACTIVATIONS:
        problems.append(f"activation_function {hf['activation_function']!r}")
    problems += stack_problems(hf)
    if hf.get("tie_word_embeddings", True) is False:
        problems.append("an output layer apart from the token table (tie_word_embeddings false)")
    eos = generation.get("eos_token_id", 2)
    if isinstance(eos, list):
        problems.append(f"several eos tokens {eos}")
    forced = generation.get("forced_eos_token_id")
    if forced not in (None, eos):
        problems.append(f"forced_eos_token_id {forced} that is not eos {eos}")
    return problems


def multilingual_config(source: Path) -> ModelConfig:
    path = Path(source) / "config.json"
    hf = json.loads(path.read_text())
    family = hf.get("model_type")
    if family not in FAMILIES:
        raise MultilingualImportError(f"{path}: model_type is {family!r}, not one of {', '.join(FAMILIES)}")
    generation_path = Path(source) / "generation_config.json"
    generation = {**hf, **(json.loads(generation_path.read_text()) if generation_path.is_file() else {})}
    problems = tied_problems(hf, generation, "relu")
    eos = generation.get("eos_token_id", 2)
    forced = generation.get("forced_eos_token_id")
    if problems:
        raise MultilingualImportError(f"{source}: not supported: " + "; ".join(problems))
    pad, mbart = hf["pad_token_id"], family == "mbart"
    return ModelConfig(
        task="seq2seq",
        **stack_fields(hf),
        positions="learned" if mbart else "sinusoidal_fairseq",
        position_offset=2 if mbart else pad + 1,  # mBART's offset is 2 whatever its pad token
        norm_placement="pre",
        activation=HF_ACTIVATIONS[hf.get("activation_function", "relu")],
        layer_norm_eps=1e-5,
        embedding_norm=mbart,
        scale_embeddings=bool(hf.get("scale_embedding", not mbart)),
        tie_output=True,
        output_bias=mbart,
        pad_id=pad,
        bos_id=hf.get("decoder_start_token_id") or eos,  # mBART-50's config leaves it to generation: eos
        eos_id=eos,
        forced_eos=forced is not None,
        **generation_defaults(generation),
    )


def rename(name: str, error: type[MarianImportError] = MultilingualImportError) -> str | None:
    """Our name for a checkpoint tensor; None for the token tables (placed apart)."""
    if name in TABLES:
        return None
    stack, _, kind = name.rpartition(".")
    if stack in STACK_PARTS:
        return f"{STACK_PARTS[stack]}.{kind}"
    try:
        return rename_layer(name)
    except MarianImportError:
        raise error(f"unexpected tensor in the checkpoint: {name}") from None


def tied_model(
    source: Path,
    config: ModelConfig,
    error: type[MarianImportError],
    build: Callable[[ModelConfig], nn.Module] = Seq2SeqModel,
    head: Mapping[str, str | None] = MappingProxyType({}),
) -> nn.Module:
    """A checkpoint of BART's layout whose one token table serves encoder, decoder and output layer (M2M100,
    NLLB, mBART, BART), with `config`, as our model (every tensor placed, none missing): build's, with a
    head's tensors renamed as `head` says (theirs -> ours; None: one not placed, checked by the caller)."""
    weights = safetensors_file(source, error)
    state, tables, theirs = {}, {}, {}
    with safe_open(str(weights), framework="pt") as f:
        for key in f.keys():
            if key in TABLES:
                tables[key] = f.get_tensor(key).float()
            elif (ours := head[key] if key in head else rename(key, error)) is not None:
                tensor = f.get_tensor(key).float()
                state[ours] = tensor.reshape(-1) if ours == "logits_bias" else tensor  # (1, vocab) in mBART
                theirs[ours] = key
    token_tables, shared = _token_tables(tables, tie_output=True)
    if not shared:
        raise error(f"{source}: the encoder's and decoder's token tables differ")
    state.update(token_tables)
    model = build(config)
    wanted = set(model.state_dict())
    if extra := sorted(theirs[name] for name in set(state) - wanted):  # a part of another family's layout
        raise error(f"{source}: unexpected tensor in the checkpoint: {', '.join(extra)}")
    if missing := sorted(wanted - set(state)):
        raise error(f"{source}: the checkpoint lacks our {', '.join(missing)}")
    model.load_state_dict(state, strict=True)
    return model.eval()


def multilingual_model(source: Path) -> Seq2SeqModel:
    """The checkpoint's config and weights as our model."""
    return tied_model(source, multilingual_config(source), MultilingualImportError)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _m2m100_codes(source: Path) -> tuple[str, ...]:
    """M2M100's language codes in the order that gives their ids: transformers' table of the name that
    tokenizer_config.json gives (language_codes), which no file of the checkpoint lists."""
    table = read_json(source / "tokenizer_config.json").get("language_codes", "m2m100")
    try:
        from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES
    except ImportError:
        raise MultilingualImportError(
            f"{source}: M2M100's language codes ({table!r}) are listed only in transformers; install it to import"
        ) from None
    if table not in FAIRSEQ_LANGUAGE_CODES:
        raise MultilingualImportError(f"{source}: language_codes {table!r} is not one of transformers' tables")
    return tuple(FAIRSEQ_LANGUAGE_CODES[table])


def language_fields(source: Path, family: str) -> dict:
    """The ModelConfig fields of the checkpoint's tokenizer and languages."""
    source = Path(source)
    if (source / TOKENIZER_FILE).is_file():
        added = read_json(source / TOKENIZER_FILE).get("added_tokens", [])
        codes = tuple(
            t["content"] for t in sorted(added, key=lambda t: t["id"]) if CODE_PATTERNS[family].match(t["content"])
        )
        tokenizer_config = read_json(source / "tokenizer_config.json")
        if family == "mbart" and is_mbart25(tokenizer_config, read_json(source / TOKENIZER_FILE)):
            fields = dict(tokenizer="tokenizers", languages=codes, source_language="suffix")
            return {**_checked(fields, source), "target_language": "decoder_start"}
        legacy = bool(tokenizer_config.get("legacy_behaviour", False))
        fields = dict(tokenizer="tokenizers", languages=codes, source_language="suffix" if legacy else "prefix")
    elif all((source / f).is_file() for f in M2M100_TOKENIZER_FILES) and family == "m2m_100":
        codes = _m2m100_codes(source)
        fields = dict(tokenizer="m2m100", languages=codes, language_token="__{}__", source_language="prefix")
    else:
        m2m100 = f", or {' and '.join(M2M100_TOKENIZER_FILES)}" if family == "m2m_100" else ""
        raise MultilingualImportError(f"{source}: no tokenizer ({TOKENIZER_FILE}{m2m100})")
    return {**_checked(fields, source), "target_language": "first_token"}


def is_mbart25(tokenizer_config: dict, tokenizer_json: dict) -> bool:
    """An mBART checkpoint whose tokenizer is mBART-25's: so named, or (older saves name none) its
    tokenizer.json ends a single text with a language code, after the </s>."""
    if tokenizer_config.get("tokenizer_class") in MBART25_TOKENIZERS:
        return True
    template = (tokenizer_json.get("post_processor") or {}).get("single") or [{}]
    last = template[-1].get("SpecialToken", {}).get("id", "")
    return bool(CODE_PATTERNS["mbart"].match(last))


def _checked(fields: dict, source: Path) -> dict:
    if not fields["languages"]:
        raise MultilingualImportError(f"{source}: the tokenizer names no language codes")
    return fields


def import_multilingual(source: Path, out_dir: Path, name: str) -> Path:
    """Convert an M2M100, NLLB-200, mBART-50 or mBART-25 checkpoint directory into our model directory
    (tokenizer files copied as they are)."""
    source = Path(source)
    model = multilingual_model(source)
    family = json.loads((source / "config.json").read_text())["model_type"]
    model.config = config = dataclasses.replace(model.config, **language_fields(source, family))
    tokenizer = load_model_tokenizer(config, source / TOKENIZER_FILE if config.tokenizer == "tokenizers" else source)
    # Every id the tokenizer gives must have a row in the token table, else the lookup fails when served.
    highest = max(tokenizer.ids.values())
    if config.tokenizer == "m2m100":
        highest = max(highest, *tokenizer.base.vocab.values())
    if highest >= config.vocab_size:
        raise MultilingualImportError(
            f"{source}: the tokenizer gives ids up to {highest}, beyond the model's {config.vocab_size} tokens"
        )
    out_dir = save_model_dir(model.eval(), name, out_dir)
    for file in tokenizer_files(config.tokenizer):
        shutil.copyfile(source / file, out_dir / file)
    return out_dir
