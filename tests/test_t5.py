"""T5-family checkpoints (transformers' model_type "t5", "mt5", "umt5") as our model and served: random
checkpoints built by transformers in several shapes (gated and ReLU feed-forward, tied and own LM head,
heads wider in total than d_model, UMT5's table per layer, few buckets so that far ones are reached),
their logits at every step equal to transformers'; the exported graphs equal to ours; one served over gRPC,
its greedy and beam-search output equal to transformers' generate; its tokenizer token for token as
transformers'; what T5 never writes refused by name."""

from __future__ import annotations

import io
import json
import re
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from model.architecture.relative_positions import relative_buckets
from model.bundled.number_sentences import sentences
from model.export.model_dir import export_model_dir
from model.families.t5.importer import T5ImportError, import_t5, t5_config, t5_model
from model.families.t5.random_checkpoint import T5Shape, random_t5_checkpoint
from modeldir.tokenizer import TextTokenizer
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .slow_tests import slow_fixture

transformers = pytest.importorskip("transformers")

SHAPES = {
    "t5-v1.1-gated-h4-2x2": T5Shape(),
    "t5-relu-tied-h4-1x3": T5Shape(
        feed_forward_proj="relu", tie_word_embeddings=True, encoder_layers=1, decoder_layers=3
    ),
    "umt5-h4-dkv16-2x2": T5Shape(model_type="umt5", d_kv=16),  # heads x d_kv = 64 over a d_model of 32
    "mt5-buckets8-3x1": T5Shape(model_type="mt5", buckets=8, max_distance=12, encoder_layers=3, decoder_layers=1),
}
# Far buckets in encoder and decoder (a max distance of 12 under 24 new tokens), heads wider than d_model,
# 4 beams by default.
SERVED = "t5-served"
SERVED_SHAPE = T5Shape(d_kv=16, buckets=8, max_distance=12, num_beams=4)
MAX_NEW = 24
INPUTS = sentences(24, seed=2026)
MODEL_CLASSES = {"t5": "T5ForConditionalGeneration", "mt5": "MT5ForConditionalGeneration"}
MODEL_CLASSES["umt5"] = "UMT5ForConditionalGeneration"


def hf_model(source, shape: T5Shape):
    return getattr(transformers, MODEL_CLASSES[shape.model_type]).from_pretrained(source).eval()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    out = {}
    for seed, (name, shape) in enumerate({**SHAPES, SERVED: SERVED_SHAPE}.items()):
        source = random_t5_checkpoint(tmp_path_factory.mktemp(name), shape, seed=seed)
        out[name] = (hf_model(source, shape), source)
    return out


@pytest.mark.parametrize("name", list(SHAPES))
def test_logits_match_transformers_at_every_step(checkpoints, name):
    hf, source = checkpoints[name]
    ours = t5_model(source)
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    batch = tokenizer(INPUTS[:3], return_tensors="pt", padding=True)
    target = torch.cat([torch.zeros(3, 1, dtype=torch.long), torch.randint(3, hf.config.vocab_size, (3, 30))], 1)
    with torch.no_grad():
        expected = hf(**batch, decoder_input_ids=target).logits
        got = ours(batch["input_ids"], batch["attention_mask"], target)
    assert got.shape == expected.shape == (3, 31, hf.config.vocab_size)
    assert (got - expected).abs().max() <= 1e-4
    assert expected.std() > 1.0  # logits far from uniform: the weights are not transformers' near-zero init


def test_the_config_is_read_as_modeling_t5_computes(checkpoints):
    c = t5_config(checkpoints["t5-v1.1-gated-h4-2x2"][1])
    assert (c.norm_placement, c.norm, c.final_norm, c.positions, c.linear_bias, c.scale_attention) == (
        "pre",
        "rms",
        True,
        "relative",
        False,
        False,
    )
    assert (c.feed_forward, c.activation, c.tie_output, c.rescale_output) == ("gated", "gelu_tanh", False, False)
    assert (c.pad_id, c.bos_id, c.eos_id, c.relative_buckets, c.relative_max_distance) == (0, 0, 1, 32, 128)
    c = t5_config(checkpoints["t5-relu-tied-h4-1x3"][1])
    assert (c.feed_forward, c.activation, c.tie_output, c.rescale_output) == ("plain", "relu", True, True)
    c = t5_config(checkpoints["umt5-h4-dkv16-2x2"][1])
    assert (c.d_model, c.n_heads, c.d_kv, c.d_head, c.relative_bias_per_layer) == (32, 4, 16, 16, True)


