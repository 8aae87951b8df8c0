"""The OpenAI-compatible HTTP API: a real server (gRPC and HTTP on port 0, the real models), called with the
real `openai` SDK, and with raw HTTP for what the SDK does not send. Its answers must be the gRPC API's."""

from __future__ import annotations

import base64
import json

import numpy as np
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.grpc_api.client import Client
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .http_client import http
from .json_values import JSON
from .waits import wait_until

TEXTS = ["The delivery truck blocked the narrow street.", "A cat sleeps on the warm windowsill."]


@pytest.fixture(scope="module")
def base_url(served) -> str:
    return f"http://127.0.0.1:{served.server.http.port}"


@pytest.fixture(scope="module")
def sdk(base_url):
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0) as client:
        yield client


def grpc_vectors(served, texts, **kwargs) -> np.ndarray:
    with Client(served.target) as client:
        return np.array(client.embed(texts, model="minilm", **kwargs).vectors, np.float32)


def refusal(call) -> tuple[int, dict]:
    with pytest.raises(openai.APIStatusError) as error:
        call()
    return error.value.status_code, error.value.body


def test_embeddings_float_and_base64_are_the_grpc_vectors(served, sdk):
    expected = grpc_vectors(served, TEXTS)
    floats = sdk.embeddings.create(model="minilm", input=TEXTS, encoding_format="float")
    packed = sdk.embeddings.create(model="minilm", input=TEXTS, encoding_format="base64")
    assert [d.index for d in floats.data] == [0, 1] and floats.model == "minilm"
    np.testing.assert_allclose(np.array([d.embedding for d in floats.data]), expected, atol=1e-6)
    # asked for base64 explicitly, the SDK hands the strings over as they came
    unpacked = [np.frombuffer(base64.b64decode(d.embedding), "<f4") for d in packed.data]
    np.testing.assert_allclose(np.array(unpacked), expected, atol=1e-6)
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > 10
    # no format: the SDK asks for base64 and decodes it itself
    default = sdk.embeddings.create(model="minilm", input=TEXTS[0])
    np.testing.assert_allclose(default.data[0].embedding, expected[0], atol=1e-6)


def test_token_ids_embed_as_the_text_they_are(served, sdk):
    """OpenAI's token-id inputs: the model's own ids (its tokenizer's, [CLS] and [SEP] included) give the
    text's vector; one array or several."""
    expected = grpc_vectors(served, TEXTS)
    tokenized = served.stub().Tokenize(pb.TokenizeRequest(model="minilm", inputs=TEXTS), timeout=30)
    ids = [list(t.ids) for t in tokenized.tokenized]
    several = sdk.embeddings.create(model="minilm", input=ids, encoding_format="float")
    np.testing.assert_allclose(np.array([d.embedding for d in several.data]), expected, atol=1e-6)
    assert several.usage.prompt_tokens == sum(len(i) for i in ids)
    one = sdk.embeddings.create(model="minilm", input=ids[0], encoding_format="float")
    np.testing.assert_allclose(one.data[0].embedding, expected[0], atol=1e-6)


def test_raw_base64_is_little_endian_float32(served, base_url):
    # no model: the default embedding model; the caller's request id comes back
    response = http().post(
        f"{base_url}/v1/embeddings",
        json={"input": TEXTS[0], "encoding_format": "base64"},
        headers={"x-request-id": "abc-123"},
    )
    assert response.headers["x-request-id"] == "abc-123"
    body = response.json()
    values = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), "<f4")
    np.testing.assert_allclose(values, grpc_vectors(served, TEXTS[:1])[0], atol=1e-6)
    assert body["object"] == "list" and body["data"][0]["object"] == "embedding"


