"""take_batch, the batching policy, as a pure function over waiting items."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from service.engine.batcher import BatchLimits, Item, split_by_length, take_batch


def items(lengths: list[int]) -> list[Item]:
    return [Item(ids=[7] * n, future=None, enqueued=float(i)) for i, n in enumerate(lengths)]


@given(
    lengths=st.lists(st.integers(1, 256), min_size=1, max_size=200),
    budget=st.integers(256, 20000),
    size=st.integers(1, 64),
)
def test_batches_respect_limits_and_always_take_the_oldest(lengths, budget, size):
    waiting = items(lengths)
    limits = BatchLimits(max_batch_tokens=budget, max_batch_size=size, max_delay=0.0, max_queue=10**6)
    batch = take_batch(waiting, limits)
    assert batch[0] is not None and waiting[0] in batch
    assert len(batch) <= size
    assert len(batch) * max(len(i.ids) for i in batch) <= budget
    assert len({id(i) for i in batch}) == len(batch)
    # Not needlessly small: while room is left, no waiting text of a length already covered was left out.
    longest = max(len(i.ids) for i in batch)
    if len(batch) < size and (len(batch) + 1) * longest <= budget:
        left_out = [i for i in waiting if i not in batch]
        assert all(len(i.ids) > longest for i in left_out)


@given(
    lengths=st.lists(st.integers(1, 2048), min_size=1, max_size=100),
    pairs=st.integers(1, 2048 * 2048 * 8),
    size=st.integers(1, 64),
)
def test_the_attention_budget_keeps_long_texts_in_small_batches(lengths, pairs, size):
    """texts x longest ** 2 query-key pairs at most, unless the oldest text alone is over: it runs alone."""
    waiting = items(lengths)
    limits = BatchLimits(
        max_batch_tokens=10**9, max_batch_size=size, max_delay=0.0, max_queue=10**6, max_attention_pairs=pairs
    )
    batch = take_batch(waiting, limits)
    longest = max(len(i.ids) for i in batch)
    assert waiting[0] in batch and len(batch) <= size
    assert len(batch) * longest**2 <= pairs or batch == [waiting[0]]


def test_one_long_text_runs_alone_and_short_ones_batch_beside_each_other():
    waiting = items([4096, 16, 16, 16])
    limits = BatchLimits(
        max_batch_tokens=10**6, max_batch_size=32, max_delay=0.0, max_queue=100, max_attention_pairs=4096**2
    )  # one 4,096-token text's worth
    assert [len(i.ids) for i in take_batch(waiting, limits)] == [4096]
    assert [len(i.ids) for i in take_batch(waiting[1:], limits)] == [16, 16, 16]


def test_similar_lengths_go_together():
    waiting = items([50, 3, 200, 48, 51, 2, 199, 49])
    batch = take_batch(waiting, BatchLimits(max_batch_tokens=10**6, max_batch_size=4, max_delay=0, max_queue=100))
    assert sorted(len(i.ids) for i in batch) == [48, 49, 50, 51]


def test_the_token_budget_counts_padding():
    waiting = items([10, 100, 10, 10])
    batch = take_batch(waiting, BatchLimits(max_batch_tokens=100, max_batch_size=32, max_delay=0, max_queue=100))
    assert [len(i.ids) for i in batch] == [10, 10, 10]  # the 100-token text would make 4 x 100 = 400


def padded_cost(groups, call_cost: int) -> int:
    return sum(call_cost + len(g) * max(len(i.ids) for i in g) for g in groups)


@given(lengths=st.lists(st.integers(1, 256), min_size=1, max_size=40), call_cost=st.integers(0, 500))
def test_splitting_by_length_is_a_cheapest_partition(lengths, call_cost):
    batch = items(lengths)
    groups = split_by_length(batch, call_cost)
    assert sorted(id(i) for g in groups for i in g) == sorted(id(i) for i in batch)
    flat = [len(i.ids) for g in groups for i in g]
    assert flat == sorted(flat) and all(groups)
    # No cheaper than one call, nor than one call per text.
    assert padded_cost(groups, call_cost) <= padded_cost([sorted(batch, key=lambda i: len(i.ids))], call_cost)
    assert padded_cost(groups, call_cost) <= padded_cost([[i] for i in batch], call_cost)


def test_mixed_lengths_are_cut_and_even_ones_are_not():
    assert [len(g) for g in split_by_length(items([10] * 30 + [200] * 2), 64)] == [30, 2]
    assert [len(g) for g in split_by_length(items([40, 41, 42, 43]), 64)] == [4]