def test_buckets_equal_transformers_over_every_distance():
    from transformers.models.t5.modeling_t5 import T5Attention

    distance = torch.arange(-300, 301)
    for bidirectional in (True, False):
        for buckets, max_distance in ((32, 128), (8, 12), (16, 40)):
            expected = T5Attention._relative_position_bucket(distance, bidirectional, buckets, max_distance)
            assert torch.equal(relative_buckets(distance, bidirectional, buckets, max_distance), expected)


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"model_type": "bart"}, "model_type is 'bart', not one of t5, mt5, umt5"),
        ({"feed_forward_proj": "gated-tanh"}, "feed_forward_proj 'gated-tanh'"),
        ({"eos_token_id": [1, 5]}, r"several eos tokens \[1, 5\]"),
        ({"is_encoder_decoder": False}, "an encoder alone"),
    ],
)
def test_what_t5_never_writes_is_refused_with_the_reason(checkpoints, tmp_path, change, reason):
    source = checkpoints["t5-v1.1-gated-h4-2x2"][1]
    config = json.loads((source / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    (tmp_path / "model.safetensors").write_bytes((source / "model.safetensors").read_bytes())
    with pytest.raises(T5ImportError, match=reason):
        t5_config(tmp_path)


def test_a_tensor_t5_has_not_and_a_missing_tokenizer_are_refused(checkpoints, tmp_path):
    _, source = checkpoints["t5-v1.1-gated-h4-2x2"]
    with pytest.raises(T5ImportError, match="no tokenizer"):
        import_t5(tmp_path, tmp_path / "out", "x")
    from safetensors.torch import load_file, save_file

    tensors = load_file(source / "model.safetensors")
    table = "encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"
    tensors[table] = torch.ones(32, 4)  # UMT5's layout in a T5 checkpoint
    (tmp_path / "config.json").write_text((source / "config.json").read_text())
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(T5ImportError, match=f"{table}: a relative position table beyond the first layer"):
        t5_model(tmp_path)


@settings(max_examples=60, deadline=None)
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60))
def test_the_tokenizer_gives_transformers_ids(checkpoints, text):
    source = checkpoints["t5-v1.1-gated-h4-2x2"][1]
    ours = TextTokenizer(source / "tokenizer.json", max_tokens=512)
    theirs = transformers.AutoTokenizer.from_pretrained(source)
    assert ours.encode([text])[0].ids == theirs(text)["input_ids"]


@slow_fixture(scope="module")
def t5_server(checkpoints, tmp_path_factory):
    _, source = checkpoints[SERVED]
    model_dir = import_t5(source, tmp_path_factory.mktemp("served") / SERVED, SERVED)
    export_model_dir(model_dir, progress_stream=io.StringIO())
    server = ServerThread([model_dir], max_new_tokens=MAX_NEW)
    yield server, model_dir
    server.close()


def hf_outputs(checkpoints, texts: list[str], **kwargs) -> list[list[int]]:
    """transformers' generate: the ids after the start token, without eos or padding."""
    hf, source = checkpoints[SERVED]
    batch = transformers.AutoTokenizer.from_pretrained(source)(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = hf.generate(**batch, max_new_tokens=MAX_NEW, **kwargs)
    rows = [row.tolist()[1:] for row in out]
    rows = [row[: row.index(1)] if 1 in row else row for row in rows]  # up to eos; pad (0) only after it
    return rows


def generate_all(server, texts: list[str], **params) -> list[pb.GenerateResponse]:
    stub = server.stub()
    request = lambda text: pb.GenerateRequest(  # noqa: E731
        model=SERVED, input=text, params=pb.GenerationParams(max_new_tokens=MAX_NEW, **params)
    )
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda text: stub.Generate(request(text), timeout=60), texts))


def test_the_exported_graphs_equal_ours(t5_server):
    _, model_dir = t5_server
    parity = json.loads((model_dir / "manifest.json").read_text())["parity"]
    assert parity["encoder_max_abs_diff"] < 1e-4 and parity["decoder_logits_max_abs_diff"] < 1e-4


def test_served_greedy_and_default_beams_equal_generate(checkpoints, t5_server):
    server, _ = t5_server
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoints[SERVED][1])
    greedy = hf_outputs(checkpoints, INPUTS, num_beams=1)
    responses = generate_all(server, INPUTS, num_beams=1)
    assert [list(r.token_ids) for r in responses] == greedy
    assert [r.text for r in responses] == tokenizer.batch_decode(greedy, skip_special_tokens=True)
    assert max(len(g) for g in greedy) > 12  # past the max distance: the far buckets are decoded through
    beams = hf_outputs(checkpoints, INPUTS)  # the checkpoint's generation config: 4 beams
    responses = generate_all(server, INPUTS)  # the model's defaults, as the checkpoint states them
    assert [list(r.token_ids) for r in responses] == beams
    assert sum(b != g for b, g in zip(beams, greedy)) >= 3  # beam search, not greedy posing as it


