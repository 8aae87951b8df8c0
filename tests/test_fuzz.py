"""Fuzzing: 10,000 hypothesis-generated requests per RPC (huge repeated fields, any unicode, extreme
numbers, unparsable bytes). Only OK, INVALID_ARGUMENT, NOT_FOUND or RESOURCE_EXHAUSTED come back, never
UNKNOWN or INTERNAL, and the server answers and is back to its baseline afterwards."""

from __future__ import annotations

import os
import struct

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.grpc_api.pb import inference_pb2 as pb
from service.grpc_api.pb import open_inference_pb2 as oip
from service.grpc_api.pb import open_inference_pb2_grpc as oip_grpc
from testing.server_thread import ServerThread

from .server_state import assert_back_to, baseline

# 10,000 per RPC, in CI and by default; ATTNSERVE_FUZZ_EXAMPLES=500 for a quicker local run.
EXAMPLES = int(os.environ.get("ATTNSERVE_FUZZ_EXAMPLES", "10000"))
ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

texts = st.text(max_size=60)  # any unicode, NUL and lone surrogates' neighbours included
models = st.one_of(
    st.sampled_from(
        ["", "minilm", "bge-m3", "colbert", "numbers", "numbers-multilingual", "bert-reranker", "bert-classifier"]
    ),
    st.text(max_size=20),
)
# The multilingual model's codes, codes it does not serve, and any text.
languages = st.sampled_from(["", "zxx", "zxx_Zyyy", "fra_Latn", "fr", "de-DE", "zh", "eng_Latn"]) | st.text(max_size=12)
floats = st.floats(width=32, allow_nan=True, allow_infinity=True)


@pytest.fixture(scope="module")
def small_limits_server(minilm_dir, numbers_dir, multilingual_numbers_dir, cross_encoders, bge_m3, colbert_models):
    # Small limits keep each accepted call cheap, so that 10,000 of them fit in a CI run.
    models = [minilm_dir, bge_m3[1], colbert_models["colbert"][1], numbers_dir, multilingual_numbers_dir]
    models += [cross_encoders[name][1] for name in ("bert-reranker", "bert-classifier")]
    server = ServerThread(models, max_new_tokens=16, max_client_batch_size=8)
    before = baseline(server)
    yield server
    assert_back_to(server, before, timeout=30)
    assert server.stub().Generate(pb.GenerateRequest(input="6")).text == "six"
    server.close()


@pytest.fixture(scope="module")
def stub(small_limits_server):
    """One channel for all the examples: a channel per call would make the suite time connections."""
    return small_limits_server.stub()


def code(call) -> grpc.StatusCode:
    try:
        call()
        return grpc.StatusCode.OK
    except grpc.RpcError as error:
        return error.code()


prompt_names = st.none() | st.sampled_from(["", "query", "passage"]) | st.text(max_size=12)
embed_requests = st.builds(
    pb.EmbedRequest,
    model=models,
    inputs=st.lists(texts, max_size=40),
    normalize=st.one_of(st.none(), st.booleans()),
    truncate=st.one_of(st.none(), st.booleans()),
    prompt_name=prompt_names,
    input_type=st.none() | st.sampled_from(["search_query", "search_document", "clustering"]) | texts,
    truncation_direction=st.integers(-1, 3),
    outputs=st.lists(st.integers(-1, 4), max_size=4),  # dense, sparse, multi-vector, repeated, unknown
    embedding_type=st.integers(-1, 4),
)
params = st.builds(
    pb.GenerationParams,
    max_new_tokens=st.integers(0, 2**32 - 1) | st.integers(0, 20),
    temperature=floats | st.just(0.0),
    top_k=st.integers(0, 2**32 - 1) | st.just(0),
    top_p=floats | st.just(0.0),
    repetition_penalty=floats | st.just(0.0),
    min_p=floats | st.just(0.0),
    presence_penalty=floats | st.just(0.0),
    frequency_penalty=floats | st.just(0.0),
    seed=st.one_of(st.none(), st.integers(0, 2**64 - 1)),
    stop=st.lists(texts, max_size=12),
    ignore_eos=st.booleans(),
    num_beams=st.integers(0, 2**32 - 1) | st.integers(0, 5),
    length_penalty=st.one_of(st.none(), floats),
    early_stopping=st.integers(-3, 6),
    num_return_sequences=st.integers(0, 2**32 - 1) | st.integers(0, 6),
)
generate_requests = st.builds(
    pb.GenerateRequest,
    model=models,
    input=texts,
    params=params,
    source_language=languages,
    target_language=languages,
)


