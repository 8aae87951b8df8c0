"""Cross-encoder and classifier checkpoints (BERT and XLM-RoBERTa sequence classification, as
sentence-transformers' CrossEncoder saves them): random ones built by transformers, imported with their
heads, labels and activation, exported; the exported graph over our tokenizer's pairs gives
CrossEncoder.predict's scores within 1e-5, over-long pairs included (cut as it cuts them)."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.export.stdlib_sentences import stdlib_sentences
from model.families.cross_encoder.importer import cross_encoder_config, head_rename
from modeldir.files import open_model_dir
from modeldir.tokenizer import TextTokenizer, pad_batch

sentence_transformers = pytest.importorskip("sentence_transformers")
MAX_LENGTH = 64  # CrossEncoderShape's max_length


class Exported:
    """A cross-encoder imported and exported, with CrossEncoder itself beside it."""

    def __init__(self, source, directory):
        self.source, self.dir = source, directory
        files = open_model_dir(self.dir)
        self.config = files.config
        self.tokenizer = TextTokenizer(files.tokenizer, self.config.max_input_tokens)
        self.session = ort.InferenceSession(str(files.encoder), providers=["CPUExecutionProvider"])
        self.reference = sentence_transformers.CrossEncoder(str(self.source), device="cpu")

    def scores(self, pairs: list[tuple[str, str]], only_second: bool = False) -> np.ndarray:
        encoded = self.tokenizer.encode_pairs(pairs, "only_second" if only_second else "longest_first")
        ids, mask = pad_batch([e.ids for e in encoded], self.config.pad_id)
        (logits,) = self.session.run(["logits"], {"input_ids": ids, "attention_mask": mask})
        if self.config.score_activation == "sigmoid":
            return 1 / (1 + np.exp(-logits[:, 0]))
        return logits[:, 0] if logits.shape[1] == 1 else logits


@pytest.fixture(scope="module")
def exported(cross_encoders):
    return {name: Exported(source, directory) for name, (source, directory) in cross_encoders.items()}


def pairs_of(count: int, seed: int = 0) -> list[tuple[str, str]]:
    texts = stdlib_sentences(2 * count + seed, 3, 60)[seed:]
    return list(zip(texts[::2], texts[1::2]))


def test_heads_labels_and_activation_are_imported(exported):
    reranker, classifier = exported["bert-reranker"].config, exported["bert-classifier"].config
    assert (reranker.head, reranker.labels, reranker.score_activation) == ("classifier", ("LABEL_0",), "sigmoid")
    assert reranker.pair_segments and not exported["xlmr-reranker"].config.pair_segments
    assert classifier.labels == ("negative", "neutral", "positive") and classifier.score_activation == "identity"
    manifest = json.loads((exported["bert-reranker"].dir / "manifest.json").read_text())
    assert [o["name"] for o in manifest["graphs"]["encoder"]["outputs"]] == ["last_hidden_state", "logits"]
    assert manifest["parity"]["logits_max_abs_diff"] < 1e-4


@pytest.mark.parametrize("name", ["bert-reranker", "xlmr-reranker"])
def test_scores_equal_cross_encoder_predict_long_pairs_included(exported, name):
    model = exported[name]
    pairs = pairs_of(24)
    long_pair = (" ".join(stdlib_sentences(4, 20, 40)), " ".join(stdlib_sentences(6, 20, 40)[4:]))
    pairs.append(long_pair)
    assert len(model.reference.tokenizer(*long_pair)["input_ids"]) > MAX_LENGTH  # it is cut
    np.testing.assert_allclose(model.scores(pairs), model.reference.predict(pairs), atol=1e-5)


def test_classifier_logits_equal_cross_encoder(exported):
    model = exported["bert-classifier"]
    pairs = pairs_of(8, seed=3)
    np.testing.assert_allclose(model.scores(pairs), model.reference.predict(pairs), atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(query=st.text(min_size=1, max_size=80), document=st.text(min_size=1, max_size=400))
def test_any_pair_scores_as_cross_encoder_does(exported, query, document):
    model = exported["bert-reranker"]
    pair = [(query, document)]
    np.testing.assert_allclose(model.scores(pair), model.reference.predict(pair), atol=1e-5)


def test_only_the_document_is_cut_on_request(exported):
    model = exported["bert-reranker"]
    query, document = "which module parses command lines", " ".join(stdlib_sentences(8, 20, 40))
    (cut,) = model.tokenizer.encode_pairs([(query, document)], "only_second")
    query_ids = model.tokenizer.encode([query])[0].ids[1:-1]
    assert cut.ids[1 : 1 + len(query_ids)] == query_ids and len(cut.ids) == model.config.max_input_tokens
    model.reference.tokenizer.truncation_side = "right"
    want = model.reference.tokenizer([query], [document], truncation="only_second", max_length=64)["input_ids"][0]
    assert cut.ids == want


def test_names_and_refusals():
    assert head_rename("bert.pooler.dense.weight") == "head_dense.weight"
    assert head_rename("classifier.out_proj.bias") == "head_out.bias"
    assert head_rename("classifier.weight") == "head_out.weight"
    assert head_rename("roberta.encoder.layer.1.output.dense.bias") == "encoder.layers.1.feed_forward.w_2.bias"


def test_other_architectures_are_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertForMaskedLM"], "model_type": "bert"}))
    with pytest.raises(ValueError, match="architecture 'BertForMaskedLM' is not supported"):
        cross_encoder_config(tmp_path)


def test_the_cli_imports_it(exported, tmp_path):
    import subprocess
    import sys

    source = exported["xlmr-reranker"].source
    done = subprocess.run(
        [sys.executable, "-m", "cli", "import", str(source), str(tmp_path / "r"), "--name", "r"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "(xlm-roberta cross-encoder) as 'r'" in done.stdout, done.stderr


def test_a_tokenizer_without_token_types_is_served_as_transformers_runs_it(exported, tmp_path):
    """A BERT cross-encoder whose tokenizer gives no token_type_ids (tokenizer_config.json's
    model_input_names, or a generic tokenizer class) runs with every token of type 0 under transformers:
    imported so, it scores as CrossEncoder does."""
    import io
    import shutil

    from model.export.model_dir import export_model_dir
    from model.families.cross_encoder.importer import import_cross_encoder

    source = shutil.copytree(exported["bert-reranker"].source, tmp_path / "hf")
    settings_path = source / "tokenizer_config.json"
    settings = json.loads(settings_path.read_text())
    settings_path.write_text(json.dumps({**settings, "model_input_names": ["input_ids", "attention_mask"]}))
    directory = import_cross_encoder(source, tmp_path / "untyped", "untyped")
    export_model_dir(directory, progress_stream=io.StringIO())
    untyped = Exported(source, directory)
    assert not untyped.config.pair_segments
    pairs = pairs_of(12, seed=5)
    want = untyped.reference.predict(pairs)
    np.testing.assert_allclose(untyped.scores(pairs), want, atol=1e-5)
