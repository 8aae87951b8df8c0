"""Whisper checkpoints imported as our Seq2SeqModel (model/families/whisper/importer.py) compute what
transformers' WhisperForConditionalGeneration computes, on random checkpoints of several shapes (80 and
128 mel bins, widths, depths): the encoder's states and the teacher-forced logits within 1e-4, and greedy
tokens, step by step through our decoder cache, equal; checkpoints it cannot take are refused by name."""

from __future__ import annotations

import json

import pytest
import torch

from model.architecture.decoder_cache import ConcatCache
from model.families.whisper.importer import WhisperImportError, whisper_config, whisper_model
from model.families.whisper.random_checkpoint import WhisperShape, random_whisper_checkpoint

SHAPES = {
    "tiny-like": WhisperShape(),
    "128 mels": WhisperShape(n_mels=128, d_model=96, heads=4, d_ff=192),
    "deeper, 2 heads": WhisperShape(d_model=128, heads=2, encoder_layers=3, decoder_layers=1, d_ff=256),
}


@pytest.fixture(scope="module", params=list(SHAPES))
def pair(request, tmp_path_factory):
    """(our model, transformers' model, the shape) of one random checkpoint."""
    from transformers import WhisperForConditionalGeneration

    shape = SHAPES[request.param]
    source = random_whisper_checkpoint(tmp_path_factory.mktemp("whisper"), shape, seed=len(request.param))
    return whisper_model(source), WhisperForConditionalGeneration.from_pretrained(source).eval(), shape


def features(shape: WhisperShape, batch: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, shape.n_mels, 3000, generator=torch.Generator().manual_seed(seed))


def every_frame(batch: int) -> torch.Tensor:
    return torch.ones(batch, 1500, dtype=torch.long)


def test_the_encoder_and_teacher_forced_logits_equal_transformers(pair):
    ours, theirs, shape = pair
    inputs = features(shape)
    targets = torch.randint(0, shape.vocab_size - 3, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        states = ours.encode(inputs, every_frame(2))
        torch.testing.assert_close(states, theirs.model.encoder(inputs).last_hidden_state, rtol=0, atol=1e-4)
        logits = ours(inputs, every_frame(2), targets)
        expected = theirs(input_features=inputs, decoder_input_ids=targets).logits
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-4)
    assert expected.std() > 0.1  # logits that tell tokens apart: the comparison means something


def test_greedy_tokens_through_our_cache_equal_transformers(pair):
    ours, theirs, shape = pair
    inputs, start = features(shape, seed=2), ours.config.bos_id
    with torch.no_grad():
        cross = ours.project_cross(ours.encode(inputs, every_frame(2)))
        cache, step, mine = ours.empty_cache(2), torch.full((2, 1), start), []
        for length in range(1, 13):
            step = ours.decode(step, cache, cross, every_frame(2)).argmax(-1, keepdim=True)
            mine.append(step)
            past = [
                (torch.cat([pk, nk], 2), torch.cat([pv, nv], 2)) for (pk, pv), (nk, nv) in zip(cache.past, cache.new)
            ]
            cache = ConcatCache(past, torch.ones(2, length, dtype=torch.long))
        prefix = torch.full((2, 1), start)
        for _ in range(12):  # transformers recomputing the whole prefix at every step
            logits = theirs(input_features=inputs, decoder_input_ids=prefix).logits[:, -1]
            prefix = torch.cat([prefix, logits.argmax(-1, keepdim=True)], dim=1)
    assert torch.cat(mine, dim=1).tolist() == prefix[:, 1:].tolist()


def test_the_config_is_whispers(pair):
    ours, theirs, shape = pair
    config = ours.config
    assert (config.encoder_input, config.n_mels, config.max_source_positions) == ("log_mel", shape.n_mels, 1500)
    assert (config.positions, config.max_positions, config.norm_placement) == ("learned", 448, "pre")
    assert not config.share_embeddings and config.tie_output and config.activation == "gelu"


@pytest.mark.parametrize(
    "change, words",
    [
        ({"model_type": "bart"}, "not 'whisper'"),
        ({"scale_embedding": True}, "scaled embeddings"),
        ({"decoder_attention_heads": 8}, "different encoder and decoder widths"),
        ({"activation_function": "sparsemax"}, "activation_function 'sparsemax'"),
    ],
)
def test_checkpoints_it_cannot_take_are_refused_by_name(tmp_path, change, words):
    source = random_whisper_checkpoint(tmp_path / "whisper", WhisperShape(encoder_layers=1, decoder_layers=1))
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(WhisperImportError, match=words):
        whisper_config(source)


def test_pickled_weights_are_never_loaded(tmp_path):
    source = random_whisper_checkpoint(tmp_path / "whisper", WhisperShape(encoder_layers=1, decoder_layers=1))
    (source / "model.safetensors").rename(source / "pytorch_model.bin")
    with pytest.raises(WhisperImportError, match="safetensors weights only"):
        whisper_model(source)
