"""Generation over gRPC: a real server on port 0 with the bundled numbers model, real channels."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import grpc
import pytest

from model.bundled.numbers import pair, sample_number
from service.engine.sequence import GenerationParams
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .waits import wait_until

NUMBERS_FULL = (
    "nine hundred and ninety-nine million, nine hundred and ninety-nine thousand, nine hundred and ninety-nine"
)


def scheduler(server):
    return server.engine_core.registry.models["numbers"].scheduler


def generate(stub, text: str, **params) -> pb.GenerateResponse:
    return stub.Generate(pb.GenerateRequest(input=text, params=pb.GenerationParams(**params)), timeout=30)


def code_and_details(call):
    with pytest.raises(grpc.RpcError) as error:
        call()
    return error.value.code(), error.value.details()


def test_translates_both_ways(served):
    stub = served.stub()
    response = generate(stub, "312405")
    assert response.text == "three hundred and twelve thousand, four hundred and five"
    assert response.finish_reason == pb.FINISH_REASON_EOS and response.model == "numbers"
    assert response.usage.prompt_tokens == 8 and response.usage.generated_tokens == len(response.token_ids) == 10
    assert 0 < response.usage.time_to_first_token_seconds < 5
    assert generate(stub, "three hundred and twelve thousand, four hundred and five").text == "312405"


def test_batched_greedy_equals_each_request_alone(served):
    rng = random.Random(3)
    inputs = [pair(sample_number(rng), to_digits=bool(i % 2))[0] for i in range(32)]
    stub = served.stub()
    alone = [generate(stub, text) for text in inputs]
    scheduler(served).largest_step = 0
    barrier = threading.Barrier(32)

    def concurrent(text):
        own = served.stub()
        barrier.wait()
        return generate(own, text)

    with ThreadPoolExecutor(32) as pool:
        together = list(pool.map(concurrent, inputs))
    assert scheduler(served).largest_step >= 8, "the requests did not share decode steps"
    for text, a, b in zip(inputs, alone, together):
        assert list(a.token_ids) == list(b.token_ids) and a.text == b.text, text
        assert b.text == pair(int(text) if text.isdigit() else int(b.text), to_digits=not text.isdigit())[1]


def test_stream_carries_the_same_tokens_and_ends_with_the_reason(served):
    stub = served.stub()
    messages = list(stub.GenerateStream(pb.GenerateRequest(input="999999999"), timeout=30))
    assert "".join(m.text for m in messages) == NUMBERS_FULL
    unary = generate(stub, "999999999")
    assert [t for m in messages for t in m.token_ids] == list(unary.token_ids)
    assert all(m.finish_reason == pb.FINISH_REASON_UNSPECIFIED for m in messages[:-1])
    assert messages[-1].finish_reason == pb.FINISH_REASON_EOS and messages[-1].usage.generated_tokens == 16
    # One message a token and the last, or fewer when the client was behind; never one without news.
    assert 2 <= len(messages) <= 17 and all(m.token_ids for m in messages[:-1])


def test_a_caller_that_is_behind_takes_what_came_since_its_last_event_in_one(served):
    """The scheduler's events wait in the sequence: read one, let the rest be generated, read again."""
    model = served.engine_core.registry.models["numbers"]
    prompt = model.tokenizer.encode(["999999999"])[0].ids
    before = scheduler(served).steps_run

    async def behind():
        events = model.scheduler.generate(prompt, GenerationParams(max_new_tokens=40))
        first = await anext(events)
        while scheduler(served).running or scheduler(served).waiting:
            await asyncio.sleep(0)  # the scheduler's loop runs on this loop: let it finish the sequence
        rest = [event async for event in events]
        return first, rest

    first, rest = served.run(behind())
    assert len(first.token_ids) == 1 and len(rest) == 1 and rest[0].finish_reason == "eos"
    assert first.text + rest[0].text == NUMBERS_FULL and len(first.token_ids) + len(rest[0].token_ids) == 16
    assert scheduler(served).steps_run - before >= 16


