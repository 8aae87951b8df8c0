"""The Attention RPC: a real server on port 0 with the bundled models and attention maps on, real channels."""

from __future__ import annotations

import math

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.bundled.numbers import pair
from service.grpc_api.client import AttentionMapsReply, Client
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .grpc_outcomes import status_of
from .waits import wait_until

TRUCK = "The delivery truck, which was late, blocked the narrow street."
TRUCK_TOKENS = [
    "[CLS]",
    "the",
    "delivery",
    "truck",
    ",",
    "which",
    "was",
    "late",
    ",",
    "blocked",
    "the",
    "narrow",
    "street",
    ".",
    "[SEP]",
]
LIMITS = dict(attention_max_input_tokens=64, attention_max_response_bytes=1_000_000)


@pytest.fixture(scope="module")
def attention_server(minilm_dir, numbers_dir):
    server = ServerThread([minilm_dir, numbers_dir], attention_maps=True, **LIMITS)
    yield server
    server.close()


def attention(server, text: str, **fields) -> AttentionMapsReply:
    with Client(server.target) as client:
        return client.attention(text, **fields)


def assert_distributions(weights: np.ndarray, causal: bool = False) -> None:
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert weights.dtype == np.float32 and (weights >= 0).all()
    if causal:
        future = np.triu(np.ones(weights.shape[-2:], dtype=bool), k=1)
        assert (weights[..., future] == 0).all()  # exactly


def test_minilm_encoder_self_attention(attention_server):
    maps = attention(attention_server, TRUCK, model="minilm")
    assert maps.model == "minilm" and maps.source_tokens == TRUCK_TOKENS
    assert maps.source_special == [True] + [False] * 13 + [True]
    assert list(maps.weights) == ["encoder_self"] and maps.layers == {"encoder_self": list(range(6))}
    weights = maps.weights["encoder_self"]
    assert weights.shape == (6, 12, 15, 15)
    assert_distributions(weights)
    assert maps.target_tokens == maps.predicted_tokens == [] and maps.target_text == ""
    # Layer 0, head 2 of all-MiniLM-L6-v2 puts nearly all weight on the previous token (docs: README).
    assert np.diagonal(weights[0, 2], offset=-1).min() > 0.99


def test_numbers_generates_then_returns_all_three_kinds(attention_server):
    maps = attention(attention_server, "312405", model="numbers")
    words = "three hundred and twelve thousand, four hundred and five"
    assert maps.target_text == words == pair(312405, to_digits=False)[1]
    assert maps.source_tokens == ["▁", "3", "1", "2", "4", "0", "5", "</s>"]
    assert maps.source_special == [False] * 7 + [True]
    assert maps.target_tokens[0] == "<s>" and maps.target_special == [True] + [False] * 10
    assert "".join(maps.target_tokens[1:]).replace("▁", " ").strip() == words
    # Greedy: each position predicts the next generated token, and the last one the end.
    assert maps.predicted_tokens == maps.target_tokens[1:] + ["</s>"]
    with Client(attention_server.target) as client:  # the same tokens as Generate
        assert list(client.generate("312405", model="numbers").token_ids) == [
            client.tokenize([words], model="numbers").tokenized[0].ids[i] for i in range(10)
        ]
    shapes = {kind: w.shape for kind, w in maps.weights.items()}
    assert shapes == {"encoder_self": (3, 4, 8, 8), "decoder_self": (3, 4, 11, 11), "cross": (3, 4, 11, 8)}
    assert_distributions(maps.weights["encoder_self"])
    assert_distributions(maps.weights["decoder_self"], causal=True)
    assert_distributions(maps.weights["cross"])
    assert (maps.weights["decoder_self"][:, :, 0, 0] == 1).all()  # the start token sees only itself


def test_a_given_target_is_read_as_is(attention_server):
    maps = attention(attention_server, "312405", model="numbers", target="three hundred and twelve")
    assert maps.target_tokens == ["<s>", "▁three", "▁hundred", "▁and", "▁twelve"]
    assert maps.predicted_tokens == ["▁three", "▁hundred", "▁and", "▁twelve", "▁thousand"]
    assert maps.target_text == "three hundred and twelve"
    assert maps.weights["cross"].shape == (3, 4, 5, 8)
    # Teacher forcing reads the target whatever it is; the predictions say what the model would write.
    wrong = attention(attention_server, "312405", model="numbers", target="seven")
    assert wrong.target_tokens == ["<s>", "▁seven"] and wrong.predicted_tokens[0] == "▁three"


