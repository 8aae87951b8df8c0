"""Which family's importer `attnserve import` hands a checkpoint directory to (model/families/choice.py),
read from the files each family's checkpoints are saved with."""

from __future__ import annotations

import json

import pytest

from model.families.bart.importer import import_bart
from model.families.choice import family_of
from model.families.colbert.importer import import_colbert
from model.families.cross_encoder.importer import import_cross_encoder
from model.families.marian.importer import import_marian
from model.families.multilingual.importer import import_multilingual
from model.families.splade.importer import import_splade
from model.families.t5.importer import import_t5
from model.families.t5.sentence_t5 import import_sentence_t5


def checkpoint(tmp_path, config: dict, files: dict | None = None):
    (tmp_path / "config.json").write_text(json.dumps(config))
    for name, content in (files or {}).items():
        (tmp_path / name).write_text(json.dumps(content))
    return tmp_path


COLBERT_MODULES = [{"type": "sentence_transformers.models.Transformer"}, {"type": "pylate.models.Dense.Dense"}]
SENTENCE_MODULES = [
    {"type": "sentence_transformers.models.Transformer"},
    {"type": "sentence_transformers.models.Pooling"},
]
SPLADE_MODULES = [{"type": "sentence_transformers.sparse_encoder.models.SpladePooling"}]


@pytest.mark.parametrize(
    "config, files, importer, kind",
    [
        ({"model_type": "marian"}, {}, import_marian, "marian"),
        ({"model_type": "m2m_100"}, {}, import_multilingual, "m2m_100"),
        ({"model_type": "mbart"}, {}, import_multilingual, "mbart"),
        ({"model_type": "bart"}, {}, import_bart, "bart"),
        ({"model_type": "t5"}, {}, import_t5, "t5"),
        ({"model_type": "mt5"}, {}, import_t5, "mt5"),
        ({"model_type": "umt5"}, {}, import_t5, "umt5"),
        ({"model_type": "t5"}, {"modules.json": SENTENCE_MODULES}, import_sentence_t5, "t5 sentence-transformers"),
        (
            {"model_type": "xlm-roberta", "architectures": ["XLMRobertaForSequenceClassification"]},
            {},
            import_cross_encoder,
            "xlm-roberta cross-encoder",
        ),
        ({"model_type": "bert"}, {"modules.json": SPLADE_MODULES}, import_splade, "bert SPLADE"),
        ({"model_type": "bert"}, {"modules.json": COLBERT_MODULES}, import_colbert, "bert ColBERT"),
        (
            {"model_type": "bert"},
            {"config_sentence_transformers.json": {"model_type": "ColBERT"}},
            import_colbert,
            "bert ColBERT",
        ),
    ],
)
def test_the_most_specific_family_takes_a_checkpoint(tmp_path, config, files, importer, kind):
    family, found = family_of(checkpoint(tmp_path, config, files))
    assert (family.importer, found) == (importer, kind)


def test_what_no_family_claims_goes_to_bert_which_refuses_it_by_name(tmp_path):
    source = checkpoint(tmp_path, {"model_type": "gpt2"})
    (source / "model.safetensors").touch()
    family, kind = family_of(source)
    assert kind == "gpt2"
    with pytest.raises(ValueError, match=r"model_type 'gpt2' is not supported \(one of bert, xlm-roberta\)"):
        family.importer(source, tmp_path / "out", "t")
