"""Pegasus checkpoints (transformers' model_type "pegasus") as our model and served: random checkpoints built
by transformers in two shapes, their logits at every step equal to transformers'; the tokenizer token for
token; one exported and served over gRPC, greedy and its default beam search (8 beams, length penalty 0.6,
as pegasus-xsum's) equal to transformers' generate; what Pegasus never writes refused by name."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.bundled.number_sentences import sentences
from model.export.model_dir import export_model_dir
from model.families.choice import family_of
from model.families.pegasus.importer import PegasusImportError, import_pegasus, pegasus_config, pegasus_model
from model.families.pegasus.random_checkpoint import PegasusShape, random_pegasus_checkpoint
from modeldir.files import open_model_dir
from modeldir.language_tokenizer import load_model_tokenizer
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .slow_tests import slow_fixture

transformers = pytest.importorskip("transformers")

SHAPES = {
    "pegasus-relu-h4-2x2": PegasusShape(d_model=32, heads=4, encoder_layers=2, decoder_layers=2, d_ff=64),
    "pegasus-gelu-h2-1x3": PegasusShape(
        d_model=48,
        heads=2,
        encoder_layers=1,
        decoder_layers=3,
        d_ff=96,
        activation="gelu",
        num_beams=8,
        length_penalty=0.6,
    ),
}
SERVED = "pegasus-gelu-h2-1x3"  # pegasus-xsum's defaults: 8 beams, length penalty 0.6
MAX_NEW = 16
INPUTS = sentences(16, seed=2027)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    out = {}
    for seed, (name, shape) in enumerate(SHAPES.items()):
        source = random_pegasus_checkpoint(tmp_path_factory.mktemp(name), shape, seed=seed)
        out[name] = (transformers.PegasusForConditionalGeneration.from_pretrained(source).eval(), source)
    return out


@pytest.mark.parametrize("name", list(SHAPES))
def test_logits_match_transformers_at_every_step(checkpoints, name):
    hf, source = checkpoints[name]
    assert family_of(source)[1] == "pegasus"
    ours = pegasus_model(source)
    batch = transformers.AutoTokenizer.from_pretrained(source)(INPUTS[:3], return_tensors="pt", padding=True)
    target = torch.cat([torch.zeros(3, 1, dtype=torch.long), torch.randint(2, hf.config.vocab_size, (3, 10))], 1)
    with torch.no_grad():
        expected = hf(**batch, decoder_input_ids=target).logits
        got = ours(batch["input_ids"], batch["attention_mask"], target)
    assert got.shape == expected.shape == (3, 11, hf.config.vocab_size)
    assert (got - expected).abs().max() <= 1e-4


def test_the_config_is_read_as_modeling_pegasus_computes(checkpoints):
    c = pegasus_config(checkpoints["pegasus-relu-h4-2x2"][1])
    assert (c.norm_placement, c.final_norm, c.embedding_norm, c.positions, c.position_offset) == (
        "pre",
        True,
        False,
        "sinusoidal_split",
        0,
    )
    assert (c.pad_id, c.bos_id, c.eos_id, c.forced_bos_id, c.forced_eos) == (0, 0, 1, None, True)
    assert (c.tie_output, c.output_bias, c.scale_embeddings, c.activation) == (True, True, True, "relu")
    c = pegasus_config(checkpoints[SERVED][1])
    assert (c.activation, c.num_beams, c.length_penalty) == ("gelu", 8, 0.6)


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"model_type": "bart"}, "model_type is 'bart', not 'pegasus'"),
        ({"activation_function": "tanh"}, "activation_function 'tanh'"),
        ({"decoder_ffn_dim": 80}, "different encoder and decoder widths"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings false"),
    ],
)
def test_what_pegasus_never_writes_is_refused_with_the_reason(checkpoints, tmp_path, change, reason):
    config = json.loads((checkpoints["pegasus-relu-h4-2x2"][1] / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(PegasusImportError, match=reason):
        pegasus_config(tmp_path)


def test_a_learned_position_table_and_a_missing_tokenizer_are_refused(checkpoints, tmp_path):
    _, source = checkpoints["pegasus-relu-h4-2x2"]
    with pytest.raises(PegasusImportError, match="no tokenizer"):
        import_pegasus(tmp_path, tmp_path / "out", "x")
    from safetensors.torch import load_file, save_file

    tensors = load_file(source / "model.safetensors")
    tensors["model.encoder.embed_positions.weight"] = tensors["model.encoder.embed_positions.weight"] + 0.5
    (tmp_path / "config.json").write_text((source / "config.json").read_text())
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(PegasusImportError, match="model.encoder.embed_positions.weight is not the sinusoid table"):
        pegasus_model(tmp_path)


@slow_fixture(scope="module")
def pegasus_dir(checkpoints, tmp_path_factory):
    model_dir = import_pegasus(checkpoints[SERVED][1], tmp_path_factory.mktemp("served") / SERVED, SERVED)
    export_model_dir(model_dir, progress_stream=io.StringIO())
    return model_dir


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from(list("abcdefghij xyz,.-'\n\t0123456789éü東") + ["<pad>", "</s>", "<mask_1>"])))
def test_the_tokenizer_is_transformers_token_for_token(checkpoints, pegasus_dir, parts):
    text = "".join(parts)
    source = checkpoints[SERVED][1]
    hf = transformers.AutoTokenizer.from_pretrained(source)
    files = open_model_dir(pegasus_dir)
    (ours,) = load_model_tokenizer(files.config, files.tokenizer).encode([text])
    assert ours.ids == hf(text, truncation=True)["input_ids"]


@slow_fixture(scope="module")
def pegasus_server(pegasus_dir):
    server = ServerThread([pegasus_dir], max_new_tokens=MAX_NEW)
    yield server
    server.close()


def hf_outputs(checkpoints, texts: list[str], **kwargs) -> list[list[int]]:
    """transformers' generate: the ids after the start token (pad), up to eos."""
    hf, source = checkpoints[SERVED]
    batch = transformers.AutoTokenizer.from_pretrained(source)(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = hf.generate(**batch, max_new_tokens=MAX_NEW, **kwargs)
    rows = [row.tolist() for row in out]
    assert all(row[0] == 0 for row in rows)  # the start token: pad
    return [row[1 : row.index(1)] if 1 in row else row[1:] for row in rows]


def generate_all(server, texts: list[str], **params) -> list[pb.GenerateResponse]:
    stub = server.stub()
    request = lambda text: pb.GenerateRequest(  # noqa: E731
        model=SERVED, input=text, params=pb.GenerationParams(max_new_tokens=MAX_NEW, **params)
    )
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda text: stub.Generate(request(text), timeout=60), texts))


def test_served_greedy_and_default_beams_equal_generate(checkpoints, pegasus_server):
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoints[SERVED][1])
    greedy = hf_outputs(checkpoints, INPUTS, num_beams=1)
    responses = generate_all(pegasus_server, INPUTS, num_beams=1)
    assert [list(r.token_ids) for r in responses] == greedy
    assert [r.text for r in responses] == tokenizer.batch_decode(greedy, skip_special_tokens=True)
    beams = hf_outputs(checkpoints, INPUTS)  # the checkpoint's generation config: 8 beams, penalty 0.6
    responses = generate_all(pegasus_server, INPUTS)  # the model's defaults, as the checkpoint states them
    assert [list(r.token_ids) for r in responses] == beams
    assert sum(b != g for b, g in zip(beams, greedy)) >= 3  # beam search, not greedy posing as it
