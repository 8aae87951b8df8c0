"""M2M100 and NLLB-200 checkpoints (transformers' m2m_100) as our model: random checkpoints built by
transformers in several shapes, their logits at every step and their greedy output with a forced target
language equal to transformers'. (No checkpoint can be downloaded here; the tokenizers and a language
per request are the multilingual issue's next parts.)"""

from __future__ import annotations

import json

import pytest
import torch

from modelbuild.import_m2m100 import M2M100ImportError, m2m100_config, m2m100_model

transformers = pytest.importorskip("transformers")

# name -> transformers' M2M100Config fields: heads, layers, widths and activations vary.
SHAPES = {
    "relu-h4-2x2": dict(d_model=64, encoder_attention_heads=4, decoder_attention_heads=4, encoder_layers=2,
                        decoder_layers=2, encoder_ffn_dim=128, decoder_ffn_dim=128, activation_function="relu"),
    "gelu-h2-3x1": dict(d_model=32, encoder_attention_heads=2, decoder_attention_heads=2, encoder_layers=3,
                        decoder_layers=1, encoder_ffn_dim=48, decoder_ffn_dim=48, activation_function="gelu",
                        scale_embedding=False),
}  # fmt: skip
VOCAB, LANGUAGE = 150, 140  # a "language code" among the last ids, forced as the first generated token
NEW_TOKENS = 12


def checkpoint(directory, shape: dict, seed: int):
    """A random M2M100ForConditionalGeneration saved as safetensors (as from_pretrained dirs are)."""
    torch.manual_seed(seed)
    config = transformers.M2M100Config(
        vocab_size=VOCAB, max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, **shape,
    )  # fmt: skip
    model = transformers.M2M100ForConditionalGeneration(config).eval()
    model.save_pretrained(directory, safe_serialization=True)
    return model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {}
    for seed, (name, shape) in enumerate(SHAPES.items()):
        directory = tmp_path_factory.mktemp(name)
        out[name] = (checkpoint(directory, shape, seed), m2m100_model(directory), directory)
    return out


def batch(seed: int = 0):
    """Three sources of different lengths, right-padded with the pad token (1), each ending in eos (2)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = [9, 5, 2]
    ids = torch.ones(len(lengths), max(lengths), dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, : length - 1] = torch.randint(3, VOCAB, (length - 1,), generator=generator)
        ids[row, length - 1] = 2
    return ids, (ids != 1).long()


@pytest.mark.parametrize("name", list(SHAPES))
def test_logits_match_transformers_at_every_step(models, name):
    hf, ours, _ = models[name]
    ids, mask = batch()
    target = torch.cat([torch.full((3, 1), 2), torch.full((3, 1), LANGUAGE), torch.randint(3, VOCAB, (3, 10))], 1)
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits
        got = ours(ids, mask, target)
    assert got.shape == expected.shape == (3, 12, VOCAB)
    assert (got - expected).abs().max() <= 1e-4


@pytest.mark.parametrize("name", list(SHAPES))
def test_greedy_with_a_forced_language_matches_generate(models, name):
    hf, ours, _ = models[name]
    ids, mask = batch(seed=1)
    with torch.no_grad():
        expected = hf.generate(input_ids=ids, attention_mask=mask, forced_bos_token_id=LANGUAGE, num_beams=1,
                               do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)  # fmt: skip
        target = torch.tensor([[2, LANGUAGE]] * 3)
        while target.shape[1] < expected.shape[1]:
            target = torch.cat([target, ours(ids, mask, target)[:, -1].argmax(-1, keepdim=True)], 1)
    assert target.tolist() == expected.tolist()


def test_the_config_is_read_as_the_architecture_is(models):
    _, ours, directory = models["relu-h4-2x2"]
    c = ours.config
    assert (c.positions, c.position_offset, c.norm_placement, c.final_norm) == ("sinusoidal_fairseq", 2, "pre", True)
    assert (c.pad_id, c.bos_id, c.eos_id, c.scale_embeddings, c.tie_output, c.output_bias) == (
        1,
        2,
        2,
        True,
        True,
        False,
    )
    assert m2m100_config(models["gelu-h2-3x1"][2]).scale_embeddings is False


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"model_type": "marian"}, "not 'm2m_100'"),
        ({"activation_function": "tanh"}, "activation_function 'tanh'"),
        ({"decoder_ffn_dim": 64}, "different encoder and decoder widths"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings false"),
        ({"eos_token_id": [2, 3]}, "several eos tokens"),
    ],
)
def test_what_these_families_never_write_is_refused_with_the_reason(models, tmp_path, change, reason):
    _, _, directory = models["relu-h4-2x2"]
    config = json.loads((directory / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(M2M100ImportError, match=reason):
        m2m100_config(tmp_path)


def test_pickled_weights_are_never_loaded(models, tmp_path):
    _, _, directory = models["relu-h4-2x2"]
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(M2M100ImportError, match="safetensors weights only"):
        m2m100_model(tmp_path)
