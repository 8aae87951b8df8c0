"""Cohere's v2 embed and rerank on the HTTP port, called with Cohere's own SDK (ClientV2, base_url at the
server): every embedding type from one call equal to the gRPC door's, truncate and output_dimension as
Cohere defines them, rerank as gRPC Rerank; refusals in Cohere's shape and statuses; /v2 shared with DeepL,
each path its own API's; no body a 5xx, fuzzed."""

from __future__ import annotations

import base64

import cohere
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .http_client import http
from .json_values import JSON

TEXTS = ["The delivery truck blocked the narrow street.", "A cat sleeps on the warm windowsill."]
LONG = " ".join(["a word"] * 300)
NUMBERS = ["three hundred and twelve", "trois cent douze", "dreihundertzwölf", "four"]
TYPES = {
    "int8": pb.EMBEDDING_TYPE_INT8,
    "uint8": pb.EMBEDDING_TYPE_UINT8,
    "binary": pb.EMBEDDING_TYPE_BINARY,
    "ubinary": pb.EMBEDDING_TYPE_UBINARY,
}
SIGNED = {"int8", "binary"}


@pytest.fixture(scope="module")
def server(minilm_dir, number_rankers):
    server = ServerThread([minilm_dir, number_rankers["numbers-reranker"]])
    yield server
    server.close()


@pytest.fixture(scope="module")
def url(server):
    return f"http://localhost:{server.server.http.port}"


@pytest.fixture(scope="module")
def co(url):
    return cohere.ClientV2(api_key="any", base_url=url, max_retries=0)


def grpc(server, texts, **fields) -> list:
    return list(server.stub().Embed(pb.EmbedRequest(model="minilm", inputs=texts, **fields), timeout=60).embeddings)


def test_every_embedding_type_from_one_call(server, co):
    kinds = ["float", "int8", "uint8", "binary", "ubinary", "base64"]
    answer = co.embed(model="minilm", texts=TEXTS, input_type="search_document", embedding_types=kinds)
    floats = np.array([list(e.values) for e in grpc(server, TEXTS)], np.float32)
    np.testing.assert_allclose(np.array(answer.embeddings.float_), floats, atol=1e-6)
    unpacked = [np.frombuffer(base64.b64decode(s), "<f4") for s in answer.embeddings.base64]
    np.testing.assert_allclose(np.array(unpacked), floats, atol=1e-6)
    for kind, number in TYPES.items():
        want = [
            np.frombuffer(e.packed, np.int8 if kind in SIGNED else np.uint8).tolist()
            for e in grpc(server, TEXTS, embedding_type=number)
        ]
        assert getattr(answer.embeddings, kind) == want, kind
    assert len(answer.embeddings.binary[0]) == 384 // 8 and answer.texts == TEXTS
    tokens = server.stub().Tokenize(pb.TokenizeRequest(model="minilm", inputs=TEXTS)).tokenized
    assert answer.meta.billed_units.input_tokens == sum(len(t.ids) for t in tokens)


def test_truncate_output_dimension_and_the_default_type(server, co):
    start = co.embed(
        model="minilm", texts=[LONG + " end"], input_type="search_query", truncate="START", output_dimension=16
    )
    (whole,) = grpc(server, [LONG + " end"], truncation_direction=pb.TRUNCATION_DIRECTION_LEFT, normalize=False)
    leading = np.array(whole.values[:16])  # Matryoshka: the first 16 values, normalised again
    np.testing.assert_allclose(start.embeddings.float_[0], leading / np.linalg.norm(leading), atol=1e-6)
    assert len(start.embeddings.float_[0]) == 16 and start.embeddings.int8 is None  # float unless asked
    with pytest.raises(cohere.BadRequestError) as error:
        co.embed(model="minilm", texts=["fine", LONG], input_type="search_query", truncate="NONE")
    assert error.value.body == {
        "message": "texts[1]: more than 256 tokens, the most model 'minilm' takes; shorten it or set truncate to true"
    }
    cut = co.embed(model="minilm", texts=[LONG], input_type="clustering", max_tokens=5, embedding_types=["float"])
    np.testing.assert_allclose(
        cut.embeddings.float_[0],
        co.embed(model="minilm", texts=["a word a"], input_type="clustering").embeddings.float_[0],
        atol=1e-6,
    )