def test_generated_and_given_targets_give_the_same_weights(attention_server):
    generated = attention(attention_server, "4711", model="numbers")
    given_ = attention(attention_server, "4711", model="numbers", target=generated.target_text)
    assert given_.target_tokens == generated.target_tokens
    for kind in generated.weights:
        np.testing.assert_array_equal(given_.weights[kind], generated.weights[kind])


def test_layers_can_be_chosen(attention_server):
    all_layers = attention(attention_server, "90", model="numbers")
    some = attention(attention_server, "90", model="numbers", layers=[2, 0])
    assert some.layers == {kind: [0, 2] for kind in ("encoder_self", "decoder_self", "cross")}
    for kind, weights in some.weights.items():
        np.testing.assert_array_equal(weights, all_layers.weights[kind][[0, 2]])


def test_the_raw_message_carries_shapes_and_little_endian_float32(attention_server):
    response = attention_server.stub().Attention(pb.AttentionRequest(model="minilm", input="hello world"))
    (weights,) = response.attentions
    assert weights.kind == pb.ATTENTION_KIND_ENCODER_SELF and list(weights.shape) == [6, 12, 4, 4]
    assert len(weights.data) == 4 * 6 * 12 * 4 * 4 and list(weights.layers) == list(range(6))
    array = np.frombuffer(weights.data, dtype="<f4").reshape(6, 12, 4, 4)
    np.testing.assert_allclose(array.sum(-1), 1, atol=1e-5)


def test_the_model_thread_runs_the_graph_and_metrics_count_it(attention_server):
    registry = attention_server.engine_core.registry
    before = registry.models["minilm"].attention.calls
    metrics = attention_server.metrics_registry
    labels = {"model": "minilm", "stage": "attention"}
    count = metrics.get_sample_value("attnserve_inference_duration_seconds_count", labels)
    release = attention_server.hold_model_thread()
    try:
        future = attention_server.stub().Attention.future(pb.AttentionRequest(model="minilm", input="held"))
        wait_until(
            lambda: attention_server.call_and_wait(lambda: attention_server.server.core.attention_maps.calls) == 1,
            what="the call arrives",
        )
        assert not future.done()  # waits for the model thread, like the serving graphs' calls
    finally:
        release.set()
    assert len(future.result(timeout=10).attentions) == 1
    assert registry.models["minilm"].attention.calls == before + 1
    assert metrics.get_sample_value("attnserve_inference_duration_seconds_count", labels) == count + 1


def long_sentence(tokens: int) -> str:
    return " ".join(["word"] * (tokens - 2))  # [CLS] ... [SEP]


@pytest.mark.parametrize(
    "request_, message",
    [
        (
            pb.AttentionRequest(model="minilm", input=long_sentence(70)),
            "input: 70 tokens; at most 64 for Attention (attention_max_input_tokens)",
        ),
        (
            pb.AttentionRequest(model="numbers", input="1" * 40),
            "input: more than 32 tokens; at most 32 for Attention (the most model 'numbers' takes)",
        ),
        (
            pb.AttentionRequest(model="minilm", input=long_sentence(60)),
            "input: the attention weights would take 1036800 bytes (60 source and 0 decoder positions); at most "
            "1000000 (attention_max_response_bytes): shorten the input, or ask for fewer layers",
        ),
        (
            pb.AttentionRequest(model="numbers", input="12", max_new_tokens=64),
            "max_new_tokens: 64; at most 63 for Attention on model 'numbers'",
        ),
        (
            pb.AttentionRequest(model="numbers", input="12", target="nine " * 40),
            "target: more than 32 tokens; at most 32 for Attention on model 'numbers'",
        ),
        (
            pb.AttentionRequest(model="minilm", input="x", target="y"),
            "target: model 'minilm' is an embedding model; a target is for seq2seq models",
        ),
        (pb.AttentionRequest(model="numbers", input="1", target=""), "target: empty text"),
        (
            pb.AttentionRequest(model="numbers", input="1", target="one", max_new_tokens=3),
            "max_new_tokens: only for a seq2seq model that generates",
        ),
        (
            pb.AttentionRequest(model="numbers", input="1", layers=[3]),
            "layers[0]: 3; model 'numbers' has 3 encoder and 3 decoder layers (0-based: at most 2)",
        ),
        (pb.AttentionRequest(model="minilm", input="x", layers=[1, 1]), "layers: [1, 1] names a layer twice"),
        (pb.AttentionRequest(model="minilm", input=""), "input: empty text"),
        (pb.AttentionRequest(model="minilm", input="a\x00b"), "input: contains a NUL character"),
    ],
)
def test_bad_requests_are_refused_before_any_model_work(attention_server, request_, message):
    models = attention_server.engine_core.registry.models
    work = (models["minilm"].attention.calls, models["numbers"].attention.calls, models["numbers"].scheduler.steps_run)
    code, details = status_of(lambda: attention_server.stub().Attention(request_))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message in details, details
    assert (
        models["minilm"].attention.calls,
        models["numbers"].attention.calls,
        models["numbers"].scheduler.steps_run,
    ) == work


