"""MarianMT checkpoints served over gRPC: greedy and beam search equal to transformers' generate, the CLI's
n-best, beam settings refused by name, and a beam search's cache rows."""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from model.bundled.number_sentences import sentences
from model.families.marian.reference import without_eos
from service.engine.generation_cache import reorder_beams
from service.engine.sequence import BeamRow
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .marian_checkpoints import MAX_NEW, SHAPES, Checkpoint
from .waits import wait_until

transformers = pytest.importorskip("transformers")

INPUTS = sentences(50, seed=2026)


@pytest.fixture(scope="module")
def checkpoints(marian_checkpoints) -> dict[str, Checkpoint]:
    return marian_checkpoints


@pytest.fixture(scope="module")
def marian_server(checkpoints):
    server = ServerThread([c.dir for c in checkpoints.values()], max_new_tokens=MAX_NEW)
    yield server
    server.close()


# Served over gRPC


def generate(stub, model: str, text: str, **params) -> pb.GenerateResponse:
    request = pb.GenerateRequest(model=model, input=text, params=pb.GenerationParams(max_new_tokens=MAX_NEW, **params))
    return stub.Generate(request, timeout=60)


def concurrently(fn, items):
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(fn, items))


@pytest.mark.parametrize("name", list(SHAPES))
def test_greedy_matches_generate_over_grpc(checkpoints, marian_server, name):
    checkpoint = checkpoints[name]
    expected = checkpoint.hf_generate(INPUTS, num_beams=1)
    stub = marian_server.stub()
    responses = concurrently(lambda text: generate(stub, name, text, num_beams=1), INPUTS)
    reasons = set()
    for text, response, want in zip(INPUTS, responses, expected):
        assert list(response.token_ids) == without_eos(want), text
        assert response.text == checkpoint.hf_tokenizer.decode(want, skip_special_tokens=True)
        reasons.add(response.finish_reason)
        # transformers forces eos at the last position the request allows: that is the length limit here.
        limit = len(want) == MAX_NEW
        assert response.finish_reason == (pb.FINISH_REASON_LENGTH if limit else pb.FINISH_REASON_EOS)
    assert len(reasons) == 2 or name != "marian-swish-h4"  # some end by eos, some by length


# (num_beams, length_penalty, early_stopping, num_return_sequences) against transformers' generate,
# inputs spread over them.
BEAM_SETTINGS = [
    (4, 1.0, False, pb.EARLY_STOPPING_HEURISTIC, 4),
    (4, 0.6, True, pb.EARLY_STOPPING_ON, 2),
    (3, 2.0, "never", pb.EARLY_STOPPING_NEVER, 1),
    (2, -0.5, False, pb.EARLY_STOPPING_HEURISTIC, 2),
    (5, 1.0, "never", pb.EARLY_STOPPING_NEVER, 3),
]
SCORE_TOLERANCE = 1e-4  # measured differences are about 2e-7: the same float32 arithmetic


@pytest.mark.parametrize("name", list(SHAPES))
def test_beam_search_matches_transformers(checkpoints, marian_server, name):
    """The best hypothesis, and the n best with their scores, as transformers' beam search gives them."""
    checkpoint = checkpoints[name]
    stub = marian_server.stub()
    differs_from_greedy = 0
    for i, (beams, penalty, early, early_pb, n) in enumerate(BEAM_SETTINGS):
        texts = INPUTS[i :: len(BEAM_SETTINGS)]
        expected = checkpoint.hf_n_best(texts, n, num_beams=beams, length_penalty=penalty, early_stopping=early)
        greedy = checkpoint.hf_generate(texts, num_beams=1)
        responses = concurrently(
            lambda text: generate(
                stub,
                name,
                text,
                num_beams=beams,
                length_penalty=penalty,
                early_stopping=early_pb,
                num_return_sequences=n,
            ),
            texts,
        )
        for text, response, want, plain in zip(texts, responses, expected, greedy):
            context = (text, beams, penalty, early, n)
            assert list(response.token_ids) == without_eos(want[0][0]), context
            assert response.text == checkpoint.hf_tokenizer.decode(want[0][0], skip_special_tokens=True)
            assert len(response.hypotheses) == n, context
            first = response.hypotheses[0]
            assert (first.text, first.token_ids, first.finish_reason) == (
                response.text,
                response.token_ids,
                response.finish_reason,
            )
            for hypothesis, (ids, score) in zip(response.hypotheses, want):
                assert list(hypothesis.token_ids) == without_eos(ids), context
                assert hypothesis.text == checkpoint.hf_tokenizer.decode(ids, skip_special_tokens=True)
                assert abs(hypothesis.score - score) <= SCORE_TOLERANCE, (context, hypothesis.score, score)
                limit = len(ids) == MAX_NEW  # transformers forces eos there: the length limit
                assert hypothesis.finish_reason == (pb.FINISH_REASON_LENGTH if limit else pb.FINISH_REASON_EOS)
            scores = [h.score for h in response.hypotheses]
            assert scores == sorted(scores, reverse=True), context
            differs_from_greedy += want[0][0] != plain
    assert differs_from_greedy >= 5  # the test would notice greedy posing as beam search


