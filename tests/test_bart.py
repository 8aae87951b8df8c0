"""BART checkpoints (transformers' model_type "bart") as our model and served: random checkpoints built by
transformers in several shapes, their logits at every step equal to transformers'; one exported and
served over gRPC, its greedy and beam search output (bos forced first, the checkpoint's beam defaults,
no-repeat n-grams and minimum length) equal to transformers' generate; what BART never writes refused by name."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from model.bundled.number_sentences import sentences
from model.export.model_dir import export_model_dir
from model.families.bart.importer import BartImportError, bart_config, bart_model, import_bart
from model.families.bart.random_checkpoint import BartShape, random_bart_checkpoint
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .slow_tests import slow_fixture

transformers = pytest.importorskip("transformers")

SHAPES = {
    "bart-gelu-h4-2x2": BartShape(d_model=32, heads=4, encoder_layers=2, decoder_layers=2, d_ff=64),
    "bart-relu-h2-1x3": BartShape(d_model=32, heads=2, encoder_layers=1, decoder_layers=3, d_ff=48, activation="relu"),
    "bart-scaled-h4-3x1": BartShape(
        d_model=64,
        heads=4,
        encoder_layers=3,
        decoder_layers=1,
        d_ff=96,
        scale_embedding=True,
        num_beams=4,
        length_penalty=2.0,
        early_stopping=True,
        no_repeat_ngram_size=2,
        min_length=12,
    ),
}
# a summarizer's defaults: 4 beams, length penalty 2.0, early stopping, no 2-gram twice, a minimum length
SERVED = "bart-scaled-h4-3x1"
MAX_NEW = 16  # new tokens a request asks for (transformers counts the forced bos as one more)
INPUTS = sentences(24, seed=2026)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    out = {}
    for seed, (name, shape) in enumerate(SHAPES.items()):
        source = random_bart_checkpoint(tmp_path_factory.mktemp(name), shape, seed=seed)
        out[name] = (transformers.BartForConditionalGeneration.from_pretrained(source).eval(), source)
    return out


@pytest.mark.parametrize("name", list(SHAPES))
def test_logits_match_transformers_at_every_step(checkpoints, name):
    hf, source = checkpoints[name]
    ours = bart_model(source)
    tokenizer = transformers.BartTokenizer.from_pretrained(source)
    batch = tokenizer(INPUTS[:3], return_tensors="pt", padding=True)
    target = torch.cat(
        [torch.full((3, 1), 2), torch.full((3, 1), 0), torch.randint(3, hf.config.vocab_size, (3, 10))], 1
    )
    with torch.no_grad():
        expected = hf(**batch, decoder_input_ids=target).logits
        got = ours(batch["input_ids"], batch["attention_mask"], target)
    assert got.shape == expected.shape == (3, 12, hf.config.vocab_size)
    assert (got - expected).abs().max() <= 1e-4


def test_the_config_is_read_as_modeling_bart_computes(checkpoints):
    c = bart_config(checkpoints["bart-gelu-h4-2x2"][1])
    assert (c.norm_placement, c.final_norm, c.embedding_norm, c.positions, c.position_offset) == (
        "post",
        False,
        True,
        "learned",
        2,
    )
    assert (c.pad_id, c.bos_id, c.eos_id, c.forced_bos_id, c.forced_eos) == (1, 2, 2, 0, True)
    assert (c.tie_output, c.output_bias, c.scale_embeddings, c.activation) == (True, True, False, "gelu")
    c = bart_config(checkpoints[SERVED][1])
    assert (c.scale_embeddings, c.num_beams, c.length_penalty, c.early_stopping) == (True, 4, 2.0, "true")


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"model_type": "mbart"}, "model_type is 'mbart', not 'bart'"),
        ({"forced_eos_token_id": 3}, "forced_eos_token_id 3 that is not eos 2"),
        ({"activation_function": "tanh"}, "activation_function 'tanh'"),
        ({"decoder_ffn_dim": 80}, "different encoder and decoder widths"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings false"),
    ],
)
def test_what_bart_never_writes_is_refused_with_the_reason(checkpoints, tmp_path, change, reason):
    config = json.loads((checkpoints["bart-gelu-h4-2x2"][1] / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(BartImportError, match=reason):
        bart_config(tmp_path)


def test_a_tensor_bart_has_not_and_a_missing_tokenizer_are_refused(checkpoints, tmp_path):
    _, source = checkpoints["bart-gelu-h4-2x2"]
    with pytest.raises(BartImportError, match="no tokenizer"):
        import_bart(tmp_path, tmp_path / "out", "x")
    from safetensors.torch import load_file, save_file

    tensors = load_file(source / "model.safetensors")
    tensors["model.encoder.layer_norm.weight"] = torch.ones(32)  # mBART's closing LayerNorm
    (tmp_path / "config.json").write_text((source / "config.json").read_text())
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(BartImportError, match="unexpected tensor in the checkpoint: model.encoder.layer_norm.weight"):
        bart_model(tmp_path)


@slow_fixture(scope="module")
def bart_server(checkpoints, tmp_path_factory):
    _, source = checkpoints[SERVED]
    model_dir = import_bart(source, tmp_path_factory.mktemp("served") / SERVED, SERVED)
    export_model_dir(model_dir, progress_stream=io.StringIO())
    server = ServerThread([model_dir], max_new_tokens=MAX_NEW + 1)  # a position for the forced bos
    yield server
    server.close()


def hf_outputs(checkpoints, texts: list[str], **kwargs) -> list[list[int]]:
    """transformers' generate: the ids after the start token and the forced bos, without eos or padding."""
    hf, source = checkpoints[SERVED]
    batch = transformers.BartTokenizer.from_pretrained(source)(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = hf.generate(**batch, max_new_tokens=MAX_NEW + 1, **kwargs)
    rows = [[t for t in row.tolist() if t != 1] for row in out]
    assert all(row[:2] == [2, 0] for row in rows)  # the start token, then bos forced
    return [row[2:-1] if row[-1] == 2 else row[2:] for row in rows]


def generate_all(server, texts: list[str], **params) -> list[pb.GenerateResponse]:
    stub = server.stub()
    request = lambda text: pb.GenerateRequest(  # noqa: E731
        model=SERVED, input=text, params=pb.GenerationParams(max_new_tokens=MAX_NEW, **params)
    )
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda text: stub.Generate(request(text), timeout=60), texts))