def test_dimensions_keep_the_leading_values_normalised_again(served, sdk):
    full = grpc_vectors(served, TEXTS)
    short = np.array([d.embedding for d in sdk.embeddings.create(model="minilm", input=TEXTS, dimensions=64).data])
    expected = full[:, :64] / np.linalg.norm(full[:, :64], axis=1, keepdims=True)
    assert short.shape == (2, 64)
    np.testing.assert_allclose(short, expected, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(short, axis=1), 1.0, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, status, param, words",
    [
        ({"input": TEXTS, "dimensions": 385}, 400, "dimensions", "385; 1 to 384 for model 'minilm'"),
        ({"input": TEXTS, "dimensions": 0}, 400, "dimensions", "0; 1 to 384 for model 'minilm'"),
        ({"input": TEXTS, "model": "nope"}, 404, "model", "'nope' is not served here"),
        ({"input": TEXTS, "model": "numbers"}, 400, "model", "'numbers' is a seq2seq model"),
        ({"input": []}, 400, "input", "input: empty; send 1 to 32 texts"),
        ({"input": ["a"] * 33}, 400, "input", "33 texts; at most 32 per call"),
        ({"input": ["fine", ""]}, 400, "input[1]", "input[1]: empty text"),
        ({"input": [[101, 30522, 102]]}, 400, "input[0][1]", "token id 30522; the model's ids are 0 to 30521"),
        ({"input": [[101, 2023], []]}, 400, "input[1]", "no token ids"),
        ({"input": TEXTS, "encoding_format": "int8"}, 400, "encoding_format", "encoding_format"),
    ],
)
def test_embedding_refusals_name_the_field_and_the_limit(sdk, kwargs, status, param, words):
    kwargs = {"model": "minilm", **kwargs}
    code, body = refusal(lambda: sdk.embeddings.create(**kwargs))
    assert code == status
    assert body["param"] == param and words in body["message"], body
    assert body["type"] == ("invalid_request_error" if status in (400, 404) else body["type"])


def test_models_list_every_served_model(sdk):
    listed = {m.id: m for m in sdk.models.list().data}
    assert set(listed) == {"minilm", "numbers"}
    assert all(m.object == "model" and m.owned_by == "attnserve" for m in listed.values())


def test_completions_are_the_grpc_answers(served, sdk):
    prompts = ["312405", "nine hundred and ninety-nine", "70", "1000001", "eighteen"]
    with Client(served.target) as client:
        expected = [client.generate(p, model="numbers").text for p in prompts]
    one = sdk.completions.create(model="numbers", prompt=prompts[0])
    assert one.choices[0].text == expected[0] == "three hundred and twelve thousand, four hundred and five"
    assert one.choices[0].finish_reason == "stop" and one.object == "text_completion"
    assert one.usage.total_tokens == one.usage.prompt_tokens + one.usage.completion_tokens
    assert one.usage.completion_tokens > 5
    batch = sdk.completions.create(model="numbers", prompt=prompts)
    assert [c.index for c in batch.choices] == list(range(5))
    assert [c.text for c in batch.choices] == expected
    short = sdk.completions.create(model="numbers", prompt=prompts[0], max_tokens=2)
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 2
    # one call of five prompts was one running request, and is none now
    metrics = http().get(f"http://127.0.0.1:{served.server.metrics_server.port}/metrics").text
    assert 'attnserve_requests_running{model="numbers"} 0.0' in metrics
    assert 'attnserve_requests_total{code="200",model="numbers",rpc="http.completions"} 3.0' in metrics


def test_n_returns_the_n_best_beams(served, sdk):
    with Client(served.target) as client:
        best = client.generate("nine hundred and ninety-nine", model="numbers", num_beams=3).text
    answer = sdk.completions.create(model="numbers", prompt="nine hundred and ninety-nine", n=3)
    assert len(answer.choices) == 3 and answer.choices[0].text == best == "999"


def test_sampling_rules_and_penalties_are_the_grpc_ones(served, sdk):
    """OpenAI's presence and frequency penalties (the SDK's own arguments) and min_p (extra_body) reach the
    same sampler as gRPC's fields: the same seed gives the same text on both doors."""
    prompt = "nine hundred and ninety-nine thousand, nine hundred and ninety-nine"
    plain = {"temperature": 1.5, "seed": 11}
    settings = [
        {},
        {"presence_penalty": 2.0},
        {"frequency_penalty": 2.0},
        {"presence_penalty": -2.0, "frequency_penalty": 1.0},
        {"min_p": 0.5},
    ]
    texts = []
    with Client(served.target) as client:
        for setting in settings:
            grpc_text = client.generate(prompt, model="numbers", **plain, **setting).text
            extra = {"min_p": setting.pop("min_p")} if "min_p" in setting else None
            answer = sdk.completions.create(model="numbers", prompt=prompt, **plain, **setting, extra_body=extra)
            assert answer.choices[0].text == grpc_text, setting
            texts.append(grpc_text)
    assert texts[2] != texts[0], texts  # the frequency penalty changes what is drawn (the model is sure of 9s)
    # A penalty on greedy decoding: the argmax of the penalized logits (this model's margins are wider).
    greedy = sdk.completions.create(model="numbers", prompt=prompt, frequency_penalty=-2.0).choices[0].text
    with Client(served.target) as client:
        assert greedy == client.generate(prompt, model="numbers", frequency_penalty=-2.0).text == "999999"