@FUZZ
@given(request=embed_requests)
def test_embed(stub, request):
    assert code(lambda: stub.Embed(request, timeout=30)) in ALLOWED


@FUZZ
@given(request=st.builds(pb.TokenizeRequest, model=models, inputs=st.lists(texts, max_size=40)))
def test_tokenize(stub, request):
    assert code(lambda: stub.Tokenize(request, timeout=30)) in ALLOWED


@FUZZ
@given(request=generate_requests)
def test_generate(stub, request):
    assert code(lambda: stub.Generate(request, timeout=30)) in ALLOWED


@FUZZ
@given(request=generate_requests)
def test_generate_stream(stub, request):
    assert code(lambda: list(stub.GenerateStream(request, timeout=30))) in ALLOWED


# Texts shaped like documents now and then: sentences, numbers, line breaks and blank lines.
documents = st.lists(
    st.sampled_from(["12.", "7", "trois", "five", "\n", "\n\n", "  ", "\r\n"]) | texts, max_size=8
).map(" ".join)
# Markup as it is sent, well-formed or not, and the ways of reading it.
markup_texts = st.lists(
    st.sampled_from(["<b>", "</b>", "<p>", "</p>", "<br/>", '<x id="1"></x>', "&amp;", "&bogus;", "<", "12", " "])
    | texts,
    max_size=8,
).map("".join)
markups = st.builds(
    pb.Markup,
    tag_handling=st.sampled_from(["", "xml", "html", "yaml"]),
    ignore_tags=st.lists(st.sampled_from(["x", "b", ""]), max_size=2),
    splitting_tags=st.lists(st.sampled_from(["p", "b"]), max_size=2),
)
translate_requests = st.builds(
    pb.TranslateRequest,
    markup=markups,
    glossary_id=st.sampled_from(["", "no-such-glossary"]),
    model=models,
    texts=st.lists(documents | texts | markup_texts, max_size=10),
    source_language=languages | st.just("auto"),
    target_language=languages,
    num_beams=st.integers(0, 2**32 - 1) | st.integers(0, 5),
    alternatives=st.integers(0, 2**32 - 1) | st.integers(0, 4),
    max_new_tokens=st.integers(0, 2**32 - 1) | st.integers(0, 20),
    sentence_splitting=st.integers(-1, 4),
    return_scores=st.booleans(),
)


rerank_requests = st.builds(
    pb.RerankRequest,
    model=models,
    query=texts,
    documents=st.lists(texts, max_size=12),
    top_n=st.none() | st.integers(0, 2**32 - 1) | st.integers(0, 6),
    return_documents=st.booleans(),
    raw_scores=st.booleans(),
    truncation=st.integers(-1, 3),
)


@FUZZ
@given(request=rerank_requests)
def test_rerank(stub, request):
    assert code(lambda: stub.Rerank(request, timeout=30)) in ALLOWED


@FUZZ
@given(
    request=st.builds(pb.ClassifyRequest, model=models, inputs=st.lists(texts, max_size=12), raw_scores=st.booleans())
)
def test_classify(stub, request):
    assert code(lambda: stub.Classify(request, timeout=30)) in ALLOWED


@FUZZ
@given(request=translate_requests)
def test_translate(stub, request):
    assert code(lambda: stub.Translate(request, timeout=30)) in ALLOWED


