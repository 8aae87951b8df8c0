"""KServe v2 over REST on the HTTP port, for every model kind (embeddings, classification, generation),
called with tritonclient.http (binary tensor data, as it sends by default, and JSON) and raw requests: the
same tensors and parameters as the gRPC door's ModelInfer; health open without a token; refusals in
Triton's shape, {"error"}, never a 5xx, fuzzed."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import tritonclient.http as triton
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.utils import InferenceServerException

from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .http_client import http
from .json_values import JSON

TEXTS = ["The delivery truck blocked the narrow street.", "A cat sleeps on the warm windowsill."]


@pytest.fixture(scope="module")
def server(minilm_dir, numbers_dir, number_rankers):
    server = ServerThread([minilm_dir, numbers_dir, number_rankers["numbers-language"]])
    yield server
    server.close()


@pytest.fixture(scope="module")
def url(server):
    return f"http://localhost:{server.server.http.port}"


@pytest.fixture(scope="module")
def client(server):
    with triton.InferenceServerClient(f"localhost:{server.server.http.port}") as client:
        yield client


def text_input(texts: list[str], binary: bool = True) -> triton.InferInput:
    tensor = triton.InferInput("text", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object), binary_data=binary)
    return tensor


def grpc_vectors(server, texts: list[str]) -> np.ndarray:
    response = server.stub().Embed(pb.EmbedRequest(model="minilm", inputs=texts), timeout=60)
    return np.array([list(e.values) for e in response.embeddings], np.float32)


def test_health_and_metadata(client):
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("minilm")
    assert client.is_model_ready("minilm", "1") and not client.is_model_ready("minilm", "2")
    assert not client.is_model_ready("nope")
    assert client.get_server_metadata()["name"] == "attnserve"
    meta = client.get_model_metadata("minilm", "1")
    assert meta["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    assert meta["outputs"] == [{"name": "embedding", "datatype": "FP32", "shape": [-1, 384]}]
    assert client.get_model_config("numbers-language")["output"] == [
        {"name": "scores", "data_type": "TYPE_FP32", "dims": [-1, 4]}
    ]


@pytest.mark.parametrize("binary", [True, False])
def test_embeddings_are_the_grpc_vectors(server, client, binary):
    outputs = [triton.InferRequestedOutput("embedding", binary_data=binary)]
    answer = client.infer("minilm", [text_input(TEXTS, binary)], outputs=outputs, parameters={"normalize": True})
    np.testing.assert_allclose(answer.as_numpy("embedding"), grpc_vectors(server, TEXTS), atol=1e-6)
    assert answer.get_response()["parameters"]["prompt_tokens"] > 10


def test_classification_and_generation(server, client):
    scores = client.infer("numbers-language", [text_input(["trois cent douze"])]).as_numpy("scores")
    want = server.stub().Classify(pb.ClassifyRequest(model="numbers-language", inputs=["trois cent douze"]))
    np.testing.assert_allclose(scores[0], list(want.results[0].scores), atol=1e-6)
    answer = client.infer("numbers", [text_input(["312405", "7"])], parameters={"num_beams": 2})
    texts = [t.decode() if isinstance(t, bytes) else t for t in answer.as_numpy("text")]
    assert texts == ["three hundred and twelve thousand, four hundred and five", "seven"]
    ids = answer.as_numpy("token_ids")
    assert ids.shape[0] == 2 and ids[1][-1] == -1  # padded with -1


def test_raw_json_and_binary_requests(server, url):
    body = {
        "id": "r1",
        "inputs": [{"name": "text", "shape": [2, 1], "datatype": "BYTES", "data": [[TEXTS[0]], [TEXTS[1]]]}],
    }
    answer = http().post(f"{url}/v2/models/minilm/versions/1/infer", json=body).json()
    assert answer["id"] == "r1" and answer["model_version"] == "1" and answer["outputs"][0]["shape"] == [2, 384]
    np.testing.assert_allclose(
        np.reshape(answer["outputs"][0]["data"], (2, 384)), grpc_vectors(server, TEXTS), atol=1e-6
    )
    # the binary tensor data extension: a JSON header, then each element's length and bytes
    data = b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in TEXTS)
    header = json.dumps(
        {
            "inputs": [
                {"name": "text", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": len(data)}}
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    raw = http().post(
        f"{url}/v2/models/minilm/infer",
        content=header + data,
        headers={"inference-header-content-length": str(len(header))},
    )
    length = int(raw.headers["inference-header-content-length"])
    output = json.loads(raw.content[:length])["outputs"][0]
    vectors = np.frombuffer(raw.content[length:], "<f4").reshape(2, 384)
    assert output["parameters"]["binary_data_size"] == 2 * 384 * 4
    np.testing.assert_allclose(vectors, grpc_vectors(server, TEXTS), atol=1e-6)


@pytest.mark.parametrize(
    "path, body, status, message",
    [
        ("/v2/models/nope/infer", {}, 404, "model_name: 'nope' is not served here"),
        ("/v2/models/minilm/versions/2/infer", {}, 404, "model_version: '2' is not served"),
        ("/v2/models/minilm/infer", {"inputs": [{"name": "txt"}]}, 400, "inputs.name: the model takes one input"),
        (
            "/v2/models/minilm/infer",
            {"inputs": [{"name": "text", "datatype": "FP32", "shape": [1], "data": [1]}]},
            400,
            "text: datatype 'FP32'; send BYTES",
        ),
        (
            "/v2/models/minilm/infer",
            {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], "data": ["a"]}]},
            400,
            "text: shape [2] holds 2 elements; the data has 1",
        ),
        (
            "/v2/models/minilm/infer",
            {
                "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a"]}],
                "parameters": {"dimensions": "8"},
            },
            400,
            'parameters.dimensions: "8"; send an integer',
        ),
        (
            "/v2/models/minilm/infer",
            {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [""]}]},
            400,
            "text[0]: empty text",
        ),
        (
            "/v2/models/minilm/infer",
            {
                "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a"]}],
                "outputs": [{"name": "scores"}],
            },
            400,
            "outputs: 'scores' is not an output",
        ),
        (
            "/v2/models/numbers/infer",
            {
                "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["7"]}],
                "parameters": {"num_beams": 99},
            },
            400,
            "parameters.num_beams: 99",
        ),
    ],
)
def test_refusals_in_tritons_shape(url, path, body, status, message):
    answer = http().post(f"{url}{path}", json=body)
    assert answer.status_code == status and set(answer.json()) == {"error"}, answer.text
    assert answer.json()["error"].startswith(message), answer.json()


def test_tritonclient_sees_the_error(client):
    with pytest.raises(InferenceServerException) as error:
        client.infer("minilm", [text_input(["a"])], parameters={"dimensions": 999})
    assert error.value.status() == "400" and "parameters.dimensions: 999; 1 to 384" in error.value.message()


def test_probes_are_open_and_the_rest_wants_a_token(minilm_dir, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret\n")
    server = ServerThread([minilm_dir], auth_token_file=str(tokens))
    try:
        url = f"http://localhost:{server.server.http.port}"
        assert http().get(f"{url}/v2/health/live").status_code == 200
        assert http().get(f"{url}/v2/health/ready").json() == {"ready": True}
        refused = http().get(f"{url}/v2/models/minilm")
        assert refused.status_code == 401 and set(refused.json()) == {"error"}
        with triton.InferenceServerClient(url.removeprefix("http://")) as client:
            meta = client.get_model_metadata("minilm", headers={"authorization": "Bearer s3cret"})
            assert meta["name"] == "minilm"
    finally:
        server.close()


TENSOR = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["text", "x"]),
        "datatype": st.sampled_from(["BYTES", "FP32"]) | st.text(max_size=5),
        "shape": st.lists(st.integers(-2, 3), max_size=3) | JSON,
        "data": st.lists(st.text(max_size=10), max_size=3) | JSON,
    },
    optional={"parameters": st.dictionaries(st.sampled_from(["binary_data_size"]), st.integers(-5, 50))},
)
BODIES = st.fixed_dictionaries(
    {},
    optional={
        "inputs": st.lists(TENSOR, max_size=2) | JSON,
        "outputs": JSON,
        "id": JSON,
        "parameters": st.dictionaries(
            st.sampled_from(["normalize", "dimensions", "num_beams", "binary_data_output", "x"]), JSON
        ),
    },
)


@settings(max_examples=300, deadline=None)
@given(
    model=st.sampled_from(["minilm", "numbers", "numbers-language", "nope"]), body=BODIES, tail=st.binary(max_size=20)
)
def test_no_body_gets_a_server_error_and_the_server_serves_on(url, model, body, tail):
    header = json.dumps(body).encode()
    headers = {"inference-header-content-length": str(len(header))} if tail else {}
    answer = http().post(f"{url}/v2/models/{model}/infer", content=header + tail, headers=headers, timeout=60)
    assert answer.status_code in (200, 400, 404, 413), answer.text
    if answer.status_code != 200:
        assert set(answer.json()) == {"error"}
    assert http().get(f"{url}/v2/health/ready").status_code == 200


@pytest.mark.parametrize(
    "path, shape",
    [
        ("/v2/models/minilm/infer", {"error"}),
        ("/embed", {"error", "error_type"}),
        ("/", {"error", "error_type"}),
        ("/v2/embed", {"message"}),
        ("/v2/rerank", {"message"}),
    ],
)
def test_json_nested_too_deep_is_refused_in_each_apis_shape(url, path, shape):
    deep = b"[" * 100_000 + b"]" * 100_000  # past Python's recursion limit, within the body limit
    answer = http().post(f"{url}{path}", content=deep, headers={"content-type": "application/json"})
    assert answer.status_code in (400, 422) and set(answer.json()) == shape, answer.text
    assert "nested" in answer.text or "recursion" in answer.text
