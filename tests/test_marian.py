"""MarianMT checkpoints: import, tokenization and parity with transformers (served over gRPC:
test_marian_serving.py).

No checkpoint can be downloaded here: transformers builds random MarianMTModels
(model/families/marian/random_checkpoint.py) with a sentencepiece model trained on the spot, in three shapes,
saved as opus-mt directories are."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from model.bundled.number_sentences import sentences
from model.families.marian.importer import MarianImportError, import_marian
from model.families.marian.reference import without_eos
from modeldir.files import open_model_dir
from modeldir.reference_decoder import greedy_decode_onnx
from modeldir.tokenizer import MarianTokenizer, load_tokenizer, pad_batch

from .marian_checkpoints import MAX_NEW, SHAPES, Checkpoint

transformers = pytest.importorskip("transformers")

TOKENIZER_CHECKPOINTS = ["marian-swish-h4", "marian-separate-h4"]  # one vocabulary; two
INPUTS = sentences(50, seed=2026)


@pytest.fixture(scope="module")
def checkpoints(marian_checkpoints) -> dict[str, Checkpoint]:
    return marian_checkpoints


@pytest.fixture(scope="module")
def our_tokenizers(checkpoints) -> dict:
    """The served tokenizer of each TOKENIZER_CHECKPOINTS model, loaded once (hypothesis runs many examples)."""
    return {
        name: load_tokenizer(open_model_dir(checkpoints[name].dir).config.tokenizer, checkpoints[name].dir, 512)
        for name in TOKENIZER_CHECKPOINTS
    }


# Tokenization


@given(
    st.lists(
        st.sampled_from(INPUTS + ["</s>", "<unk>", "<pad>", ">>fra<<", ">>de<< ", "  ", "日本語", "ß"]), max_size=4
    ),
    st.text(max_size=40),
)
def test_token_ids_match_marian_tokenizer(checkpoints, our_tokenizers, parts, noise):
    for name, ours in our_tokenizers.items():
        checkpoint = checkpoints[name]
        text = " ".join(parts) + noise
        expected = checkpoint.hf_tokenizer(text)["input_ids"]
        (encoded,) = ours.encode([text])
        assert encoded.ids == expected, (name, text)
        # Tokens: the pieces themselves, also those outside the vocabulary (where transformers says <unk>).
        # (transformers' convert_ids_to_tokens reads ids through the target vocabulary: look them up here.)
        source_pieces = {i: t for t, i in checkpoint.hf_tokenizer.get_src_vocab().items()}
        hf_tokens = [source_pieces[i] for i in expected]
        assert [t for t, i in zip(encoded.tokens, expected) if i != ours.unk_id] == [
            t for t, i in zip(hf_tokens, expected) if i != ours.unk_id
        ]
        # A decoder target: target.spm's pieces through the target vocabulary (transformers adds </s>).
        target = checkpoint.hf_tokenizer(text_target=text)["input_ids"]
        assert ours.encode_target(text).ids == without_eos(target), (name, text)


def test_language_code_is_one_token_and_truncation_keeps_eos(checkpoints):
    checkpoint = checkpoints["marian-swish-h4"]
    ours = MarianTokenizer(checkpoint.dir, 6)
    (encoded,) = ours.encode([">>fra<< Deux cent mille trois cent quarante"])
    assert encoded.tokens[0] == ">>fra<<" and encoded.ids[0] == ours.unk_id  # not in this vocabulary
    assert len(encoded.ids) == 6 and encoded.ids[-1] == 0 and encoded.truncated
    full = checkpoint.hf_tokenizer(">>fra<< Deux cent mille trois cent quarante")["input_ids"]
    assert encoded.ids[:5] == full[:5]


@pytest.mark.parametrize("name", TOKENIZER_CHECKPOINTS)
def test_decoding_matches_marian_tokenizer(checkpoints, our_tokenizers, name):
    checkpoint, ours = checkpoints[name], our_tokenizers[name]
    rng = random.Random(0)
    vocab = len(ours.vocab)
    for _ in range(200):
        ids = [rng.randrange(vocab) for _ in range(rng.randint(0, 12))]
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == checkpoint.hf_tokenizer.decode(
                ids, skip_special_tokens=skip
            ), ids


def test_separate_vocabularies_decode_through_the_target_one(checkpoints):
    """The guard for the test above: the two vocabularies give other text for the same ids."""
    model_dir = checkpoints["marian-separate-h4"].dir
    separate, source_only = MarianTokenizer(model_dir, 512, separate_vocabs=True), MarianTokenizer(model_dir, 512)
    ids = list(range(3, 40))
    assert separate.decode(ids) != source_only.decode(ids)


# Import


def test_imported_config(checkpoints):
    files = open_model_dir(checkpoints["marian-relu-h8"].dir)
    c = files.config
    assert (c.positions, c.norm_placement, c.activation) == ("sinusoidal_split", "post", "relu")
    # Untied in transformers v5: encoder, decoder and output each have a table of their own.
    assert c.scale_embeddings and c.output_bias and not c.share_embeddings and not c.tie_output
    tied = open_model_dir(checkpoints["marian-swish-h4"].dir).config
    assert tied.share_embeddings and tied.tie_output and tied.activation == "silu"
    pad = c.vocab_size - 1
    assert (c.pad_id, c.bos_id, c.eos_id) == (pad, pad, 0)
    assert c.suppressed_ids == (pad,) and c.forced_eos and c.renormalize_logits
    assert (c.num_beams, c.tokenizer) == (3, "marian")
    assert {"source.spm", "target.spm", "vocab.json"} <= set(files.manifest["sha256"])
    separate = open_model_dir(checkpoints["marian-separate-h4"].dir)
    assert separate.config.tokenizer == "marian_separate_vocabs" and not separate.config.share_embeddings
    assert {"source.spm", "target.spm", "vocab.json", "target_vocab.json"} <= set(separate.manifest["sha256"])


def test_pickle_only_checkpoint_is_refused(checkpoints, tmp_path):
    source = Path(shutil.copytree(checkpoints["marian-swish-h4"].source, tmp_path / "pickled"))
    (source / "model.safetensors").rename(source / "pytorch_model.bin")
    with pytest.raises(MarianImportError, match=r"only pickled weights \(pytorch_model.bin\), which are never loaded"):
        import_marian(source, tmp_path / "out", "pickled")


def test_unsupported_configs_are_refused(checkpoints, tmp_path):
    source = Path(shutil.copytree(checkpoints["marian-swish-h4"].source, tmp_path / "odd"))
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, "activation_function": "tanh", "decoder_vocab_size": 7}))
    with pytest.raises(MarianImportError, match="activation_function 'tanh'.*separate target vocabulary"):
        import_marian(source, tmp_path / "out", "odd")


def test_separate_vocabularies_must_agree_on_special_tokens(checkpoints, tmp_path):
    source = Path(shutil.copytree(checkpoints["marian-separate-h4"].source, tmp_path / "separate"))
    target_vocab = json.loads((source / "target_vocab.json").read_text())
    unk, other = target_vocab["<unk>"], next(t for t, i in target_vocab.items() if i == 5)
    target_vocab["<unk>"], target_vocab[other] = 5, unk
    (source / "target_vocab.json").write_text(json.dumps(target_vocab))
    with pytest.raises(MarianImportError, match="<unk> have other ids in target_vocab.json"):
        import_marian(source, tmp_path / "out", "separate")
    (source / "target_vocab.json").unlink()
    with pytest.raises(MarianImportError, match="separate_vocabs, but target_vocab.json is missing"):
        import_marian(source, tmp_path / "out", "separate")


def test_tampered_tokenizer_file_is_refused(checkpoints, copy_of):
    from modeldir.files import ModelFilesError

    model_dir = copy_of(checkpoints["marian-swish-h4"].dir)
    (model_dir / "vocab.json").write_text("{}")
    with pytest.raises(ModelFilesError, match="vocab.json: sha256"):
        open_model_dir(model_dir)


# Parity


@pytest.mark.parametrize("name", list(SHAPES))
def test_logits_match_transformers_at_every_step(checkpoints, name):
    checkpoint = checkpoints[name]
    files = open_model_dir(checkpoint.dir)
    encoder = ort.InferenceSession(str(files.encoder), providers=["CPUExecutionProvider"])
    decoder = ort.InferenceSession(str(files.decoder), providers=["CPUExecutionProvider"])
    batch = checkpoint.hf_tokenizer(INPUTS[:16], return_tensors="pt", padding=True)
    ids, mask = batch["input_ids"].numpy(), batch["attention_mask"].numpy()
    c = files.config
    tokens, logits = greedy_decode_onnx(
        encoder, decoder, ids, mask, start_id=c.bos_id, max_steps=MAX_NEW, n_layers=c.n_decoder_layers
    )
    with torch.no_grad():
        expected = checkpoint.hf(**batch, decoder_input_ids=torch.from_numpy(tokens[:, :-1])).logits.numpy()
    assert logits.shape == expected.shape == (16, MAX_NEW, c.vocab_size)
    assert np.abs(logits - expected).max() <= 1e-4


def test_pad_batch_uses_marian_pad(checkpoints):
    ours = MarianTokenizer(checkpoints["marian-swish-h4"].dir, 512)
    ids, mask = pad_batch([e.ids for e in ours.encode(["Zwei", "Trois cent"])], ours.vocab["<pad>"])
    expected = checkpoints["marian-swish-h4"].hf_tokenizer(["Zwei", "Trois cent"], padding=True)
    assert ids.tolist() == expected["input_ids"] and mask.tolist() == expected["attention_mask"]
