"""MarianMT checkpoints: import, tokenization, parity with transformers, greedy and beam search served over gRPC.

No checkpoint can be downloaded here: transformers builds random MarianMTModels (modelbuild/random_marian.py)
with a sentencepiece model trained on the spot, in three shapes, saved as opus-mt directories are."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import onnxruntime as ort
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from modelbuild.import_marian import MarianImportError, import_marian
from modelbuild.number_sentences import sentences
from modeldir.files import open_model_dir
from modeldir.reference_decoder import greedy_decode_onnx
from modeldir.tokenizer import MarianTokenizer, load_tokenizer, pad_batch
from service.engine.generation_cache import reorder_beams
from service.engine.sequence import BeamRow
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .marian_checkpoints import MAX_NEW, SHAPES, Checkpoint
from .waits import wait_until

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


@pytest.fixture(scope="module")
def marian_server(checkpoints):
    server = ServerThread([c.dir for c in checkpoints.values()], max_new_tokens=MAX_NEW)
    yield server
    server.close()


def without_eos(ids: list[int], eos: int = 0) -> list[int]:
    return ids[:-1] if ids and ids[-1] == eos else ids


# Tokenization


@given(st.lists(st.sampled_from(INPUTS + ["</s>", "<unk>", "<pad>", ">>fra<<", ">>de<< ", "  ", "日本語", "ß"]), max_size=4),
       st.text(max_size=40))  # fmt: skip
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
    tokens, logits = greedy_decode_onnx(encoder, decoder, ids, mask, c.bos_id, MAX_NEW, c.n_decoder_layers)
    with torch.no_grad():
        expected = checkpoint.hf(**batch, decoder_input_ids=torch.from_numpy(tokens[:, :-1])).logits.numpy()
    assert logits.shape == expected.shape == (16, MAX_NEW, c.vocab_size)
    assert np.abs(logits - expected).max() <= 1e-4


# Served over gRPC


def generate(stub, model: str, text: str, **params) -> pb.GenerateResponse:
    request = pb.GenerateRequest(model=model, input=text, params=pb.GenerationParams(max_new_tokens=MAX_NEW, **params))
    return stub.Generate(request, timeout=60)


def concurrently(fn, items):
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(fn, items))


@pytest.mark.parametrize("name", list(SHAPES))
def test_greedy_matches_generate_over_grpc(checkpoints, marian_server, name):
    checkpoint = checkpoints[name]
    expected = checkpoint.hf_generate(INPUTS, num_beams=1)
    stub = marian_server.stub()
    responses = concurrently(lambda text: generate(stub, name, text, num_beams=1), INPUTS)
    reasons = set()
    for text, response, want in zip(INPUTS, responses, expected):
        assert list(response.token_ids) == without_eos(want), text
        assert response.text == checkpoint.hf_tokenizer.decode(want, skip_special_tokens=True)
        reasons.add(response.finish_reason)
        # transformers forces eos at the last position the request allows: that is the length limit here.
        limit = len(want) == MAX_NEW
        assert response.finish_reason == (pb.FINISH_REASON_LENGTH if limit else pb.FINISH_REASON_EOS)
    assert len(reasons) == 2 or name != "marian-swish-h4"  # some end by eos, some by length


# (num_beams, length_penalty, early_stopping, num_return_sequences) against transformers' generate,
# inputs spread over them.
BEAM_SETTINGS = [
    (4, 1.0, False, pb.EARLY_STOPPING_HEURISTIC, 4),
    (4, 0.6, True, pb.EARLY_STOPPING_ON, 2),
    (3, 2.0, "never", pb.EARLY_STOPPING_NEVER, 1),
    (2, -0.5, False, pb.EARLY_STOPPING_HEURISTIC, 2),
    (5, 1.0, "never", pb.EARLY_STOPPING_NEVER, 3),
]
SCORE_TOLERANCE = 1e-4  # measured differences are about 2e-7: the same float32 arithmetic


@pytest.mark.parametrize("name", list(SHAPES))
def test_beam_search_matches_transformers(checkpoints, marian_server, name):
    """The best hypothesis, and the n best with their scores, as transformers' beam search gives them."""
    checkpoint = checkpoints[name]
    stub = marian_server.stub()
    differs_from_greedy = 0
    for i, (beams, penalty, early, early_pb, n) in enumerate(BEAM_SETTINGS):
        texts = INPUTS[i :: len(BEAM_SETTINGS)]
        expected = checkpoint.hf_n_best(texts, n, num_beams=beams, length_penalty=penalty, early_stopping=early)
        greedy = checkpoint.hf_generate(texts, num_beams=1)
        responses = concurrently(
            lambda text: generate(
                stub, name, text, num_beams=beams, length_penalty=penalty, early_stopping=early_pb,
                num_return_sequences=n,
            ),
            texts,
        )  # fmt: skip
        for text, response, want, plain in zip(texts, responses, expected, greedy):
            context = (text, beams, penalty, early, n)
            assert list(response.token_ids) == without_eos(want[0][0]), context
            assert response.text == checkpoint.hf_tokenizer.decode(want[0][0], skip_special_tokens=True)
            assert len(response.hypotheses) == n, context
            first = response.hypotheses[0]
            assert (first.text, first.token_ids, first.finish_reason) == (
                response.text, response.token_ids, response.finish_reason
            )  # fmt: skip
            for hypothesis, (ids, score) in zip(response.hypotheses, want):
                assert list(hypothesis.token_ids) == without_eos(ids), context
                assert hypothesis.text == checkpoint.hf_tokenizer.decode(ids, skip_special_tokens=True)
                assert abs(hypothesis.score - score) <= SCORE_TOLERANCE, (context, hypothesis.score, score)
                limit = len(ids) == MAX_NEW  # transformers forces eos there: the length limit
                assert hypothesis.finish_reason == (pb.FINISH_REASON_LENGTH if limit else pb.FINISH_REASON_EOS)
            scores = [h.score for h in response.hypotheses]
            assert scores == sorted(scores, reverse=True), context
            differs_from_greedy += want[0][0] != plain
    assert differs_from_greedy >= 5  # the test would notice greedy posing as beam search


