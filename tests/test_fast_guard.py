"""The guard that keeps `make test-fast` fast: a fast test that exports a graph or starts a server fails."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
import torch.onnx

from service.server import Server

from .conftest import GUARD
from .slow_tests import SLOW_FIXTURES, Guard, starts_a_server


def test_the_guard_watches_this_fast_test(request):
    assert GUARD.running == request.node.nodeid
    for patched in (torch.onnx.export, Server.start, subprocess.Popen.__init__):
        assert hasattr(patched, "__wrapped__"), patched


@pytest.mark.slow
def test_a_slow_test_is_not_watched():
    assert GUARD.running is None


def test_a_guarded_call_fails_the_running_test_once():
    guard, calls = Guard(), []
    owner = types.SimpleNamespace(export=lambda *args: calls.append(args) or "exported")
    guard.wrap(owner, "export", "exports a model")
    assert owner.export(1) == "exported"  # no fast test running: the call goes through
    guard.running = "tests/test_x.py::test_y"
    with pytest.raises(pytest.fail.Exception, match=r"test_x.py::test_y exports a model, but is not marked slow"):
        owner.export(2)
    assert guard.running is None and calls == [(1,)]


@pytest.mark.parametrize(
    "argv, serves",
    [
        ([sys.executable, "-m", "cli", "serve", "--models", "m"], True),
        ([".venv/bin/attnserve", "serve"], True),
        ([sys.executable, "-m", "cli", "serve", "--help"], False),
        ([sys.executable, "-m", "cli", "build"], False),
        (["promtool", "check", "config", "serve.yml"], False),
        ("ls", False),
    ],
)
def test_a_child_process_that_serves_is_told_apart(argv, serves):
    assert starts_a_server(argv) is serves


def test_the_fixtures_that_build_models_are_slow():
    assert {"served", "minilm_dir", "bge_m3", "colbert_models", "number_rankers", "cross_encoders"} <= SLOW_FIXTURES
