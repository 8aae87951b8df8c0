"""Import a Hugging Face MarianMT checkpoint (the opus-mt family) into a model directory.

The source directory holds config.json (a MarianConfig), model.safetensors, source.spm, target.spm and
vocab.json, and perhaps generation_config.json; a checkpoint whose tokenizer_config.json says
separate_vocabs also has target_vocab.json (the decoder's vocabulary, as large as the source's, with
the special tokens at the same ids: Marian's converter makes them so).

Marian is the paper's Transformer: post-norm residuals, sinusoidal positions (sines and cosines in two
halves), embeddings scaled by sqrt(d_model), one token table shared by encoder, decoder and output layer
(or one each), plus a bias on the logits (final_logits_bias). The decoder starts from the pad token;
eos is id 0.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import torch
from safetensors import safe_open

from model.architecture.positions import sinusoid_table
from model.architecture.transformer import Seq2SeqModel
from model.architecture.weights import save_model_dir
from model.families.bert.importer import HF_ACTIVATIONS as BERT_ACTIVATIONS
from modeldir.config import ModelConfig
from modeldir.files import MARIAN_TARGET_VOCAB_FILE, MARIAN_TOKENIZER_FILES, tokenizer_files
from modeldir.tokenizer import MarianTokenizer

HF_ACTIVATIONS = {**BERT_ACTIVATIONS, "swish": "silu"}  # Marian's configs say swish
ATTENTION = {"q_proj": "w_q", "k_proj": "w_k", "v_proj": "w_v", "out_proj": "w_o"}
LAYER_PARTS = {
    "self_attn": "self_attention",
    "self_attn_layer_norm": "self_attention_norm",
    "encoder_attn": "cross_attention",
    "encoder_attn_layer_norm": "cross_attention_norm",
    "fc1": "feed_forward.w_1",
    "fc2": "feed_forward.w_2",
    "final_layer_norm": "feed_forward_norm",
}
_LAYER = re.compile(
    r"^model\.(encoder|decoder)\.layers\.(\d+)\.(\w+?)(?:\.(q_proj|k_proj|v_proj|out_proj))?\.(weight|bias)$"
)
# Token tables (and the output layer), under the names a checkpoint may use for them.
_TABLES = {
    "model.shared.weight",
    "model.encoder.embed_tokens.weight",
    "model.decoder.embed_tokens.weight",
    "lm_head.weight",
}
# The sinusoid tables: read for a check, not as weights.
_POSITIONS = re.compile(r"^model\.(encoder|decoder)\.embed_positions\.weight$")


class MarianImportError(ValueError):
    """A checkpoint directory this importer cannot take, with the reason."""


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _suppressed_ids(settings: dict) -> tuple[int, ...]:
    """Single-token bad_words_ids (opus-mt: [[pad]]); longer banned phrases are not supported."""
    banned = settings.get("bad_words_ids") or []
    longer = [words for words in banned if len(words) != 1]
    if longer:
        raise MarianImportError(f"bad_words_ids of more than one token are not supported: {longer}")
    return tuple(sorted({words[0] for words in banned}))


# A target language's token in a Marian vocabulary with several targets (opus-mt-en-ROMANCE: >>fra<<).
_TARGET_CODE = re.compile(r"^>>(\w+)<<$")


def marian_languages(source: Path) -> dict:
    """The ModelConfig fields of a checkpoint's languages: its pair (tokenizer_config.json's source_lang and
    target_lang), and where the vocabulary has target codes (>>fra<<), the targets a request chooses from,
    put at the start of the source as transformers' MarianTokenizer reads them there."""
    settings = _read_json(source / "tokenizer_config.json")
    fields = {}
    if settings.get("source_lang") and settings.get("target_lang"):
        fields["language_pair"] = (str(settings["source_lang"]), str(settings["target_lang"]))
    vocab = _read_json(source / "vocab.json")
    codes = tuple(match.group(1) for token in vocab if (match := _TARGET_CODE.match(token)))
    if codes:
        fields.update(languages=codes, language_token=">>{}<<", target_language="source_prefix")
    return fields