def test_fewer_layers_fit_where_all_do_not(attention_server):
    maps = attention(attention_server, long_sentence(60), model="minilm", layers=[0])
    assert maps.weights["encoder_self"].shape == (1, 12, 60, 60)  # 172,800 bytes


def test_unknown_model_is_not_found(attention_server):
    code, details = status_of(lambda: attention_server.stub().Attention(pb.AttentionRequest(model="gpt-99", input="x")))
    assert code == grpc.StatusCode.NOT_FOUND and "model: 'gpt-99' is not served here" in details


def test_empty_model_means_the_first_one(attention_server):
    response = attention_server.stub().Attention(pb.AttentionRequest(input="two words"))
    assert response.model == "minilm" and list(response.source_tokens) == ["[CLS]", "two", "words", "[SEP]"]


@given(number=st.integers(0, 999_999_999))
@settings(max_examples=15, suppress_health_check=list(HealthCheck))
def test_shapes_follow_the_tokens(attention_server, number):
    maps = attention(attention_server, str(number), model="numbers")
    source, target = len(maps.source_tokens), len(maps.target_tokens)
    assert source == len(str(number)) + 2  # the word-start mark, the digits, </s>
    assert maps.target_text == pair(number, to_digits=False)[1]
    assert maps.weights["encoder_self"].shape == (3, 4, source, source)
    assert maps.weights["decoder_self"].shape == (3, 4, target, target)
    assert maps.weights["cross"].shape == (3, 4, target, source)
    assert_distributions(maps.weights["decoder_self"], causal=True)
    assert_distributions(maps.weights["cross"])


ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}


@given(
    request=st.builds(
        pb.AttentionRequest,
        model=st.sampled_from(["", "minilm", "numbers", "other"]),
        input=st.text(max_size=40),
        target=st.one_of(st.none(), st.text(max_size=20)),
        max_new_tokens=st.integers(0, 2**32 - 1) | st.integers(0, 9),
        layers=st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 6), max_size=4),
    )
)
@settings(max_examples=150, suppress_health_check=list(HealthCheck))
def test_any_request_gets_a_proper_status(attention_server, request):
    code, details = status_of(lambda: attention_server.stub().Attention(request, timeout=30))
    assert code in ALLOWED, (code, details)


def test_entropy_of_a_uniform_head_is_log_keys():
    """A sanity check of the reading the CLI gives: with every key weighted alike, log(keys) nats."""
    from cli.heads import summarize

    (summary,) = summarize(np.full((1, 1, 3, 5), 0.2), [0], [True, False, False, False, False], self_attention=False)
    assert summary.entropy == pytest.approx(math.log(5)) and summary.special == pytest.approx(0.2)


def test_unparsable_bytes_are_invalid_argument(attention_server):
    call = attention_server.channel().unary_unary("/attnserve.v1.Inference/Attention")
    code, details = status_of(lambda: call(b"\xff\x00garbage", timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "not a valid message for Attention" in details
