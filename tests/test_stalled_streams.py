"""Streams whose clients stop reading, on every streaming door: gRPC GenerateStream, KServe v2
ModelStreamInfer and the HTTP API's server-sent events. With more answer outstanding than the socket
buffers and flow-control windows hold, the server gives each stream up after stream_write_timeout (1 s
here), records it (DEADLINE_EXCEEDED on gRPC; 504 on HTTP, whose 200 already went, so the connection is
reset), counts it in attnserve_streams_stalled_total, and releases what it held (running calls, cache
rows, admission) while the client still holds its end; others are served all along."""

from __future__ import annotations

import json
import socket

import grpc
import openai
import pytest

from service.grpc_api.pb import inference_pb2 as pb
from service.grpc_api.pb import inference_pb2_grpc as pb_grpc
from service.grpc_api.pb import open_inference_pb2 as oip
from service.grpc_api.pb import open_inference_pb2_grpc as oip_grpc
from testing.server_thread import ServerThread

from .server_state import assert_back_to, baseline
from .waits import wait_until, wait_while_progressing

TIMEOUT = 1.0
NUMBERS = "nine hundred and ninety-nine"
LONGEST = 63  # the numbers model's most new tokens
# An HTTP/2 window of 256 bytes: an unread gRPC stream blocks the server's writes after a few messages.
TINY_WINDOW = [("grpc.http2.lookahead_bytes", 256), ("grpc.http2.bdp_probe", 0)]
# SSE: a stream that is behind merges its tokens into fewer events, so what the answer comes to depends
# on how far the engine outruns the writer. With 1,024 prompts the stall came once 37-46k of their 64k
# tokens were made, and on a busy machine all of them were, merged into an answer the ~3 MB the sockets
# buffer held (1 run of 2): never a stall. With 4,096 it comes at 35-47k of 258k, busy machine or not.
PROMPTS = 4096


@pytest.fixture(scope="module")
def streaming_server(numbers_dir):
    server = ServerThread(
        [numbers_dir],
        stream_write_timeout=TIMEOUT,
        max_client_batch_size=PROMPTS,
        max_waiting_sequences=2 * PROMPTS,
        max_running_sequences=256,
        stream_messages_per_second=0,  # an event for every token: the SSE answer must outgrow the buffers
    )
    yield server
    server.close()


def sample(streaming_server, name: str, **labels) -> float:
    return streaming_server.metrics_registry.get_sample_value(name, labels) or 0.0


def stalled(streaming_server, rpc: str) -> float:
    return sample(streaming_server, "attnserve_streams_stalled_total", rpc=rpc, model="numbers")


def released(streaming_server) -> dict:
    """What stalled streams could hold: calls admitted or running, sequences waiting or holding rows."""
    scheduler = streaming_server.engine_core.registry.models["numbers"].scheduler

    def state() -> dict:
        return {
            "admitted": streaming_server.server.core.admission.in_flight,
            "running": sample(streaming_server, "attnserve_requests_running", model="numbers"),
            "sequences": len(scheduler.waiting) + scheduler.running + scheduler.cache.used,
            "reserved tokens": scheduler.cache.reserved_tokens,
        }

    return streaming_server.call_and_wait(state)


def assert_released(streaming_server) -> None:
    wait_until(
        lambda: not any(released(streaming_server).values()), what=f"everything released: {released(streaming_server)}"
    )


def others_are_served(streaming_server) -> None:
    assert streaming_server.stub().Generate(pb.GenerateRequest(input=NUMBERS), timeout=30).text == "999"