def marian_config(source: Path, separate_vocabs: bool = False) -> ModelConfig:
    hf = _read_json(source / "config.json")
    if hf.get("model_type") != "marian":
        raise MarianImportError(f"{source}/config.json: model_type is {hf.get('model_type')!r}, not 'marian'")
    # generation_config.json overrides the generation settings config.json carries (as transformers reads them).
    generation = {**hf, **_read_json(source / "generation_config.json")}
    problems = []
    if hf["activation_function"] not in HF_ACTIVATIONS:
        problems.append(f"activation_function {hf['activation_function']!r}")
    if hf.get("normalize_before") or hf.get("add_final_layer_norm") or hf.get("normalize_embedding"):
        problems.append("pre-norm or extra LayerNorms (normalize_before/add_final_layer_norm/normalize_embedding)")
    if hf.get("static_position_embeddings", True) is False:
        problems.append("learned positions")
    problems += stack_problems(hf)
    if hf.get("decoder_vocab_size") not in (None, hf["vocab_size"]):
        problems.append(f"a separate target vocabulary ({hf['decoder_vocab_size']} vs {hf['vocab_size']})")
    eos = generation.get("eos_token_id", 0)
    if isinstance(eos, list):
        if len(eos) != 1:
            problems.append(f"several eos tokens {eos}")
        eos = eos[0]
    forced = generation.get("forced_eos_token_id")
    if forced not in (None, eos):
        problems.append(f"forced_eos_token_id {forced} that is not eos {eos}")
    if problems:
        raise MarianImportError(f"{source}: not supported: " + "; ".join(problems))
    return ModelConfig(
        task="seq2seq",
        **stack_fields(hf),
        positions="sinusoidal_split",
        norm_placement="post",
        activation=HF_ACTIVATIONS[hf["activation_function"]],
        layer_norm_eps=1e-5,  # nn.LayerNorm's default, which Marian's layers use
        scale_embeddings=bool(hf.get("scale_embedding", False)),
        tie_output=bool(hf.get("tie_word_embeddings", True)),
        output_bias=True,
        tokenizer="marian_separate_vocabs" if separate_vocabs else "marian",
        pad_id=hf["pad_token_id"],
        bos_id=hf["decoder_start_token_id"],
        eos_id=eos,
        suppressed_ids=_suppressed_ids(generation),
        forced_eos=forced is not None,
        renormalize_logits=bool(generation.get("renormalize_logits", False)),
        **generation_defaults(generation),
        **marian_languages(source),
    )


def stack_problems(hf: dict) -> list[str]:
    """What our model cannot take of a BART-style config's stacks (Marian, M2M100 and mBART write alike)."""
    same = hf["decoder_attention_heads"] == hf["encoder_attention_heads"]
    return [] if same and hf["decoder_ffn_dim"] == hf["encoder_ffn_dim"] else ["different encoder and decoder widths"]


def stack_fields(hf: dict, positions: str = "max_position_embeddings") -> dict:
    """The ModelConfig fields of a BART-style config's stacks; `positions`: the field of the decoder's
    longest sequence (Whisper's max_target_positions)."""
    return dict(
        vocab_size=hf["vocab_size"],
        d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"],
        d_ff=hf["encoder_ffn_dim"],
        n_encoder_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"],
        max_positions=hf[positions],
    )


def safetensors_file(source: Path, error: type[ValueError]) -> Path:
    """A checkpoint's model.safetensors; `error` where there is none (pickled weights are never loaded)."""
    weights = Path(source) / "model.safetensors"
    if not weights.is_file():
        raise error(f"{weights}: not found (safetensors weights only; pickled ones are never loaded)")
    return weights


def generation_defaults(generation: dict) -> dict:
    """A request's defaults as a checkpoint's generation settings state them (transformers' meanings)."""
    early_stopping = generation.get("early_stopping", False)
    return dict(
        num_beams=int(generation.get("num_beams", 1)),
        no_repeat_ngram_size=int(generation.get("no_repeat_ngram_size") or 0),
        min_length=int(generation.get("min_length") or 0),
        length_penalty=float(generation.get("length_penalty", 1.0)),
        early_stopping=early_stopping if early_stopping == "never" else str(bool(early_stopping)).lower(),
    )


def rename(name: str) -> str | None:
    """Our parameter name for a MarianMTModel layer tensor or the logits bias; None for the token tables
    (placed by _token_tables) and the position tables."""
    if name == "final_logits_bias":
        return "logits_bias"
    if name in _TABLES or _POSITIONS.match(name):
        return None
    match = _LAYER.match(name)
    if match and match.group(3) in LAYER_PARTS:
        stack, index, part, projection, kind = match.groups()
        ours = LAYER_PARTS[part] + (f".{ATTENTION[projection]}" if projection else "")
        return f"{stack}.layers.{index}.{ours}.{kind}"
    raise MarianImportError(f"unexpected tensor in the Marian checkpoint: {name}")


