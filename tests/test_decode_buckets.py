"""Bucketed decode steps, as CUDA graphs replay them (runner/decode_buckets.py), on the CPU: padding rows,
a fixed total_length and fixed buffers give the tokens and the cache of eager steps, over rows that join
and leave, lengths that differ, and a source capacity that grows."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from model.bundled.numbers import pair, sample_number
from modeldir.tokenizer import pad_batch
from service.grpc_api.pb import inference_pb2 as pb
from service.runner.decode_buckets import DecodeBuckets, buckets_for
from testing.server_thread import ServerThread

from .numbers_steps import generation


class Holder:
    def __init__(self, text: str, token: int):
        self.row, self.text, self.token = None, text, token


# At these steps sequences join (their texts) or the holder at an index leaves: rows go 3, 5, 4, 3, 1, 2.
EVENTS = {
    0: ["312405", "12", "7"],
    3: ["99", "123456789"],
    6: 1,
    9: 0,
    10: 0,
    11: 0,
    13: ["4" * 30],  # a long source: the cross capacity grows from 16
}


def drive(runner, cache, tokenizer, step) -> tuple[list[dict], dict[str, list[np.ndarray]]]:
    """EVENTS over 18 steps of `step(tokens, lengths, layout, rows) -> next tokens` -> each step's token
    by text, and each remaining sequence's filled self-attention K/V by text."""
    holders, tokens_by_step = [], []
    for t in range(18):
        event = EVENTS.get(t)
        if isinstance(event, list):
            encoded = [e.ids for e in tokenizer.encode(event)]
            joined = [Holder(text, 1) for text in event]  # 1: the start token
            for holder, ids in zip(joined, encoded):
                cache.allocate(holder, len(ids), 20)
            ids, mask = pad_batch(encoded, 0)
            cache.write_cross(runner.encode(ids, mask).cross, [(h.row, i) for i, h in enumerate(joined)])
            holders += joined
        elif event is not None:
            cache.release(holders.pop(event))
        n = cache.used
        tokens = np.array([[h.token] for h in cache.holders], np.int64)
        chosen = step(tokens, cache.lengths[:n].copy(), cache.cross_layout(n), n)
        cache.advance(n)
        for holder, token in zip(cache.holders, chosen.tolist()):
            holder.token = token
        tokens_by_step.append({h.text: h.token for h in cache.holders})
    filled = {h.text: [b.numpy()[h.row, :, : cache.lengths[h.row]] for b in cache.memory.self_buffers] for h in holders}
    return tokens_by_step, filled


def test_buckets_are_powers_of_two_and_the_cache_s_rows():
    assert buckets_for(1) == [1]
    assert buckets_for(6) == [1, 2, 4, 6]
    assert buckets_for(64) == [1, 2, 4, 8, 16, 32, 64]
    assert buckets_for(1000) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]


def test_bucketed_steps_give_the_tokens_and_the_cache_of_eager_steps(numbers_dir):
    runner, eager_cache, tokenizer = generation(numbers_dir, 8, 24)

    def eager(tokens, lengths, layout, rows):
        return runner.step(tokens, lengths, layout, [], eager_cache.memory, rows).next_tokens

    expected, expected_filled = drive(runner, eager_cache, tokenizer, eager)

    _, cache, _ = generation(numbers_dir, 8, 24)
    cache.shrinks = False
    buckets = DecodeBuckets(runner, cache.memory, pad_id=0)
    used, graphs = set(), set()

    def bucketed(tokens, lengths, layout, rows):
        used.add(buckets.bucket(rows).rows)
        out = buckets.step(tokens, lengths, layout, rows)
        graphs.add(buckets.graph_id(buckets.bucket(rows)))
        # a row's token, length, source length and two slots; its argmax back
        assert out.sent == buckets.bucket(rows).rows * 32 and out.fetched == buckets.bucket(rows).rows * 8
        return out.next_tokens

    got, filled = drive(runner, cache, tokenizer, bucketed)
    assert got == expected
    assert any(len(set(step.values())) > 1 for step in got)  # the rows differ, so a mix-up would show
    assert used == {1, 2, 4, 8} and buckets.bucketed_steps == 18
    assert buckets.capacities == [16, 32] and cache.source_capacity == 32
    assert len(graphs) == 4 + 1  # one id per bucket and capacity: 4 buckets at 16, then 4 rows at 32
    assert filled.keys() == expected_filled.keys() == {"123456789", "4" * 30}
    for text, layers in filled.items():
        for got_kv, want_kv in zip(layers, expected_filled[text]):
            np.testing.assert_allclose(got_kv, want_kv, atol=1e-5)


