"""M2M100/NLLB-200 (transformers' m2m_100) and mBART-50 checkpoints as our model: random checkpoints built
by transformers in several shapes, their logits at every step and their greedy output with a forced
target language equal to transformers'. (No checkpoint can be downloaded here; the tokenizers and a
language per request are the multilingual issue's next parts.)"""

from __future__ import annotations

import json

import pytest
import torch

from model.families.multilingual.importer import MultilingualImportError, multilingual_config, multilingual_model

transformers = pytest.importorskip("transformers")


def stacks(d_model: int, heads: int, encoder_layers: int, decoder_layers: int, ffn: int, activation: str, **more):
    """transformers' config fields of two stacks of the same widths."""
    return dict(
        d_model=d_model,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        activation_function=activation,
        **more,
    )


# name -> (family, transformers' config fields): heads, layers, widths, activations and scaling vary.
SHAPES = {
    "m2m100-relu-h4-2x2": ("m2m_100", stacks(64, 4, 2, 2, 128, "relu")),
    "m2m100-gelu-h2-3x1": ("m2m_100", stacks(32, 2, 3, 1, 48, "gelu", scale_embedding=False)),
    "mbart-gelu-h4-2x2": ("mbart", stacks(64, 4, 2, 2, 96, "gelu", scale_embedding=True)),
    "mbart-relu-h2-1x3": ("mbart", stacks(32, 2, 1, 3, 64, "relu")),
}
CLASSES = {
    "m2m_100": ("M2M100Config", "M2M100ForConditionalGeneration"),
    "mbart": ("MBartConfig", "MBartForConditionalGeneration"),
}
VOCAB, LANGUAGE = 150, 140  # a "language code" among the last ids, forced as the first generated token
NEW_TOKENS = 12


def checkpoint(directory, family: str, shape: dict, seed: int):
    """A random model of the family saved as safetensors (as from_pretrained dirs are); mBART's logits bias
    drawn too (transformers starts it at zero), so that a lost bias shows."""
    torch.manual_seed(seed)
    config_class, model_class = (getattr(transformers, name) for name in CLASSES[family])
    config = config_class(
        vocab_size=VOCAB,
        max_position_embeddings=64,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_eos_token_id=None,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        **shape,
    )
    model = model_class(config).eval()
    if family == "mbart":
        with torch.no_grad():
            model.final_logits_bias.normal_()
    model.save_pretrained(directory, safe_serialization=True)
    return model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {}
    for seed, (name, (family, shape)) in enumerate(SHAPES.items()):
        directory = tmp_path_factory.mktemp(name)
        out[name] = (checkpoint(directory, family, shape, seed), multilingual_model(directory), directory)
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
        expected = hf.generate(
            input_ids=ids,
            attention_mask=mask,
            forced_bos_token_id=LANGUAGE,
            num_beams=1,
            do_sample=False,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
        )
        target = torch.tensor([[2, LANGUAGE]] * 3)
        while target.shape[1] < expected.shape[1]:
            target = torch.cat([target, ours(ids, mask, target)[:, -1].argmax(-1, keepdim=True)], 1)
    assert target.tolist() == expected.tolist()


def test_the_config_is_read_as_the_architecture_is(models):
    c = models["m2m100-relu-h4-2x2"][1].config
    assert (c.positions, c.position_offset, c.norm_placement, c.final_norm) == ("sinusoidal_fairseq", 2, "pre", True)
    assert (c.pad_id, c.bos_id, c.eos_id, c.scale_embeddings) == (1, 2, 2, True)
    assert (c.tie_output, c.output_bias, c.embedding_norm) == (True, False, False)
    assert multilingual_config(models["m2m100-gelu-h2-3x1"][2]).scale_embeddings is False
    c = models["mbart-gelu-h4-2x2"][1].config
    assert (c.positions, c.position_offset, c.embedding_norm, c.output_bias) == ("learned", 2, True, True)
    assert multilingual_config(models["mbart-relu-h2-1x3"][2]).scale_embeddings is False  # mBART's default


def test_forced_eos_is_read_and_a_missing_start_token_is_eos(models, tmp_path):
    config = json.loads((models["mbart-gelu-h4-2x2"][2] / "config.json").read_text())
    changed = {**config, "forced_eos_token_id": 2, "decoder_start_token_id": None}
    (tmp_path / "config.json").write_text(json.dumps(changed))
    c = multilingual_config(tmp_path)
    assert c.forced_eos is True and c.bos_id == 2


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"model_type": "marian"}, "not one of m2m_100, mbart"),
        ({"forced_eos_token_id": 3}, "forced_eos_token_id 3 that is not eos 2"),
        ({"activation_function": "tanh"}, "activation_function 'tanh'"),
        ({"decoder_ffn_dim": 64}, "different encoder and decoder widths"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings false"),
        ({"eos_token_id": [2, 3]}, "several eos tokens"),
    ],
)
def test_what_these_families_never_write_is_refused_with_the_reason(models, tmp_path, change, reason):
    _, _, directory = models["m2m100-relu-h4-2x2"]
    config = json.loads((directory / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(MultilingualImportError, match=reason):
        multilingual_config(tmp_path)


def test_pickled_weights_are_never_loaded(models, tmp_path):
    _, _, directory = models["m2m100-relu-h4-2x2"]
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(MultilingualImportError, match="safetensors weights only"):
        multilingual_model(tmp_path)