@pytest.mark.filterwarnings("error::RuntimeWarning")  # the samplers divide by 1e-197 without a warning
def test_temperatures_json_has_and_float32_has_not_are_served(served, sdk):
    """JSON's numbers are doubles: 1e-197 is 0 in the samplers' float32 and failed the decode step of every
    sequence in it (schemathesis found it); it samples as a temperature near 0 does, the greedy answer."""
    prompt = "nine hundred and ninety-nine thousand, nine hundred and ninety-nine"
    with Client(served.target) as client:
        greedy = client.generate(prompt, model="numbers").text
    for temperature in (1e-197, 5e-324):
        for rule in (None, {"min_p": 0.5}, {"top_k": 5}, {"top_p": 0.5}):
            answer = sdk.completions.create(
                model="numbers", prompt=prompt, temperature=temperature, seed=3, extra_body=rule
            )
            assert answer.choices[0].text == greedy == "999999", (temperature, rule)
    hot = sdk.completions.create(model="numbers", prompt=prompt, temperature=1e300, seed=3, max_tokens=4)
    assert hot.usage.completion_tokens >= 1


def test_streamed_completions_add_up_to_the_whole_answer(sdk):
    prompts = ["312405", "70"]
    whole = [c.text for c in sdk.completions.create(model="numbers", prompt=prompts).choices]
    texts, reasons = ["", ""], [None, None]
    for chunk in sdk.completions.create(model="numbers", prompt=prompts, stream=True):
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            reasons[choice.index] = choice.finish_reason or reasons[choice.index]
    assert texts == whole and reasons == ["stop", "stop"]