FLAN_SCALED = T5Shape(wo_scale=3e4)  # a residual stream of 6e5 between the norms, as large as Flan-T5's


@slow_fixture(scope="module")
def flan_scaled(tmp_path_factory):
    """A checkpoint whose residual stream outgrows float16, exported in float32 and float16."""
    source = random_t5_checkpoint(tmp_path_factory.mktemp("flan-scaled-hf"), FLAN_SCALED, seed=11)
    model_dir = import_t5(source, tmp_path_factory.mktemp("flan-scaled") / "t5", "t5")
    export_model_dir(model_dir, progress_stream=io.StringIO(), reduced=("fp16",))
    return source, model_dir


def test_the_residual_stream_outgrows_float16_where_transformers_keeps_it_float32(flan_scaled):
    source, _ = flan_scaled
    hf = transformers.T5ForConditionalGeneration.from_pretrained(source).eval()
    batch = transformers.AutoTokenizer.from_pretrained(source)(INPUTS[:4], return_tensors="pt", padding=True)
    start = torch.zeros(4, 1, dtype=torch.long)
    with torch.no_grad():
        out = hf(**batch, decoder_input_ids=start, output_hidden_states=True)
        assert max(h.abs().max() for h in out.encoder_hidden_states) > 65504  # past float16's largest
        ours = t5_model(source).half()  # every tensor float16: the sums overflow
        assert not torch.isfinite(ours(batch["input_ids"], batch["attention_mask"], start)).all()
        kept = transformers.T5ForConditionalGeneration.from_pretrained(source, dtype=torch.float16).eval()
        assert kept.encoder.block[0].layer[1].DenseReluDense.wo.weight.dtype == torch.float32  # transformers' way
        assert torch.isfinite(kept(**batch, decoder_input_ids=start).logits).all()


def test_the_float16_graphs_keep_the_residual_stream_float32(flan_scaled):
    import onnx

    from model.export.half_precision import float32_nodes
    from modeldir.config import load_config

    _, model_dir = flan_scaled
    _, config = load_config(model_dir)
    for role, adds in (("encoder", 2), ("decoder", 3)):
        model = onnx.shape_inference.infer_shapes(onnx.load(str(model_dir / "onnx" / "fp16" / f"{role}.onnx")))
        types = {v.name: v.type.tensor_type.elem_type for v in (*model.graph.value_info, *model.graph.output)}
        kept = set(float32_nodes(model, config))
        residual = [
            n for n in model.graph.node if n.name in kept and re.fullmatch(r".*/layers\.\d+/Add(_\d+)?", n.name)
        ]
        residual = [n for n in residual if types.get(n.output[0]) != onnx.TensorProto.INT32]  # GQA's lengths
        buckets = [n for n in model.graph.node if n.op_type == "Log"]  # the far buckets' log, float32 as in T5
        assert buckets and all(n.name in kept and types[n.output[0]] == onnx.TensorProto.FLOAT for n in buckets)
        assert len(residual) == adds * 2  # every layer's residual sums (2 layers a stack)
        projections = [n for n in model.graph.node if n.name.endswith("feed_forward/w_2/MatMul")]
        for node in residual + projections:
            assert types[node.output[0]] == onnx.TensorProto.FLOAT, node.name
        producers = {out: n for n in model.graph.node for out in n.output}
        for node in residual:  # a sum reads the previous one's float32 value, not a float16 round trip of it
            for name in node.input:
                before = producers.get(name)
                assert before is None or before.op_type != "Cast" or types.get(name) == onnx.TensorProto.FLOAT