def test_cli_prints_the_n_best_with_scores(marian_server):
    text = INPUTS[3]
    expected = generate(marian_server.stub(), "marian-swish-h4", text, num_beams=4, num_return_sequences=3).hypotheses
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "generate",
            text,
            "--target",
            marian_server.target,
            "--model",
            "marian-swish-h4",
            "--max-new-tokens",
            str(MAX_NEW),
            "--num-beams",
            "4",
            "--num-return-sequences",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{h.score:.4f}\t{h.text}" for h in expected]
    assert "4 beams]" in result.stderr


def test_default_num_beams_is_the_models(checkpoints, marian_server):
    checkpoint = checkpoints["marian-relu-h8"]  # its generation config says 3 beams
    text = INPUTS[0]
    (expected,) = checkpoint.hf_generate([text])  # transformers uses the checkpoint's defaults too
    assert list(generate(marian_server.stub(), "marian-relu-h8", text).token_ids) == without_eos(expected)


def test_beam_search_errors(marian_server):
    stub = marian_server.stub()
    cases = [
        ({"num_beams": 9}, "params.num_beams: 9; at most 8"),
        ({"num_beams": 2, "temperature": 0.7}, "params.temperature: not with beam search"),
        ({"num_beams": 2, "stop": ["x"]}, "params.stop: not with beam search"),
        ({"num_beams": 1, "length_penalty": 2.0}, "params.length_penalty: only with beam search"),
        ({"num_beams": 2, "length_penalty": 1e30}, "params.length_penalty: 1e+30; must be within +-10"),
        ({"num_beams": 2, "early_stopping": 7}, "params.early_stopping: 7 is not an EarlyStopping value"),
        ({"num_beams": 2, "length_penalty": float("nan")}, "params.length_penalty: nan; must be within +-10"),
        ({"num_beams": 2, "num_return_sequences": 3}, "params.num_return_sequences: 3; at most num_beams (2)"),
        ({"num_beams": 1, "num_return_sequences": 2}, "params.num_return_sequences: only with beam search"),
    ]
    for params, message in cases:
        with pytest.raises(grpc.RpcError) as error:
            generate(stub, "marian-swish-h4", "Zwei", **params)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in error.value.details()
    request = pb.GenerateRequest(model="marian-swish-h4", input="Zwei", params=pb.GenerationParams(num_beams=2))
    with pytest.raises(grpc.RpcError) as error:
        list(stub.GenerateStream(request, timeout=10))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "beam search does not stream" in error.value.details()
    # Unset num_beams on a model whose default is beam search: streaming and sampling fall back to one beam.
    request = pb.GenerateRequest(model="marian-relu-h8", input="Zwei", params=pb.GenerationParams(max_new_tokens=4))
    assert list(stub.GenerateStream(request, timeout=10))[-1].finish_reason != pb.FINISH_REASON_UNSPECIFIED


def test_cancelled_beam_search_frees_all_its_rows(marian_server):
    scheduler = marian_server.engine_core.registry.models["marian-swish-h4"].scheduler
    stub = marian_server.stub()
    release = marian_server.hold_model_thread()
    future = stub.Generate.future(
        pb.GenerateRequest(model="marian-swish-h4", input=INPUTS[0], params=pb.GenerationParams(num_beams=4)),
        timeout=30,
    )
    threading.Timer(0.3, future.cancel).start()
    threading.Timer(0.6, release.set).start()
    with pytest.raises(grpc.FutureCancelledError):
        future.result()
    wait_until(
        lambda: marian_server.call_and_wait(lambda: (scheduler.running, scheduler.cache.used)) == (0, 0),
        what="all the beams' rows are freed",
    )
    assert marian_server.call_and_wait(lambda: (scheduler.running, scheduler.cache.used, len(scheduler.waiting))) == (
        0,
        0,
        0,
    )


# The cache rows of a beam search


def test_reorder_beams_copies_only_extra_children():
    rows = [BeamRow(None, beam, row) for beam, row in enumerate([5, 2, 7, 0])]
    ordered, copies = reorder_beams(rows, [1, 1, 3, 1])  # beams 0 and 2 died; 1 has three children
    assert [slot.row for slot in ordered[:1]] == [2] and ordered[2].row == 0  # first children keep their rows
    assert sorted(copies) == [(2, 5), (2, 7)]  # two copies, from beam 1's row into the dead beams' rows
    assert {ordered[1].row, ordered[3].row} == {5, 7}
    assert reorder_beams(rows, [0, 1, 2, 3])[1] == []  # every beam its own parent: nothing moves