def test_raw_stream_is_server_sent_events_ending_with_done(base_url):
    with http().stream(
        "POST",
        f"{base_url}/v1/completions",
        json={"prompt": "5", "stream": True, "stream_options": {"include_usage": True}},
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    usage = json.loads(lines[-2][len("data: ") :])["usage"]
    assert usage["completion_tokens"] >= 1 and usage["total_tokens"] > usage["completion_tokens"]
    assert "".join(json.loads(line[6:])["choices"][0]["text"] for line in lines[:-2]) == "five"


@pytest.mark.parametrize(
    "kwargs, param, words",
    [
        ({"max_tokens": 100000}, "max_tokens", "100000; at most"),
        ({"temperature": -1}, "temperature", "must be finite and >= 0"),
        ({"top_p": 0.5}, "top_p", "only with sampling"),
        ({"seed": -1, "temperature": 0.5}, "seed", "-1; 0 to 18446744073709551615"),
        ({"n": 3, "temperature": 0.7}, "n", "set temperature to 0"),
        ({"n": 99}, "n", "99; at most"),
        ({"n": 2, "stream": True}, "n", "beam search does not stream"),
        ({"stop": ["x"] * 9}, "stop", "9 sequences; at most 8"),
        ({"logprobs": 2}, "logprobs", "not served by attnserve"),
        ({"presence_penalty": 2.5}, "presence_penalty", "2.5; must be in [-2, 2]"),
        ({"frequency_penalty": -3}, "frequency_penalty", "-3; must be in [-2, 2]"),
        ({"extra_body": {"min_p": 0.1}}, "min_p", "only with sampling"),
        ({"extra_body": {"min_p": 1.0}, "temperature": 0.5}, "min_p", "1; must be in [0, 1)"),
        ({"n": 2, "presence_penalty": 1.0}, "presence_penalty", "not with beam search (num_beams 2)"),
        ({"prompt": ["3", ""]}, "prompt[1]", "prompt[1]: empty text"),
        ({"prompt": []}, "prompt", "empty; send 1 to 32 texts"),
        ({"model": "minilm"}, "model", "'minilm' is an embedding model"),
    ],
)
def test_completion_refusals_name_the_field_and_the_limit(sdk, kwargs, param, words):
    kwargs = {"model": "numbers", "prompt": "3", **kwargs}
    code, body = refusal(lambda: sdk.completions.create(**kwargs))
    assert code == 400 and body["param"] == param and words in body["message"], body


def test_unknown_fields_and_wrong_types_are_refused_by_name(base_url):
    for body, param in (({"input": "x", "color": "red"}, "color"), ({"input": 5}, "input"), ({}, "input")):
        response = http().post(f"{base_url}/v1/embeddings", json=body)
        assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text
    response = http().post(
        f"{base_url}/v1/embeddings", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400


def test_a_body_over_the_limit_is_413_and_the_server_serves_on(base_url, sdk):
    big = json.dumps({"input": ["word " * 1000] * 1000}).encode()  # about 5 MB, over the 4 MiB default
    response = http().post(f"{base_url}/v1/embeddings", content=big, headers={"content-type": "application/json"})
    assert response.status_code == 413 and "at most 4194304" in response.json()["error"]["message"]
    assert len(sdk.embeddings.create(model="minilm", input="still serving").data) == 1


def test_health_and_openapi(base_url):
    assert http().get(f"{base_url}/health").json() == {"status": "ok"}
    paths = http().get(f"{base_url}/openapi.json").json()["paths"]
    assert {"/v1/embeddings", "/v1/completions", "/v1/models"} <= set(paths)


FIELDS = st.sampled_from(
    [
        "input",
        "model",
        "encoding_format",
        "dimensions",
        "user",
        "prompt",
        "max_tokens",
        "temperature",
        "n",
        "stop",
        "stream",
        "seed",
        "top_p",
        "source_language",
        "target_language",
        "prompt_name",
        "input_type",
        "truncation_direction",
    ]
)


@given(path=st.sampled_from(["/v1/embeddings", "/v1/completions"]), body=st.dictionaries(FIELDS, JSON, max_size=5))
def test_no_body_gets_a_server_error_and_the_server_serves_on(base_url, path, body):
    response = http().post(f"{base_url}{path}", json=body, timeout=60)
    assert response.status_code in (200, 400, 404), response.text
    if response.status_code != 200:
        error = response.json()["error"]
        assert error["message"] and error["type"] == "invalid_request_error"
    assert http().get(f"{base_url}/health").status_code == 200


def test_bearer_tokens_guard_the_api_but_not_health(minilm_dir, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret\n")
    server = ServerThread([minilm_dir], auth_token_file=str(tokens))
    try:
        url = f"http://127.0.0.1:{server.server.http.port}"
        with openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0) as wrong:
            code, body = refusal(lambda: wrong.embeddings.create(model="minilm", input="x"))
        assert code == 401 and "Bearer" in body["message"] and body["type"] == "authentication_error"
        assert http().post(f"{url}/v1/embeddings", json={"input": "x"}).status_code == 401
        with openai.OpenAI(base_url=f"{url}/v1", api_key="s3cret", max_retries=0) as right:
            assert len(right.embeddings.create(model="minilm", input="x").data[0].embedding) > 0
        assert http().get(f"{url}/health").status_code == 200
    finally:
        server.close()


def test_draining_turns_calls_away_with_503(minilm_dir):
    server = ServerThread([minilm_dir])
    try:
        url = f"http://127.0.0.1:{server.server.http.port}"
        assert http().post(f"{url}/v1/embeddings", json={"input": "before"}).status_code == 200
        server.loop.call_soon_threadsafe(server.server.core.start_draining)
        wait_until(lambda: http().get(f"{url}/health").status_code == 503, what="health to turn 503")
        response = http().post(f"{url}/v1/embeddings", json={"input": "after"})
        assert response.status_code == 503 and "shutting down" in response.json()["error"]["message"]
        assert response.json()["error"]["type"] == "server_error"
    finally:
        server.close()