def test_generate_stream(streaming_server):
    before, already = baseline(streaming_server), stalled(streaming_server, "GenerateStream")
    exceeded = sample(
        streaming_server, "attnserve_requests_total", rpc="GenerateStream", model="numbers", code="DEADLINE_EXCEEDED"
    )
    channel = grpc.insecure_channel(streaming_server.target, options=TINY_WINDOW)
    request = pb.GenerateRequest(input=NUMBERS, params=pb.GenerationParams(ignore_eos=True, max_new_tokens=LONGEST))
    # The client's deadline is far off: only the server's giving up can end these in time.
    streams = [pb_grpc.InferenceStub(channel).GenerateStream(request, timeout=300) for _ in range(20)]
    wait_until(lambda: stalled(streaming_server, "GenerateStream") - already == 20, what="20 streams given up")
    assert_released(streaming_server)
    codes = sample(
        streaming_server, "attnserve_requests_total", rpc="GenerateStream", model="numbers", code="DEADLINE_EXCEEDED"
    )
    assert codes - exceeded == 20
    others_are_served(streaming_server)
    for stream in streams:
        stream.cancel()
    channel.close()
    assert_back_to(streaming_server, before)


def stream_infer_requests(count: int):
    for i in range(count):
        request = oip.ModelInferRequest(model_name="numbers", id=str(i))
        text = request.inputs.add(name="text", datatype="BYTES", shape=[1])
        text.contents.bytes_contents.append(NUMBERS.encode())
        request.parameters["stream"].bool_param = True
        request.parameters["ignore_eos"].bool_param = True
        request.parameters["max_new_tokens"].int64_param = LONGEST
        yield request


def test_model_stream_infer(streaming_server):
    """Each request on the stream is a call: all 20 in progress are given up with the stream."""
    before, already = baseline(streaming_server), stalled(streaming_server, "ModelStreamInfer")
    labels = {"rpc": "ModelStreamInfer", "model": "numbers", "code": "DEADLINE_EXCEEDED"}
    exceeded = sample(streaming_server, "attnserve_requests_total", **labels)
    channel = grpc.insecure_channel(streaming_server.target, options=TINY_WINDOW)
    answers = oip_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(stream_infer_requests(20), timeout=300)
    wait_until(
        lambda: stalled(streaming_server, "ModelStreamInfer") - already == 20, what="the stream's 20 requests given up"
    )
    assert_released(streaming_server)
    assert sample(streaming_server, "attnserve_requests_total", **labels) - exceeded == 20
    others_are_served(streaming_server)
    answers.cancel()
    channel.close()
    assert_back_to(streaming_server, before)


def test_server_sent_events(streaming_server):
    """A raw socket with a 4 KiB receive buffer asks for 4096 prompts' events and reads none of them."""
    before, already = baseline(streaming_server), stalled(streaming_server, "http.completions")
    given_up = sample(streaming_server, "attnserve_requests_total", rpc="http.completions", model="numbers", code="504")
    body = json.dumps(
        {"model": "numbers", "prompt": [NUMBERS] * PROMPTS, "max_tokens": LONGEST, "ignore_eos": True, "stream": True}
    ).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: it sets the window
    client.connect(("127.0.0.1", streaming_server.server.http.port))
    client.sendall(head + body)
    # The stall comes once megabytes of events are out, later the busier the machine: wait while tokens
    # are made (a server that never gives the stream up still fails once they stop).
    wait_while_progressing(
        lambda: stalled(streaming_server, "http.completions") - already == 1,
        lambda: sample(streaming_server, "attnserve_generated_tokens_total", model="numbers"),
        what="the event stream given up",
    )
    assert_released(streaming_server)
    assert (
        sample(streaming_server, "attnserve_requests_total", rpc="http.completions", model="numbers", code="504")
        == given_up + 1
    )
    with openai.OpenAI(
        base_url=f"http://127.0.0.1:{streaming_server.server.http.port}/v1", api_key="-", max_retries=0
    ) as sdk:
        assert sdk.completions.create(model="numbers", prompt=NUMBERS).choices[0].text == "999"
    others_are_served(streaming_server)
    # The server reset the connection (nothing it still held is sent): the client's next reads end in the
    # reset, well short of the whole answer.
    client.settimeout(30)
    received, reset = 0, False
    try:
        while chunk := client.recv(1 << 16):
            received += len(chunk)
    except ConnectionResetError:
        reset = True
    client.close()
    assert reset and received < PROMPTS * LONGEST * 150, received
    assert_back_to(streaming_server, before)
