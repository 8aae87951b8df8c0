"""The price of one more model call, measured at warm-up (engine/call_price.py): on calls whose times a
clock of our own gives, and on the real MiniLM in a real server."""

from __future__ import annotations

import logging
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core.models import served_models
from service.engine.call_price import MAX_PRICE, PROBE_ROUNDS, PROBE_TOKENS, UNMEASURED_PRICE, measure_call_price
from testing.server_thread import ServerThread


class ModelClock:
    """A clock that a model call of n tokens moves by fixed + per_token x n (and by `extra` more on the
    calls `slow` numbers)."""

    def __init__(self, fixed: float, per_token: float, slow: tuple[int, ...] = (), extra: float = 0.0):
        self.now, self.fixed, self.per_token, self.slow, self.extra = 0.0, fixed, per_token, slow, extra
        self.calls: list[int] = []

    def __call__(self) -> float:
        return self.now

    def run(self, tokens: int) -> None:
        self.now += self.fixed + self.per_token * tokens + (self.extra if len(self.calls) in self.slow else 0.0)
        self.calls.append(tokens)


@given(
    fixed=st.floats(min_value=0.0, max_value=0.1),
    per_token=st.floats(min_value=1e-6, max_value=1e-2),
    longer=st.integers(min_value=2, max_value=PROBE_TOKENS),
)
def test_the_price_is_the_fixed_part_in_tokens(fixed, per_token, longer):
    clock = ModelClock(fixed, per_token)
    price = measure_call_price(clock.run, longer, clock)
    # 1 token takes fixed + per_token: fixed / per_token + 1 tokens' worth, one of them the token's own
    assert abs(price - max(1, min(MAX_PRICE, round(fixed / per_token)))) <= 1  # (floating-point rounding)
    assert clock.calls == [1, longer] + [1, longer] * PROBE_ROUNDS  # a first call of each shape, untimed


def test_a_few_slow_calls_do_not_move_the_price():
    """A machine busy for a moment: the medians keep the price (10 ms fixed, 1 ms a token: 10)."""
    clock = ModelClock(0.010, 0.001)
    assert measure_call_price(clock.run, PROBE_TOKENS, clock) == 10
    clock = ModelClock(0.010, 0.001, slow=(2, 5), extra=0.5)  # the first timed short and a long call
    assert measure_call_price(clock.run, PROBE_TOKENS, clock) == 10


def test_calls_whose_time_does_not_grow_with_tokens_are_cut_only_to_save_a_great_deal():
    """A GPU's short calls are launch-bound: a call of 32 tokens takes no longer than one of 1."""
    clock = ModelClock(0.001, 0.0)
    assert measure_call_price(clock.run, PROBE_TOKENS, clock) == MAX_PRICE
    clock = ModelClock(0.001, 1e-4, slow=(2, 4, 6), extra=0.01)  # shorter calls timed slower than longer
    assert measure_call_price(clock.run, PROBE_TOKENS, clock) == MAX_PRICE


def test_a_model_of_one_token_inputs_is_not_timed():
    clock = ModelClock(0.01, 0.001)
    assert measure_call_price(clock.run, 1, clock) == UNMEASURED_PRICE and clock.calls == []


def test_the_server_measures_each_model_unless_told(minilm_dir, numbers_dir, caplog, monkeypatch):
    """By default each model's encoder calls are timed at warm-up on real text (the measurement is the
    tests above'; here it answers 7 after calling the model) and its batches cut at the price; a price the
    operator gives is used as given. The log and /metrics say which, and the price."""
    timed = {}

    def measure(run, longer):
        run(1), run(longer)  # the model's own encoder, on inputs of 1 and `longer` tokens
        timed[len(timed)] = longer
        return 7

    def said(server, how: str) -> dict[str, int]:
        logged = re.findall(rf"model (\S+): one more encoder call costs (\d+) padded tokens \({how}\)", caplog.text)
        for name, price in logged:
            assert server.metrics_registry.get_sample_value("attnserve_split_cost_tokens", {"model": name}) == int(
                price
            )
        return {name: int(price) for name, price in logged}

    caplog.set_level(logging.INFO, logger="attnserve.loader")
    monkeypatch.setattr(served_models, "measure_call_price", measure)
    server = ServerThread([minilm_dir, numbers_dir])
    try:
        models = server.engine_core.registry.models
        assert models["minilm"].batcher.limits.split_cost_tokens == 7
        assert models["numbers"].scheduler.settings.encode_split_cost == 7
        assert said(server, "measured") == {"minilm": 7, "numbers": 7}
        assert timed[0] == PROBE_TOKENS  # MiniLM's: 32 tokens of "warm up"
        assert 2 <= timed[1] <= PROBE_TOKENS  # the numbers model's, as many as its inputs take
    finally:
        server.close()
    caplog.clear()
    server = ServerThread([minilm_dir, numbers_dir], split_cost_tokens=0)
    try:
        models = server.engine_core.registry.models
        assert models["minilm"].batcher.limits.split_cost_tokens == 0
        assert models["numbers"].scheduler.settings.encode_split_cost == 0
        assert said(server, "--split-cost-tokens") == {"minilm": 0, "numbers": 0}
        assert "(measured)" not in caplog.text and len(timed) == 2
    finally:
        server.close()


@pytest.mark.parametrize("value", [-2, -64])
def test_a_negative_price_other_than_measured_is_refused(value):
    from service.ops.config import ConfigError, ServerConfig

    with pytest.raises(ConfigError, match=rf"split_cost_tokens must be >= 0, or -1 \(measured\), not {value}"):
        ServerConfig(split_cost_tokens=value)