def test_stop_sequences_cut_exactly(served):
    stub = served.stub()
    response = generate(stub, "999999999", stop=["thousand", "million"])
    assert response.text == NUMBERS_FULL[: NUMBERS_FULL.index("million")]
    assert response.finish_reason == pb.FINISH_REASON_STOP
    streamed = stub.GenerateStream(pb.GenerateRequest(input="999999999", params=pb.GenerationParams(stop=[", nine"])))
    assert "".join(m.text for m in streamed) == "nine hundred and ninety-nine million"


def test_max_new_tokens_ends_with_length(served):
    response = generate(served.stub(), "999999999", max_new_tokens=3)
    assert response.text == "nine hundred and" and response.finish_reason == pb.FINISH_REASON_LENGTH
    assert len(response.token_ids) == 3


def test_seeded_sampling_is_reproducible(served):
    stub = served.stub()
    params = dict(temperature=1.5, top_k=20, top_p=0.95, seed=1234, ignore_eos=True, max_new_tokens=24)
    first = generate(stub, "4711", **params)
    with ThreadPoolExecutor(4) as pool:  # also while sharing steps with others
        others = [pool.submit(generate, served.stub(), "88", max_new_tokens=30, ignore_eos=True) for _ in range(3)]
        again = generate(stub, "4711", **params)
        [f.result() for f in others]
    assert list(first.token_ids) == list(again.token_ids) and len(first.token_ids) == 24
    seeds = {tuple(generate(stub, "4711", **{**params, "seed": s}).token_ids) for s in range(5)}
    assert len(seeds) > 1


def test_the_sampling_graph_draws_the_hosts_tokens(numbers_dir):
    """--sampling-graph on (the graph on the CPU here, as on CUDA): the same seeded tokens as the host's
    draws, every rule on; the sampled rows drawn by the graph, from logits left where the step put them."""
    servers = {kind: ServerThread([numbers_dir], sampling_graph=kind) for kind in ("on", "off")}
    try:
        params = [
            dict(temperature=1.5, top_k=20, top_p=0.95, seed=s, ignore_eos=True, max_new_tokens=24) for s in (1, 2)
        ]
        params += [
            dict(temperature=0.8, min_p=0.05, repetition_penalty=1.3, seed=9, max_new_tokens=30),
            dict(
                temperature=1.2, presence_penalty=0.5, frequency_penalty=0.4, seed=5, ignore_eos=True, max_new_tokens=20
            ),
        ]
        answers = {
            kind: [list(generate(server.stub(), "4711", **p).token_ids) for p in params]
            for kind, server in servers.items()
        }
        assert answers["on"] == answers["off"] and len(answers["on"][0]) == 24
        graph = scheduler(servers["on"]).choice.device_sampler
        assert graph.drawn_rows >= 24 + 24 + 20 and scheduler(servers["off"]).choice.device_sampler is None
        greedy = generate(servers["on"].stub(), "4711", repetition_penalty=1.3)  # a penalized greedy row: the host's
        assert list(greedy.token_ids) == list(generate(servers["off"].stub(), "4711", repetition_penalty=1.3).token_ids)
    finally:
        for server in servers.values():
            server.close()


def test_cancelling_a_stream_frees_its_cache_row(served):
    stub = served.stub()
    stream = stub.GenerateStream(
        pb.GenerateRequest(input="7", params=pb.GenerationParams(ignore_eos=True, max_new_tokens=60))
    )
    for _, message in zip(range(5), stream):
        assert message.token_ids
    assert served.call_and_wait(lambda: scheduler(served).cache.used) == 1
    stream.cancel()
    wait_until(lambda: served.call_and_wait(lambda: scheduler(served).cache.used) == 0, what="the row is freed")
    assert served.call_and_wait(lambda: (scheduler(served).cache.used, scheduler(served).running)) == (0, 0)


