"""Attention maps' limits and switch: the size bound counted before generating, one call at a time with a
caller that leaves holding its slot, off by default, and a graph missing from or changed in a model."""

from __future__ import annotations

import json

import grpc
import pytest

from modeldir.files import ATTENTION_FILE, MANIFEST_FILE, ModelFilesError, open_model_dir
from service.grpc_api.client import Client
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .grpc_outcomes import status_of
from .waits import wait_until


@pytest.fixture(scope="module")
def tight(numbers_dir):
    server = ServerThread(
        [numbers_dir], attention_maps=True, attention_max_concurrent=1, attention_max_response_bytes=200_000
    )
    yield server
    server.close()


def test_the_size_bound_counts_the_longest_generation_before_generating(tight):
    """'12': 4 source tokens; up to 63 new tokens make 64 decoder positions, so 12 maps of each kind take
    4 x 12 x (4 x 4 + 64 x 64 + 64 x 4) = 209,664 bytes, whatever the generation turns out to be."""
    steps = tight.engine_core.registry.models["numbers"].scheduler.steps_run
    code, details = status_of(lambda: tight.stub().Attention(pb.AttentionRequest(input="12")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details == (
        "input: the attention weights would take 209664 bytes (4 source and 64 decoder positions); at most 200000 "
        "(attention_max_response_bytes): shorten the input, or ask for fewer layers, fewer max_new_tokens"
    )
    assert tight.engine_core.registry.models["numbers"].scheduler.steps_run == steps  # nothing generated
    with Client(tight.target) as client:
        maps = client.attention("12", max_new_tokens=10)
    assert maps.target_text == "twelve" and maps.weights["cross"].shape == (3, 4, 2, 4)


def test_too_many_at_once_is_resource_exhausted(tight):
    release = tight.hold_model_thread()
    try:
        first = tight.stub().Attention.future(pb.AttentionRequest(input="5", max_new_tokens=4))
        wait_until(
            lambda: tight.call_and_wait(lambda: tight.server.core.attention_maps.calls) == 1, what="the call arrives"
        )
        request = pb.AttentionRequest(input="6", max_new_tokens=4)
        code, details = status_of(lambda: tight.stub().Attention(request, timeout=5))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "1 Attention calls are in progress" in details and "attention_max_concurrent 1" in details
    finally:
        release.set()
    assert first.result(timeout=30).target_text == "five"
    assert tight.stub().Attention(request).target_text == "six"


def test_a_caller_that_leaves_holds_its_slot_until_its_graph_has_run(tight):
    maps = tight.engine_core.registry.models["numbers"].attention
    runs = maps.calls
    request = pb.AttentionRequest(input="5", target="five")  # teacher forcing: straight to the graph
    release = tight.hold_model_thread()
    try:
        code, _ = status_of(lambda: tight.stub().Attention(request, timeout=0.3))
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        code, details = status_of(lambda: tight.stub().Attention(request, timeout=5))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "1 Attention calls are in progress" in details
    finally:
        release.set()
    wait_until(
        lambda: tight.call_and_wait(lambda: tight.server.core.attention_maps.calls) == 0, what="the slot is free"
    )
    assert maps.calls == runs + 1  # the abandoned call's graph ran, then let its slot go
    assert tight.stub().Attention(request).predicted_tokens == ["▁five", "</s>"]


def test_off_by_default_failed_precondition(numbers_dir):
    """The graph is loaded by default to place translations' tags (--tag-alignment), but the Attention RPC
    stays off; with neither, nothing is loaded (tests/test_translation_serving.py)."""
    server = ServerThread([numbers_dir])
    try:
        assert server.engine_core.registry.models["numbers"].attention is not None
        code, details = status_of(lambda: server.stub().Attention(pb.AttentionRequest(input="5")))
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert "attention maps are off on this server; start it with --attention-maps" in details
        assert server.stub().Generate(pb.GenerateRequest(input="5")).text == "five"
    finally:
        server.close()


def test_a_model_exported_without_the_graph_serves_but_not_attention(numbers_dir, copy_of):
    model_dir = copy_of(numbers_dir)
    manifest = json.loads((model_dir / MANIFEST_FILE).read_text())
    del manifest["sha256"][ATTENTION_FILE]  # as an export from before attention maps
    (model_dir / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert open_model_dir(model_dir).attention is None
    with pytest.raises(ModelFilesError, match="no attention-map graph .* export the model again"):
        open_model_dir(model_dir, attention=True)


def test_a_modified_attention_graph_is_refused(numbers_dir, copy_of):
    model_dir = copy_of(numbers_dir)
    data = bytearray((model_dir / ATTENTION_FILE).read_bytes())
    data[len(data) // 2] ^= 0x01
    (model_dir / ATTENTION_FILE).write_bytes(bytes(data))
    open_model_dir(model_dir)  # serving without attention maps does not read it
    with pytest.raises(ModelFilesError, match="attention.onnx: sha256 .* does not match"):
        open_model_dir(model_dir, attention=True)


def test_the_answer_size_limit_must_fit_in_a_message():
    from service.ops.config import ConfigError, ServerConfig

    with pytest.raises(ConfigError, match="attention_max_response_bytes 4194304 must leave 65536 bytes"):
        ServerConfig(attention_maps=True, attention_max_response_bytes=4 << 20)
    ServerConfig(attention_max_response_bytes=4 << 20)  # not checked while attention maps are off


def test_flags_and_environment_turn_it_on():
    import argparse

    from service.ops.config_sources import add_arguments, from_sources

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert from_sources(parser.parse_args([]), environ={}).attention_maps is False
    assert from_sources(parser.parse_args([]), environ={"ATTNSERVE_ATTENTION_MAPS": "1"}).attention_maps is True
    config = from_sources(parser.parse_args(["--attention-maps", "--attention-max-input-tokens", "32"]), environ={})
    assert config.attention_maps and config.attention_max_input_tokens == 32
