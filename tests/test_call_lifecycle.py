"""One call lifecycle for every front door (service/core/calls/lifecycle.py): each call, refused or answered, before
admission or after, gets one record (counted, timed, logged), and every door refuses the same request with
the same message, its fields named as its callers name them."""

from __future__ import annotations

import asyncio
import logging

import grpc
import openai
import pytest

from service.core.calls.admission import Admission
from service.core.calls.lifecycle import Refused, run_call
from service.errors import InvalidArgument, Overloaded, ServiceError
from service.grpc_api.call_handling import GRPC_STATUSES as GRPC
from service.grpc_api.pb import inference_pb2 as pb
from service.grpc_api.pb import inference_pb2_grpc as pb_grpc
from service.grpc_api.pb import open_inference_pb2 as oip
from service.grpc_api.pb import open_inference_pb2_grpc as oip_grpc
from service.http_api.call_handling import HTTP_STATUSES as HTTP
from service.ops.call_record import AccessLog
from service.ops.metrics import Metrics
from testing.server_thread import ServerThread

from .http_client import http


def counted(metrics: Metrics, rpc: str, code: str, model: str = "") -> tuple[float, float]:
    """(calls counted, durations observed) for rpc, model and code."""
    registry = metrics.registry
    calls = registry.get_sample_value("attnserve_requests_total", {"rpc": rpc, "model": model, "code": code})
    timed = registry.get_sample_value("attnserve_request_duration_seconds_count", {"rpc": rpc, "model": model})
    return calls or 0.0, timed or 0.0


def access_lines(caplog, rpc: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "attnserve.access" and r.rpc == rpc]


# The lifecycle itself, with no transport: admission, records, refusals in a door's statuses.


def lifecycle(admission: Admission, metrics: Metrics, table=GRPC, names=None):
    return run_call(admission, metrics, "Embed", "id-1", table, names or {})


def ready_admission(limit: int = 4) -> Admission:
    admission = Admission(limit)
    admission.loaded = True
    return admission


def test_a_refusal_leaves_as_the_doors_status_with_its_field_renamed_and_the_record_closed():
    metrics, admission = Metrics(), ready_admission()

    async def refused():
        async with lifecycle(admission, metrics, HTTP, {"params.max_new_tokens": "max_tokens"}):
            assert admission.in_flight == 1
            raise InvalidArgument("params.max_new_tokens: 9; at most 8", "params.max_new_tokens")

    with pytest.raises(Refused) as error:
        asyncio.run(refused())
    refusal = error.value.refusal
    assert (refusal.status, refusal.field, refusal.message) == (
        (400, "invalid_request_error"),
        "max_tokens",
        "max_tokens: 9; at most 8",
    )
    assert refusal.kind == "InvalidArgument" and admission.in_flight == 0
    assert counted(metrics, "Embed", "400") == (1, 1)


def test_admission_refuses_before_the_block_runs_and_the_refusal_is_recorded():
    metrics, admission = Metrics(), ready_admission(limit=1)
    admission.in_flight = 1  # another call holds the only place
    ran = []

    async def one_too_many():
        async with lifecycle(admission, metrics):
            ran.append("block")

    with pytest.raises(Refused) as error:
        asyncio.run(one_too_many())
    assert error.value.refusal.status == grpc.StatusCode.RESOURCE_EXHAUSTED and ran == []
    assert "max_concurrent_requests 1" in error.value.refusal.message
    assert admission.in_flight == 1  # the refused call never counted itself in
    assert counted(metrics, "Embed", "RESOURCE_EXHAUSTED") == (1, 1)


def test_a_failure_is_logged_and_refused_as_internal_without_its_details(caplog):
    metrics, admission = Metrics(), ready_admission()

    async def failing():
        async with lifecycle(admission, metrics):
            raise KeyError("a secret detail")

    with caplog.at_level("ERROR", logger="attnserve.calls"), pytest.raises(Refused) as error:
        asyncio.run(failing())
    assert error.value.refusal.status == grpc.StatusCode.INTERNAL
    assert error.value.refusal.message == "Embed: internal error (see the server log)"
    assert "a secret detail" in caplog.text and counted(metrics, "Embed", "INTERNAL") == (1, 1)