def test_requests_that_do_not_fit_wait_then_finish(numbers_dir):
    """One row of the longest answer holds 64 decoder + 32 source positions: 192 tokens make two such rows
    (128 decoder positions), or four rows of answers up to 31 positions."""
    server = ServerThread([numbers_dir], kv_cache_tokens=192)
    try:
        cache = scheduler(server).cache
        assert (cache.rows_at_longest, cache.rows) == (2, 4)
        rng = random.Random(9)
        inputs = [str(sample_number(rng)) for _ in range(8)]
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda t: generate(server.stub(), t), inputs))
        assert [r.text for r in results] == [pair(int(t), to_digits=False)[1] for t in inputs]
        assert scheduler(server).largest_step == 2
        assert max(r.usage.queue_seconds for r in results) > 0.001  # some waited for a row
        assert max(len(r.token_ids) for r in results) < 30
        release = server.hold_model_thread()  # all 8 arrive before a step runs
        with ThreadPoolExecutor(8) as pool:  # answers of up to 30 tokens asked for: rows of 32 positions
            calls = [pool.submit(generate, server.stub(), t, max_new_tokens=30) for t in inputs]
            s = scheduler(server)
            wait_until(lambda: server.call_and_wait(lambda: len(s.waiting) + cache.used) == 8, what="all 8 arrived")
            release.set()
            short = [call.result() for call in calls]
        assert [r.text for r in short] == [r.text for r in results]
        assert s.largest_step == 4 and server.call_and_wait(lambda: cache.target_capacity) == 32
    finally:
        server.close()