def test_float16_graphs_serve_the_scaled_checkpoint_as_transformers_in_float32(flan_scaled):
    source, model_dir = flan_scaled
    half = json.loads((model_dir / "manifest.json").read_text())["fp16"]["parity"]
    # 64-token inputs: distances in the far buckets, whose bounds float16 arithmetic would move (3.4 then)
    assert half["encoder_max_abs_diff"] < 0.2 and half["decoder_logits_max_abs_diff"] < 0.1, half
    batch = transformers.AutoTokenizer.from_pretrained(source)(INPUTS, return_tensors="pt", padding=True)

    def generated(dtype) -> list[list[int]]:
        hf = transformers.T5ForConditionalGeneration.from_pretrained(source, dtype=dtype).eval()
        with torch.no_grad():
            rows = [row.tolist()[1:] for row in hf.generate(**batch, max_new_tokens=MAX_NEW, num_beams=1)]
        return [row[: row.index(1)] if 1 in row else row for row in rows]

    expected = generated(torch.float32)
    # transformers' own float16 (its wo float32): the bar, on random weights whose attention is sharp
    theirs = sum(h == e for h, e in zip(generated(torch.float16), expected))
    server = ServerThread([model_dir], max_new_tokens=MAX_NEW, precision="fp16")
    try:
        stub = server.stub()
        params = pb.GenerationParams(max_new_tokens=MAX_NEW, num_beams=1)
        got = [list(stub.Generate(pb.GenerateRequest(input=t, params=params), timeout=60).token_ids) for t in INPUTS]
    finally:
        server.close()
    ours = sum(g == e for g, e in zip(got, expected))
    assert ours >= theirs and ours >= 0.7 * len(INPUTS), (ours, theirs)


MADLAD = T5Shape(languages=("de", "fr", "es", "zh_Latn"), d_kv=16)  # MADLAD-400's target tokens, <2de>


@slow_fixture(scope="module")
def madlad(tmp_path_factory):
    """A MADLAD-400-shaped checkpoint (target tokens in its vocabulary) served with transformers' model."""
    source = random_t5_checkpoint(tmp_path_factory.mktemp("madlad-hf"), MADLAD, seed=21)
    model_dir = import_t5(source, tmp_path_factory.mktemp("madlad") / "madlad", "madlad")
    export_model_dir(model_dir, progress_stream=io.StringIO())
    server = ServerThread([model_dir], max_new_tokens=MAX_NEW)
    yield transformers.T5ForConditionalGeneration.from_pretrained(source).eval(), source, server
    server.close()


def test_madlad_targets_are_read_from_its_vocabulary(madlad):
    _, source, _ = madlad
    c = t5_config(source)
    assert (c.languages, c.language_token, c.target_language) == (MADLAD.languages, "<2{}>", "source_prefix")


def test_madlad_takes_a_target_per_request_as_generate_with_its_token_first(madlad):
    hf, source, server = madlad
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    # mixed targets at once, asked by the checkpoint's codes and by others that name them
    asked = {"de": "de", "fr": "fr-FR", "es": "spa", "zh_Latn": "zh-Latn"}
    calls = [(text, list(asked)[i % 4]) for i, text in enumerate(INPUTS)]
    expected = {}
    for text, target in calls:
        batch = tokenizer([f"<2{target}> {text}"], return_tensors="pt")
        with torch.no_grad():
            (row,) = hf.generate(**batch, max_new_tokens=MAX_NEW, num_beams=1)
        ids = row[1:].tolist()  # after the start token, up to eos (pad, 0, may be generated before it)
        expected[text, target] = ids[: ids.index(1)] if 1 in ids else ids
    stub = server.stub()

    def generate(call):
        text, target = call
        params = pb.GenerationParams(max_new_tokens=MAX_NEW, num_beams=1)
        request = pb.GenerateRequest(model="madlad", input=text, target_language=asked[target], params=params)
        return stub.Generate(request, timeout=60)

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(generate, calls))
    for (text, target), response in zip(calls, responses):
        assert list(response.token_ids) == expected[text, target], (text, target)
    assert len({tuple(ids) for ids in expected.values()}) > 4  # the target changes the answer
    with pytest.raises(grpc.RpcError, match="target_language: required by model 'madlad'"):
        stub.Generate(pb.GenerateRequest(model="madlad", input=INPUTS[0]), timeout=60)


def test_madlad_serves_deepl_and_libretranslate(madlad):
    import deepl

    _, _, server = madlad
    stub = server.stub()
    params = pb.GenerationParams(max_new_tokens=MAX_NEW, num_beams=1)
    want = stub.Generate(pb.GenerateRequest(model="madlad", input=INPUTS[3], target_language="es", params=params))
    base = f"http://localhost:{server.server.http.port}"
    translator = deepl.Translator("any-key", server_url=base)
    assert translator.translate_text(INPUTS[3], target_lang="ES").text == want.text
    libre = httpx.post(f"{base}/translate", json={"q": INPUTS[3], "source": "auto", "target": "es"}, timeout=60)
    assert libre.json()["translatedText"] == want.text