def test_served_greedy_and_default_beams_equal_generate(checkpoints, bart_server):
    tokenizer = transformers.BartTokenizer.from_pretrained(checkpoints[SERVED][1])
    greedy = hf_outputs(checkpoints, INPUTS, num_beams=1)
    responses = generate_all(bart_server, INPUTS, num_beams=1)
    assert [list(r.token_ids) for r in responses] == greedy
    assert [r.text for r in responses] == tokenizer.batch_decode(greedy, skip_special_tokens=True)
    beams = hf_outputs(checkpoints, INPUTS)  # the checkpoint's generation config: 4 beams, penalty 2.0
    responses = generate_all(bart_server, INPUTS)  # the model's defaults, as the checkpoint states them
    assert [list(r.token_ids) for r in responses] == beams
    assert sum(b != g for b, g in zip(beams, greedy)) >= 3  # beam search, not greedy posing as it
    # The checkpoint's no_repeat_ngram_size and min_length change the output: they are applied, not ignored.
    for found, plain in (
        (greedy, hf_outputs(checkpoints, INPUTS, num_beams=1, no_repeat_ngram_size=0, min_length=0)),
        (beams, hf_outputs(checkpoints, INPUTS, no_repeat_ngram_size=0, min_length=0)),
    ):
        assert sum(f != p for f, p in zip(found, plain)) >= 3
    assert {r.finish_reason for r in responses} <= {pb.FINISH_REASON_EOS, pb.FINISH_REASON_LENGTH}


def test_max_new_tokens_counts_the_forced_bos_apart(bart_server):
    (response,) = generate_all(bart_server, INPUTS[:1], num_beams=1, ignore_eos=True)
    assert len(response.token_ids) == MAX_NEW