def test_a_caller_that_goes_away_is_recorded_as_cancelled_unless_the_call_said_why():
    metrics, admission = Metrics(), ready_admission()

    async def cancelled(code_first: str | None):
        async with lifecycle(admission, metrics, HTTP) as call:
            if code_first:
                call.record.code = code_first
            raise asyncio.CancelledError

    for first in (None, "504"):
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(cancelled(first))
    assert counted(metrics, "Embed", "499")[0] == 1 and counted(metrics, "Embed", "504")[0] == 1
    assert admission.in_flight == 0


def test_a_held_call_stays_admitted_until_its_stream_closes_it():
    metrics, admission = Metrics(), ready_admission()

    async def held():
        async with lifecycle(admission, metrics, HTTP) as call:
            call.hold()
        assert admission.in_flight == 1 and not call.record.closed
        call.close()
        call.close()  # once only
        return call

    call = asyncio.run(held())
    assert call.record.closed and admission.in_flight == 0 and counted(metrics, "Embed", "200") == (1, 1)


def test_a_share_of_answered_calls_is_logged_and_every_refused_one_and_all_are_counted(caplog):
    """access_log_share 0.25: one answered call in four gets its line, evenly; refused calls always."""
    admission, metrics = ready_admission(), Metrics()
    access = AccessLog(0.25)

    async def calls():
        for i in range(12):
            try:
                async with run_call(admission, metrics, "Embed", f"id-{i}", GRPC, {}, access=access):
                    if i % 3 == 0:
                        raise InvalidArgument("input", "input: empty")
            except Refused:
                pass

    with caplog.at_level(logging.INFO, logger="attnserve.access"):
        asyncio.run(calls())
    lines = access_lines(caplog, "Embed")
    refused = [r.request_id for r in lines if r.code == "INVALID_ARGUMENT"]
    answered = [r.request_id for r in lines if r.code == "OK"]
    assert refused == ["id-0", "id-3", "id-6", "id-9"] and answered == ["id-5", "id-11"]  # 8 answered: 4th, 8th
    assert counted(metrics, "Embed", "OK") == (8.0, 12.0) and counted(metrics, "Embed", "INVALID_ARGUMENT")[0] == 4


def test_a_domain_error_kind_the_table_lacks_is_internal():
    assert GRPC.status(Overloaded("full")) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert HTTP.status(Overloaded("full")) == (429, "rate_limit_error")

    class Unheard(ServiceError):  # a kind no table names
        pass

    assert GRPC.status(Unheard("x")) == grpc.StatusCode.INTERNAL and HTTP.status(Unheard("x"))[0] == 500


# Real servers: calls turned away before admission are calls too.


@pytest.fixture(scope="module")
def guarded(minilm_dir, tmp_path_factory):
    tokens = tmp_path_factory.mktemp("tokens") / "tokens"
    tokens.write_text("s3cret\n")
    server = ServerThread([minilm_dir], auth_token_file=str(tokens))
    yield server
    server.close()


def test_unauthenticated_calls_get_a_record_a_duration_and_an_access_line(guarded, caplog):
    caplog.set_level("INFO", logger="attnserve.access")
    metrics = guarded.server.metrics
    before = {
        (rpc, code): counted(metrics, rpc, code)
        for rpc, code in (("Embed", "UNAUTHENTICATED"), ("http.embeddings", "401"), ("http.unknown", "401"))
    }
    stub = pb_grpc.InferenceStub(guarded.channel())
    metadata = [("authorization", "Bearer wrong"), ("x-request-id", "grpc-refused")]
    with pytest.raises(grpc.RpcError) as error:
        stub.Embed(pb.EmbedRequest(inputs=["refused"]), metadata=metadata, timeout=5)
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED and "Bearer" in error.value.details()
    url = f"http://127.0.0.1:{guarded.server.http.port}"
    with openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0) as sdk:
        with pytest.raises(openai.AuthenticationError) as refused:
            sdk.embeddings.create(model="minilm", input="x", extra_headers={"x-request-id": "http-refused"})
    assert refused.value.response.headers["x-request-id"] == "http-refused"
    assert refused.value.body["code"] == "Unauthenticated"
    assert http().post(f"{url}/not/a/route", json={}).status_code == 401
    for rpc, code in before:
        calls, timed = counted(metrics, rpc, code)
        assert (calls, timed) == (before[rpc, code][0] + 1, before[rpc, code][1] + 1), rpc
    lines = {r.request_id: r for r in [*access_lines(caplog, "Embed"), *access_lines(caplog, "http.embeddings")]}
    assert lines["grpc-refused"].code == "UNAUTHENTICATED" and lines["grpc-refused"].seconds >= 0
    assert lines["http-refused"].code == "401"
    assert len(access_lines(caplog, "http.unknown")) == 1  # an unknown path: one label, not the path