def test_a_cache_under_graphs_keeps_its_capacity_when_it_empties(numbers_dir):
    _, cache, _ = generation(numbers_dir, 4, 24)
    cache.shrinks = False
    holder = Holder("x", 1)
    cache.allocate(holder, 20, 5)
    assert cache.source_capacity == 32
    cache.release(holder)
    assert cache.source_capacity == 32
    cache.shrinks = True  # as without graphs
    cache.allocate(holder, 20, 5)
    cache.release(holder)
    assert cache.source_capacity == 16


def test_a_server_with_graphs_on_answers_as_one_without(served, numbers_dir):
    """`--cuda-graphs` on the CPU buckets the greedy steps (nothing is captured there): 24 concurrent greedy
    calls, and sampled and beam calls among them (steps with logit rows run eager), answer exactly as the
    default server does."""
    rng = random.Random(5)
    inputs = [pair(sample_number(rng), to_digits=bool(i % 2))[0] for i in range(24)]
    sampled = pb.GenerationParams(temperature=0.8, seed=7, max_new_tokens=12)
    beams = pb.GenerationParams(num_beams=3)

    def answers(server) -> list:
        barrier = threading.Barrier(len(inputs) + 2)

        def call(request):
            stub = server.stub()
            barrier.wait()
            return stub.Generate(request, timeout=60)

        requests = [pb.GenerateRequest(input=text) for text in inputs]
        requests += [pb.GenerateRequest(input="4056", params=sampled), pb.GenerateRequest(input="77", params=beams)]
        with ThreadPoolExecutor(len(requests)) as pool:
            return [(r.text, list(r.token_ids), r.finish_reason) for r in pool.map(call, requests)]

    graphed = ServerThread([numbers_dir], cuda_graphs=True)
    try:
        got = answers(graphed)
        scheduler = graphed.engine_core.registry.models["numbers"].scheduler
        assert scheduler.buckets is not None and 0 < scheduler.buckets.bucketed_steps < scheduler.steps_run
    finally:
        graphed.close()
    assert got == answers(served)


def test_a_bucketed_step_that_fails_turns_graphs_off_and_the_step_runs_eager(numbers_dir):
    """Should ONNX Runtime fail to capture or replay a graph on a device, the server goes on eager: the
    call that met the failure gets its answer, and later steps do not try the buckets again."""
    graphed = ServerThread([numbers_dir], cuda_graphs=True)
    try:
        stub = graphed.stub()
        expected = stub.Generate(pb.GenerateRequest(input="312405"), timeout=60).text
        scheduler = graphed.engine_core.registry.models["numbers"].scheduler
        buckets, tried = scheduler.buckets, []

        def fails(*args):
            tried.append(args[-1])
            raise RuntimeError("capture failed (injected)")

        buckets.step = fails
        assert stub.Generate(pb.GenerateRequest(input="312405"), timeout=60).text == expected
        assert str(buckets.failed) == "capture failed (injected)" and len(tried) == 1
        assert stub.Generate(pb.GenerateRequest(input="12"), timeout=60).text == "twelve" and len(tried) == 1
    finally:
        graphed.close()