def test_rerank_is_grpc_rerank(server, co):
    answer = co.rerank(model="numbers-reranker", query="312", documents=NUMBERS, top_n=3)
    want = server.stub().Rerank(pb.RerankRequest(model="numbers-reranker", query="312", documents=NUMBERS, top_n=3))
    assert [r.index for r in answer.results] == [r.index for r in want.results]
    np.testing.assert_allclose([r.relevance_score for r in answer.results], [r.score for r in want.results], atol=1e-6)
    assert answer.results[0].index == 0  # 312 in words


@pytest.mark.parametrize(
    "call, exception, message",
    [
        (
            lambda co: co.embed(model="nope", texts=["a"], input_type="search_query"),
            cohere.NotFoundError,
            "model: 'nope' is not served here",
        ),
        (
            lambda co: co.embed(model="minilm", texts=[], input_type="search_query"),
            cohere.BadRequestError,
            "texts: empty; send 1 to 32 texts",
        ),
        (
            lambda co: co.embed(model="minilm", texts=["a"] * 33, input_type="search_query"),
            cohere.BadRequestError,
            "texts: 33 texts; at most 32 per call",
        ),
        (
            lambda co: co.embed(model="minilm", texts=["a"], input_type="search_query", embedding_types=["int4"]),
            cohere.BadRequestError,
            "embedding_types: 'int4'; any of",
        ),
        (
            lambda co: co.embed(model="minilm", texts=["a"], input_type=None),
            cohere.BadRequestError,
            "input_type: required: search_document, search_query",
        ),
        (
            lambda co: co.embed(model="minilm", texts=["a"], input_type="sorting"),
            cohere.BadRequestError,
            "input_type: 'sorting'; one of search_query",
        ),
        (
            lambda co: co.embed(model="minilm", images=["data:image/png;base64,AA"], input_type="image"),
            cohere.BadRequestError,
            "input_type: image: not served",
        ),
        (
            lambda co: co.embed(model="minilm", texts=["a"], input_type="search_query", output_dimension=512),
            cohere.BadRequestError,
            "output_dimension: 512; 1 to 384",
        ),
        (
            lambda co: co.rerank(model="numbers-reranker", query="q", documents=[]),
            cohere.BadRequestError,
            "documents: empty",
        ),
        (
            lambda co: co.rerank(model="numbers-reranker", query="q", documents=["d"], max_tokens_per_doc=8),
            cohere.BadRequestError,
            "max_tokens_per_doc: 8; documents are cut at model 'numbers-reranker'",
        ),
        (
            lambda co: co.rerank(model="minilm", query="q", documents=["d"]),
            cohere.BadRequestError,
            "model: 'minilm' is an embedding model",
        ),
    ],
)
def test_refusals_in_cohere_shape(co, call, exception, message):
    with pytest.raises(exception) as error:
        call(co)
    assert set(error.value.body) == {"message"} and error.value.body["message"].startswith(message), error.value.body


def test_v2_is_shared_with_deepl_each_path_its_own_api(minilm_dir, multilingual_numbers_dir, tmp_path):
    """With keys on, Cohere's paths want a bearer token (401 without), DeepL's its DeepL-Auth-Key (403)."""
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret\n")
    server = ServerThread([minilm_dir, multilingual_numbers_dir], auth_token_file=str(tokens))
    try:
        url = f"http://localhost:{server.server.http.port}"
        body = {"model": "minilm", "texts": ["a"], "input_type": "search_query"}
        assert http().post(f"{url}/v2/embed", json=body).status_code == 401
        assert http().post(f"{url}/v2/translate", json={"text": ["a"], "target_lang": "DE"}).status_code == 403
        with pytest.raises(cohere.UnauthorizedError):
            cohere.ClientV2(api_key="wrong", base_url=url, max_retries=0).embed(**body)
        right = cohere.ClientV2(api_key="s3cret", base_url=url, max_retries=0).embed(**body)
        assert len(right.embeddings.float_[0]) == 384
    finally:
        server.close()


FIELDS = st.sampled_from(
    [
        "model",
        "texts",
        "inputs",
        "images",
        "input_type",
        "embedding_types",
        "output_dimension",
        "max_tokens",
        "truncate",
        "query",
        "documents",
        "top_n",
        "max_tokens_per_doc",
        "return_documents",
    ]
)


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from(["/v2/embed", "/v2/rerank"]), body=st.dictionaries(FIELDS, JSON, max_size=6))
def test_no_body_gets_a_server_error_and_the_server_serves_on(url, path, body):
    answer = http().post(f"{url}{path}", json=body, timeout=60)
    assert answer.status_code in (200, 400, 404, 413), answer.text
    if answer.status_code != 200:
        assert set(answer.json()) == {"message"}
    assert http().get(f"{url}/health").status_code == 200