parameters = st.one_of(
    st.builds(oip.InferParameter, bool_param=st.booleans()),
    st.builds(oip.InferParameter, int64_param=st.integers(-(2**63), 2**63 - 1) | st.integers(0, 20)),
    st.builds(oip.InferParameter, uint64_param=st.integers(0, 2**64 - 1)),
    st.builds(oip.InferParameter, double_param=st.floats(allow_nan=True, allow_infinity=True)),
    st.builds(oip.InferParameter, string_param=texts),
    st.just(oip.InferParameter()),  # none of its kinds set
)
parameter_names = st.sampled_from(
    [
        "max_new_tokens",
        "temperature",
        "top_k",
        "top_p",
        "seed",
        "stop",
        "num_beams",
        "num_return_sequences",
        "early_stopping",
        "normalize",
        "truncate",
        "dimensions",
        "stream",
        "priority",
        "source_language",
        "target_language",
        "prompt_name",
        "input_type",
        "truncation_direction",
    ]
) | st.text(max_size=12)


# Made once, not in each draw, where each was built and validated anew: 3,000 requests took 24.7 s so, 18.4 now.
versions = st.sampled_from(["", "1", "2"])
infer_parameters = st.dictionaries(parameter_names, parameters, max_size=4)
tensor_elements = st.lists(texts.map(str.encode) | st.binary(max_size=20), max_size=10)
tensor_names = st.just("text") | st.text(max_size=8)
datatypes = st.sampled_from(["BYTES", "FP32", ""])
# A shape for n elements: the ones that fit them, or any.
shapes_for = st.sampled_from([lambda n: [n], lambda n: [n, 1], lambda n: []]) | st.lists(
    st.integers(-3, 12), max_size=3
).map(lambda shape: lambda n: shape)


@st.composite
def infer_requests(draw) -> oip.ModelInferRequest:
    """Any model, version, parameters and `text` tensor: its name, datatype and shape, UTF-8 or not, as
    contents or raw bytes."""
    request = oip.ModelInferRequest(model_name=draw(models), model_version=draw(versions))
    for name, value in draw(infer_parameters).items():
        request.parameters[name].CopyFrom(value)
    elements = draw(tensor_elements)
    tensor = request.inputs.add(
        name=draw(tensor_names), datatype=draw(datatypes), shape=draw(shapes_for)(len(elements))
    )
    if draw(st.booleans()):
        request.raw_input_contents.append(b"".join(struct.pack("<I", len(e)) + e for e in elements))
    else:
        tensor.contents.bytes_contents.extend(elements)
    return request


@FUZZ
@given(request=infer_requests())
def test_model_infer(small_limits_server, request):
    stub = oip_grpc.GRPCInferenceServiceStub(raw_channel(small_limits_server))
    assert code(lambda: stub.ModelInfer(request, timeout=30)) in ALLOWED


_channels: dict[int, grpc.Channel] = {}


def raw_channel(server) -> grpc.Channel:
    if id(server) not in _channels:
        _channels[id(server)] = server.channel()
    return _channels[id(server)]


@FUZZ
@given(
    method=st.sampled_from(
        [
            "attnserve.v1.Inference/" + m
            for m in (
                "Embed",
                "Tokenize",
                "Generate",
                "GenerateStream",
                "ListModels",
                "Translate",
                "Rerank",
                "Classify",
                "Transcribe",
                "TranscribeStream",
            )
        ]
        + ["inference.GRPCInferenceService/" + m for m in ("ModelInfer", "ModelMetadata", "ModelConfig", "ModelReady")]
    ),
    data=st.binary(max_size=200),
)
def test_raw_bytes(small_limits_server, method, data):
    """Bytes that may not even parse as the request message; ListModels takes any of its (empty) messages."""
    channel = raw_channel(small_limits_server)
    rpc = f"/{method}"
    if method.endswith("GenerateStream"):
        result = code(lambda: list(channel.unary_stream(rpc)(data, timeout=30)))
    elif method.endswith("TranscribeStream"):  # the bytes as the stream's one message, then twice
        result = code(lambda: list(channel.stream_stream(rpc)(iter([data, data]), timeout=30)))
    else:
        result = code(lambda: channel.unary_unary(rpc)(data, timeout=30))
    assert result in ALLOWED
