"""A random XLM-RoBERTa sentence-embedding checkpoint, as sentence-transformers saves multilingual-e5 or
paraphrase-multilingual models (no hub here: transformers builds the weights, sentencepiece trains a small
vocabulary on the spot): for parity tests of the importer and the served model against
sentence-transformers itself."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import sentencepiece
import torch

from model.export.stdlib_sentences import stdlib_sentences

XLM_R_SPECIALS = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]  # ids 0-3; <mask> comes last


@dataclass(frozen=True)
class XlmRobertaShape:
    d_model: int = 32
    heads: int = 4
    layers: int = 2
    d_ff: int = 64
    activation: str = "gelu"
    max_position_embeddings: int = 66  # the longest input: 66 - padding_idx (1) - 1 = 64 tokens
    max_seq_length: int = 64  # sentence-transformers' truncation
    pooling: str = "mean"  # or "cls"
    normalize: bool = True
    # sentence-transformers' Dense layers after the pooling (LaBSE's: one of d_model, with bias, tanh):
    # (width, bias, "identity" or "tanh") each
    dense: tuple[tuple[int, bool, str], ...] = ()
    pieces: int = 400
    prompts: tuple[tuple[str, str], ...] = ()  # sentence-transformers' prompts: (name, text)
    default_prompt_name: str | None = None


def xlm_roberta_tokenizer(shape: XlmRobertaShape, seed: int):
    """XLM-R's layout: <s> <pad> </s> <unk>, the sentencepiece pieces, <mask>."""
    from transformers import XLMRobertaTokenizer

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(stdlib_sentences(1500 + seed)),
        model_writer=model,
        vocab_size=shape.pieces,
        hard_vocab_limit=False,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
    )
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    pieces = [(processor.id_to_piece(i), processor.get_score(i)) for i in range(processor.get_piece_size())]
    own = {name for name, _ in XLM_R_SPECIALS}
    return XLMRobertaTokenizer(vocab=XLM_R_SPECIALS + [p for p in pieces if p[0] not in own])


def random_xlm_roberta_checkpoint(out_dir: Path, shape: XlmRobertaShape = XlmRobertaShape(), seed: int = 0) -> Path:
    """A sentence-transformers directory: the XLM-R weights (safetensors), tokenizer.json, pooling, Dense
    layers where the shape has them, normalisation."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer
    from transformers import XLMRobertaConfig, XLMRobertaModel

    out_dir = Path(out_dir)
    tokenizer = xlm_roberta_tokenizer(shape, seed)
    config = XLMRobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.d_model,
        num_attention_heads=shape.heads,
        num_hidden_layers=shape.layers,
        intermediate_size=shape.d_ff,
        hidden_act=shape.activation,
        max_position_embeddings=shape.max_position_embeddings,
        type_vocab_size=1,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    encoder_dir = out_dir / "encoder"
    XLMRobertaModel(config, add_pooling_layer=False).eval().save_pretrained(encoder_dir)
    tokenizer.save_pretrained(encoder_dir)
    transformer = Transformer(str(encoder_dir), max_seq_length=shape.max_seq_length)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode=shape.pooling)
    modules, width = [transformer, pooling], shape.d_model
    for out_features, bias, activation in shape.dense:
        function = torch.nn.Tanh() if activation == "tanh" else torch.nn.Identity()
        modules.append(Dense(width, out_features, bias=bias, activation_function=function))
        width = out_features
    modules += [Normalize()] if shape.normalize else []
    model = SentenceTransformer(
        modules=modules, device="cpu", prompts=dict(shape.prompts), default_prompt_name=shape.default_prompt_name
    )
    model.save(str(out_dir / "model"))
    return out_dir / "model"


def random_bge_m3_checkpoint(
    out_dir: Path, shape: XlmRobertaShape = XlmRobertaShape(pooling="cls"), colbert_dim: int = 0, seed: int = 0
) -> Path:
    """bge-m3's layout on a random XLM-R: the sentence-transformers directory (CLS pooling, normalised),
    with FlagEmbedding's sparse_linear.pt and colbert_linear.pt beside it (state dicts of nn.Linear, saved
    as FlagEmbedding saves them). colbert_dim 0: d_model, as bge-m3's."""
    model_dir = random_xlm_roberta_checkpoint(out_dir, shape, seed)
    torch.manual_seed(seed + 1)
    sparse = torch.nn.Linear(shape.d_model, 1)
    colbert = torch.nn.Linear(shape.d_model, colbert_dim or shape.d_model)
    torch.save(sparse.state_dict(), model_dir / "sparse_linear.pt")
    torch.save(colbert.state_dict(), model_dir / "colbert_linear.pt")
    return model_dir