@pytest.mark.parametrize(
    "request_, code, message",
    [
        (pb.GenerateRequest(model="nope", input="1"), grpc.StatusCode.NOT_FOUND, "model: 'nope' is not served here"),
        (
            pb.GenerateRequest(model="minilm", input="1"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "model: 'minilm' is an embedding model; Generate",
        ),
        (pb.GenerateRequest(input=""), grpc.StatusCode.INVALID_ARGUMENT, "input: empty text"),
        (
            pb.GenerateRequest(input="1" * 40),
            grpc.StatusCode.INVALID_ARGUMENT,
            "input: more than 32 tokens, the most model 'numbers' takes",
        ),
        (
            pb.GenerateRequest(input="1", params=pb.GenerationParams(max_new_tokens=64)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "params.max_new_tokens: 64; at most 63 for model 'numbers' (its cache rows hold 64 decoder positions)",
        ),
        (
            pb.GenerateRequest(input="1", params=pb.GenerationParams(temperature=-1)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "params.temperature: -1; must be finite and >= 0",
        ),
        (
            pb.GenerateRequest(input="1", params=pb.GenerationParams(top_p=1.5)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "params.top_p: 1.5; must be in (0, 1]",
        ),
        (
            pb.GenerateRequest(input="1", params=pb.GenerationParams(repetition_penalty=float("nan"))),
            grpc.StatusCode.INVALID_ARGUMENT,
            "params.repetition_penalty: nan; must be in [0.001, 1000] (1: none)",
        ),
        (
            pb.GenerateRequest(input="1", params=pb.GenerationParams(repetition_penalty=1e-30)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "params.repetition_penalty: 1e-30; must be in [0.001, 1000] (1: none)",
        ),
        (
            pb.GenerateRequest(input="1", params=pb.GenerationParams(presence_penalty=float("inf"))),
            grpc.StatusCode.INVALID_ARGUMENT,
            "params.presence_penalty: inf; must be in [-2, 2] (0: none)",
        ),
        (
            pb.GenerateRequest(input="1", params=pb.GenerationParams(frequency_penalty=-2.5)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "params.frequency_penalty: -2.5; must be in [-2, 2] (0: none)",
        ),
        (
            pb.GenerateRequest(input="1", params=pb.GenerationParams(min_p=0.2)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "params.min_p: only with sampling (temperature > 0)",
        ),
        (
            pb.GenerateRequest(input="1", params=pb.GenerationParams(temperature=1, min_p=float("nan"))),
            grpc.StatusCode.INVALID_ARGUMENT,
            "params.min_p: nan; must be in [0, 1) (0: unset)",
        ),
        (
            pb.GenerateRequest(input="1", params=pb.GenerationParams(stop=["a"] * 9)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "params.stop: 9 sequences; at most 8",
        ),
        (
            pb.GenerateRequest(input="1", params=pb.GenerationParams(stop=["ok", ""])),
            grpc.StatusCode.INVALID_ARGUMENT,
            "params.stop[1]: 0 characters; 1 to 64",
        ),
    ],
)
def test_bad_requests_are_refused(served, request_, code, message):
    steps = scheduler(served).steps_run
    for call in (served.stub().Generate, lambda r: list(served.stub().GenerateStream(r))):
        got, details = code_and_details(lambda: call(request_))
        assert got == code and message in details, details
    assert scheduler(served).steps_run == steps  # no model work for a refused call


def test_a_full_waiting_queue_answers_resource_exhausted(numbers_dir):
    server = ServerThread([numbers_dir], kv_cache_tokens=96, max_waiting_sequences=1)
    try:
        release = server.hold_model_thread()
        stub = server.stub()
        running = stub.Generate.future(pb.GenerateRequest(input="5"))  # takes the only row
        wait_until(lambda: server.call_and_wait(lambda: scheduler(server).cache.used) == 1, what="5 takes the row")
        waiting = stub.Generate.future(pb.GenerateRequest(input="6"))  # waits for it
        wait_until(lambda: server.call_and_wait(lambda: len(scheduler(server).waiting)) == 1, what="6 waits")
        # At once: waiting for room would wait for the held model thread (the timeout).
        code, details = code_and_details(lambda: stub.Generate(pb.GenerateRequest(input="7"), timeout=30))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "1 requests are waiting; the queue holds 1" in details
        release.set()
        assert running.result(timeout=30).text == "five" and waiting.result(timeout=30).text == "six"
    finally:
        server.close()


def test_cli_generate_streams_to_the_terminal(served):
    result = subprocess.run(
        [sys.executable, "-m", "cli", "generate", "312405", "--target", served.target],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "three hundred and twelve thousand, four hundred and five\n"
    assert result.stderr.startswith("[eos: 10 tokens, first after ")


def test_a_deadline_ends_the_call_and_frees_its_row(served):
    stub = served.stub()
    request = pb.GenerateRequest(input="8", params=pb.GenerationParams(ignore_eos=True, max_new_tokens=63))
    release = served.hold_model_thread()
    try:
        code, _ = code_and_details(lambda: stub.Generate(request, timeout=0.2))
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        release.set()
    wait_until(lambda: served.call_and_wait(lambda: scheduler(served).cache.used) == 0, what="the row is freed")
    assert served.call_and_wait(lambda: (scheduler(served).cache.used, scheduler(served).running)) == (0, 0)
    assert generate(stub, "8").text == "eight"  # and the server goes on


def test_a_unary_call_with_stop_sequences_gets_one_event(served):
    """Stop sequences are looked for token by token, but the caller is woken once, at the end."""
    model = served.engine_core.registry.models["numbers"]
    prompt = model.tokenizer.encode(["999999999"])[0].ids
    params = GenerationParams(max_new_tokens=40, stream=False, stop=("thousand",))

    async def unary():
        return [event async for event in model.scheduler.generate(prompt, params)]

    (event,) = served.run(unary())
    assert event.finish_reason == "stop" and event.text == NUMBERS_FULL[: NUMBERS_FULL.index("thousand")]


def test_streams_keep_to_the_servers_message_budget(served):
    """stream_messages_per_second 2 and one stream open: its messages are half a second apart, capped at a
    quarter second, so the tokens of the 16-token answer come in a few messages, the same tokens and text
    in all."""
    generation = served.server.core.generation
    budget, generation.stream_messages = generation.stream_messages, 2.0
    try:
        messages = list(served.stub().GenerateStream(pb.GenerateRequest(input="999999999"), timeout=30))
    finally:
        generation.stream_messages = budget
    assert "".join(m.text for m in messages) == NUMBERS_FULL and sum(len(m.token_ids) for m in messages) == 16
    assert len(messages) <= 4 and len(messages[0].token_ids) == 1  # the first token is never held back


def test_a_stream_s_messages_are_budget_apart_and_never_more_than_a_quarter_second(served):
    """By default the budget is the device's: 1,000 a second on the CPU (this server's), none on a GPU;
    spread over the streams open, up to a quarter second apart."""
    generation = served.server.core.generation
    model = served.engine_core.registry.get("numbers", "seq2seq", "test")
    assert generation.stream_messages == -1 and model.provider == "CPUExecutionProvider"
    assert generation.budget(model) == 1000.0
    assert generation.budget(SimpleNamespace(provider="CUDAExecutionProvider")) == 0.0
    kept = generation.streams_open
    try:
        for streams, interval in ((1, 0.001), (32, 0.032), (250, 0.25), (1024, 0.25)):
            generation.streams_open = streams
            assert generation.interval(1000.0) == pytest.approx(interval)
    finally:
        generation.streams_open = kept