def test_bodies_refused_before_their_route_runs_are_calls_too(guarded, caplog):
    caplog.set_level("INFO", logger="attnserve.access")
    metrics, url = guarded.server.metrics, f"http://127.0.0.1:{guarded.server.http.port}"
    headers = {"authorization": "Bearer s3cret"}
    before = counted(metrics, "http.embeddings", "400"), counted(metrics, "http.embeddings", "413")
    not_valid = http().post(f"{url}/v1/embeddings", json={"input": 3}, headers=headers)
    assert not_valid.status_code == 400 and not_valid.json()["error"]["param"] == "input"
    too_large = http().post(f"{url}/v1/embeddings", content=b"x" * (5 << 20), headers=headers)
    assert too_large.status_code == 413 and "max_message_bytes" in too_large.json()["error"]["message"]
    after = counted(metrics, "http.embeddings", "400"), counted(metrics, "http.embeddings", "413")
    assert [a[0] - b[0] for a, b in zip(after, before)] == [1, 1]
    assert {r.code for r in access_lines(caplog, "http.embeddings")} >= {"400", "413"}
    assert too_large.headers["x-request-id"] and not_valid.headers["x-request-id"]


# Every door refuses alike.


def kserve_refusal(served, model: str, text: bytes, **parameters) -> str:
    stub = oip_grpc.GRPCInferenceServiceStub(served.channel())
    request = oip.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="text", datatype="BYTES", shape=[1])
    tensor.contents.bytes_contents.append(text)
    for name, value in parameters.items():
        request.parameters[name].int64_param = value
    with pytest.raises(grpc.RpcError) as error:
        stub.ModelInfer(request)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return error.value.details()


def openai_refusal(served, call) -> str:
    url = f"http://127.0.0.1:{served.server.http.port}/v1"
    with openai.OpenAI(base_url=url, api_key="none", max_retries=0) as sdk:
        with pytest.raises(openai.BadRequestError) as error:
            call(sdk)
    return error.value.body["message"]


@pytest.mark.parametrize(
    "openai_call, kserve, problem",
    [
        (
            lambda sdk: sdk.embeddings.create(model="minilm", input="x", dimensions=0),
            ("minilm", {"dimensions": 0}),
            "0; 1 to 384 for model 'minilm'",
        ),
        (
            lambda sdk: sdk.embeddings.create(model="minilm", input="x", dimensions=-2),
            ("minilm", {"dimensions": -2}),
            "-2; 1 to 384 for model 'minilm'",
        ),
        (
            lambda sdk: sdk.completions.create(model="numbers", prompt="12", max_tokens=-1),
            ("numbers", {"max_new_tokens": -1}),
            "-1; at least 0 (0: unset)",
        ),
        (
            lambda sdk: sdk.completions.create(model="numbers", prompt="12", extra_body={"top_k": -1}, temperature=1),
            ("numbers", {"top_k": -1}),
            "-1; at least 0 (0: unset)",
        ),
    ],
)
def test_every_door_refuses_the_same_request_with_the_same_message(served, openai_call, kserve, problem):
    from_openai = openai_refusal(served, openai_call)
    model, parameters = kserve
    from_kserve = kserve_refusal(served, model, b"12", **parameters)
    assert from_openai.split(": ", 1)[1] == from_kserve.split(": ", 1)[1] == problem
    (name,) = parameters
    assert from_kserve.startswith(f"parameters.{name}: ")


def test_answers_per_prompt_are_checked_by_the_core(served):
    assert openai_refusal(served, lambda sdk: sdk.completions.create(model="numbers", prompt="12", n=0)) == (
        "n: 0; at least 1"
    )
    sampled = openai_refusal(
        served, lambda sdk: sdk.completions.create(model="numbers", prompt="1", n=2, temperature=1)
    )
    assert sampled.startswith("n: more than 1 returns the n best beams, which does not sample")
    assert kserve_refusal(served, "numbers", b"12", num_return_sequences=-1) == (
        "parameters.num_return_sequences: -1; at least 0 (0: unset)"
    )