def _token_tables(tables: dict[str, torch.Tensor], tie_output: bool) -> tuple[dict[str, torch.Tensor], bool]:
    """-> our token tables and output layer, and whether encoder and decoder share one table.

    A checkpoint may store the encoder's and decoder's tables under their own names (untied ones always,
    tied ones in older saves) or only the shared one; where both are there, the own names are what
    transformers computes with."""
    shared = tables.get("model.shared.weight")
    encoder = tables.get("model.encoder.embed_tokens.weight", shared)
    decoder = tables.get("model.decoder.embed_tokens.weight", shared)
    if encoder is None or decoder is None:
        raise MarianImportError("no token table (model.shared.weight) in the checkpoint")
    ours = {"encoder.embeddings.tokens.weight": encoder, "decoder.embeddings.tokens.weight": decoder}
    if not tie_output:
        if "lm_head.weight" not in tables:
            raise MarianImportError("tie_word_embeddings is false, but the checkpoint has no lm_head.weight")
        ours["lm_head.weight"] = tables["lm_head.weight"]
    return ours, torch.equal(encoder, decoder)


def check_sinusoid_positions(name: str, table: torch.Tensor, error: type[ValueError] = MarianImportError) -> None:
    """A checkpoint that stores its position table (Marian's, Pegasus's) must hold the one we rebuild from
    the config: sines, then cosines."""
    ours = sinusoid_table(table.shape[0], table.shape[1], split=True)
    if not torch.allclose(table.float(), ours, atol=1e-5):
        raise error(f"{name} is not the sinusoid table (sines, then cosines): learned positions are not supported")


def import_marian(source: Path, out_dir: Path, name: str) -> Path:
    """Convert a MarianMT checkpoint directory into our model directory (tokenizer files copied as they are)."""
    source = Path(source)
    weights = source / "model.safetensors"
    if not weights.is_file():
        pickled = [p.name for p in source.glob("*.bin")] + [p.name for p in source.glob("*.pt")]
        reason = f"only pickled weights ({', '.join(pickled)}), which are never loaded" if pickled else "not found"
        raise MarianImportError(
            f"{weights}: {reason}; convert the checkpoint to safetensors first "
            "(transformers: MarianMTModel.from_pretrained(dir).save_pretrained(dir, safe_serialization=True))"
        )
    missing = [f for f in MARIAN_TOKENIZER_FILES if not (source / f).is_file()]
    if missing:
        raise MarianImportError(f"{source}: missing tokenizer files {', '.join(missing)}")
    separate_vocabs = bool(_read_json(source / "tokenizer_config.json").get("separate_vocabs"))
    if separate_vocabs and not (source / MARIAN_TARGET_VOCAB_FILE).is_file():
        raise MarianImportError(
            f"{source}: tokenizer_config.json says separate_vocabs, but {MARIAN_TARGET_VOCAB_FILE} is missing"
        )
    config = marian_config(source, separate_vocabs)
    _check_vocabularies(source, config)
    state, tables = {}, {}
    with safe_open(str(weights), framework="pt") as f:
        for key in f.keys():
            if _POSITIONS.match(key):
                check_sinusoid_positions(key, f.get_tensor(key))
            elif key in _TABLES:
                tables[key] = f.get_tensor(key).float()
            elif (ours := rename(key)) is not None:
                tensor = f.get_tensor(key).float()
                state[ours] = tensor.reshape(-1) if ours == "logits_bias" else tensor  # (1, vocab) in Marian
    token_tables, shared = _token_tables(tables, config.tie_output)
    state.update(token_tables)
    config = dataclasses.replace(config, share_embeddings=shared)
    state.setdefault("logits_bias", torch.zeros(config.vocab_size))
    model = Seq2SeqModel(config)
    model.load_state_dict(state, strict=True)
    out_dir = save_model_dir(model.eval(), name, out_dir)
    for file in tokenizer_files(config.tokenizer):
        shutil.copyfile(source / file, out_dir / file)
    return out_dir


def _check_vocabularies(source: Path, config: ModelConfig) -> None:
    """Every id a vocabulary gives must have a row in the token tables (else the model's lookup fails at
    serving time), and a separate target vocabulary keeps the special tokens' ids."""
    separate = config.tokenizer == "marian_separate_vocabs"
    try:
        tokenizer = MarianTokenizer(source, config.max_input_tokens, separate)
    except ValueError as error:
        raise MarianImportError(str(error)) from None
    vocabularies = [("vocab.json", tokenizer.vocab)]
    if separate:
        vocabularies.append((MARIAN_TARGET_VOCAB_FILE, tokenizer.target_vocab))
    for file, vocab in vocabularies:
        if max(vocab.values()) >= config.vocab_size:
            raise MarianImportError(
                f"{source}/{file}: ids up to {max(vocab.values())}, beyond the model's {config.vocab_size} tokens"
            )