def test_cli_prints_the_n_best_with_scores(marian_server):
    text = INPUTS[3]
    expected = generate(marian_server.stub(), "marian-swish-h4", text, num_beams=4, num_return_sequences=3).hypotheses
    result = subprocess.run(
        [sys.executable, "-m", "cli", "generate", text, "--target", marian_server.target, "--model", "marian-swish-h4",
         "--max-new-tokens", str(MAX_NEW), "--num-beams", "4", "--num-return-sequences", "3"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{h.score:.4f}\t{h.text}" for h in expected]
    assert "4 beams]" in result.stderr


def test_default_num_beams_is_the_models(checkpoints, marian_server):
    checkpoint = checkpoints["marian-relu-h8"]  # its generation config says 3 beams
    text = INPUTS[0]
    (expected,) = checkpoint.hf_generate([text])  # transformers uses the checkpoint's defaults too
    assert list(generate(marian_server.stub(), "marian-relu-h8", text).token_ids) == without_eos(expected)


def test_beam_search_errors(marian_server):
    stub = marian_server.stub()
    cases = [
        ({"num_beams": 9}, "params.num_beams: 9; at most 8"),
        ({"num_beams": 2, "temperature": 0.7}, "params.temperature: not with beam search"),
        ({"num_beams": 2, "stop": ["x"]}, "params.stop: not with beam search"),
        ({"num_beams": 1, "length_penalty": 2.0}, "params.length_penalty: only with beam search"),
        ({"num_beams": 2, "length_penalty": 1e30}, "params.length_penalty: 1e+30; must be within +-10"),
        ({"num_beams": 2, "early_stopping": 7}, "params.early_stopping: 7 is not an EarlyStopping value"),
        ({"num_beams": 2, "length_penalty": float("nan")}, "params.length_penalty: nan; must be within +-10"),
        ({"num_beams": 2, "num_return_sequences": 3}, "params.num_return_sequences: 3; at most num_beams (2)"),
        ({"num_beams": 1, "num_return_sequences": 2}, "params.num_return_sequences: only with beam search"),
    ]
    for params, message in cases:
        with pytest.raises(grpc.RpcError) as error:
            generate(stub, "marian-swish-h4", "Zwei", **params)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in error.value.details()
    request = pb.GenerateRequest(model="marian-swish-h4", input="Zwei", params=pb.GenerationParams(num_beams=2))
    with pytest.raises(grpc.RpcError) as error:
        list(stub.GenerateStream(request, timeout=10))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "beam search does not stream" in error.value.details()
    # Unset num_beams on a model whose default is beam search: streaming and sampling fall back to one beam.
    request = pb.GenerateRequest(model="marian-relu-h8", input="Zwei", params=pb.GenerationParams(max_new_tokens=4))
    assert list(stub.GenerateStream(request, timeout=10))[-1].finish_reason != pb.FINISH_REASON_UNSPECIFIED


def test_cancelled_beam_search_frees_all_its_rows(marian_server):
    scheduler = marian_server.server.core.registry.models["marian-swish-h4"].scheduler
    stub = marian_server.stub()
    release = marian_server.hold_model_thread()
    future = stub.Generate.future(
        pb.GenerateRequest(model="marian-swish-h4", input=INPUTS[0], params=pb.GenerationParams(num_beams=4)),
        timeout=30,
    )
    threading.Timer(0.3, future.cancel).start()
    threading.Timer(0.6, release.set).start()
    with pytest.raises(grpc.FutureCancelledError):
        future.result()
    wait_until(lambda: marian_server.call_and_wait(lambda: (scheduler.running, scheduler.cache.used)) == (0, 0),
               what="all the beams' rows are freed")  # fmt: skip
    assert marian_server.call_and_wait(lambda: (scheduler.running, scheduler.cache.used, len(scheduler.waiting))) == (
        0,
        0,
        0,
    )


# The cache rows of a beam search


def test_reorder_beams_copies_only_extra_children():
    rows = [BeamRow(None, beam, row) for beam, row in enumerate([5, 2, 7, 0])]
    ordered, copies = reorder_beams(rows, [1, 1, 3, 1])  # beams 0 and 2 died; 1 has three children
    assert [slot.row for slot in ordered[:1]] == [2] and ordered[2].row == 0  # first children keep their rows
    assert sorted(copies) == [(2, 5), (2, 7)]  # two copies, from beam 1's row into the dead beams' rows
    assert {ordered[1].row, ordered[3].row} == {5, 7}
    assert reorder_beams(rows, [0, 1, 2, 3])[1] == []  # every beam its own parent: nothing moves


def test_pad_batch_uses_marian_pad(checkpoints):
    ours = MarianTokenizer(checkpoints["marian-swish-h4"].dir, 512)
    ids, mask = pad_batch([e.ids for e in ours.encode(["Zwei", "Trois cent"])], ours.vocab["<pad>"])
    expected = checkpoints["marian-swish-h4"].hf_tokenizer(["Zwei", "Trois cent"], padding=True)
    assert ids.tolist() == expected["input_ids"] and mask.tolist() == expected["attention_mask"]
