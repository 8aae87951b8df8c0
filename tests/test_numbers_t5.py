"""The bundled T5 model "numbers-t5": transformers' T5 in Flan-T5's layout, trained here on the numbers task
with task prefixes, imported as a Flan-T5 checkpoint is: its committed checkpoint, its accuracy through the
exported graphs, its answers over gRPC and `/v1/completions` equal to transformers' generate, and the
README's example."""

from __future__ import annotations

import io
import shutil

import pytest
import torch

from cli.build import CHECKPOINTS_DIR
from model.bundled.eval_numbers import NumbersModel, evaluate
from model.bundled.numbers import build_tokenizer
from model.export.model_dir import export_model_dir
from model.families.t5.importer import import_t5, t5_config
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .http_client import http
from .model_cache import built
from .slow_tests import slow_fixture

CHECKPOINT = CHECKPOINTS_DIR / "numbers-t5"
EXAMPLE = ("words: 312405", "three hundred and twelve thousand, four hundred and five")
transformers = pytest.importorskip("transformers")


@slow_fixture(scope="module")
def numbers_t5_dir():
    def build(root):
        import_t5(CHECKPOINT, root / "numbers-t5", "numbers-t5")
        export_model_dir(root / "numbers-t5", progress_stream=io.StringIO(), reduced=("fp16", "int8"))

    return built("numbers-t5", build, extra_sources=("checkpoints/numbers-t5/model.safetensors",)) / "numbers-t5"


def test_the_checkpoint_is_flan_t5_shaped_and_small_enough_to_commit():
    files = {p.name: p.stat().st_size for p in CHECKPOINT.iterdir()}
    assert set(files) == {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"}
    assert sum(files.values()) <= 20 * 1024 * 1024
    c = t5_config(CHECKPOINT)
    # transformers 5 builds T5 with its LM head tied to the token table, and saves it so, unscaled
    assert (c.positions, c.norm, c.feed_forward, c.activation, c.tie_output, c.rescale_output) == (
        "relative",
        "rms",
        "gated",
        "gelu_tanh",
        True,
        False,
    )
    assert (c.bos_id, c.pad_id, c.eos_id) == (0, 0, 2)  # the decoder starts from pad, as T5's does
    prefixed = build_tokenizer(task_prefixes=True).encode(EXAMPLE[0]).tokens
    assert prefixed[:2] == ["▁words:", "▁"]


def test_the_committed_checkpoint_reaches_the_accuracy_floor(numbers_t5_dir):
    """Through ONNX Runtime with the KV cache, on a fixed sample drawn with a seed not used in training."""
    report = evaluate(numbers_t5_dir, count=500, seed=777)
    for direction, result in report.items():
        assert result["accuracy"] >= 0.99, (direction, result["errors"][:5])


def test_the_readme_example_over_grpc_and_completions_as_transformers_generates(numbers_t5_dir):
    hf = transformers.T5ForConditionalGeneration.from_pretrained(CHECKPOINT).eval()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(CHECKPOINT / "tokenizer.json"))
    texts = [EXAMPLE[0], "digits: " + EXAMPLE[1], "words: 7", "digits: one million and five"]
    with torch.no_grad():
        rows = [hf.generate(**tokenizer([t], return_tensors="pt"), max_new_tokens=20)[0].tolist() for t in texts]
    expected = [tokenizer.decode(row, skip_special_tokens=True) for row in rows]
    assert expected == [EXAMPLE[1], "312405", "seven", "1000005"]
    server = ServerThread([numbers_t5_dir])
    try:
        stub = server.stub()
        got = [stub.Generate(pb.GenerateRequest(model="numbers-t5", input=t), timeout=60).text for t in texts]
        assert got == expected
        url = f"http://localhost:{server.server.http.port}/v1/completions"
        answer = http().post(url, json={"model": "numbers-t5", "prompt": EXAMPLE[0], "max_tokens": 20}).json()
        assert answer["choices"][0]["text"] == EXAMPLE[1]
    finally:
        server.close()
    assert NumbersModel(numbers_t5_dir).translate([EXAMPLE[0]]) == [EXAMPLE[1]]


def test_a_directory_of_the_checkpoint_copied_imports_as_attnserve_import_does(tmp_path):
    """`attnserve import checkpoints/numbers-t5 OUT` takes it as the T5 family's."""
    from model.families.choice import family_of

    shutil.copytree(CHECKPOINT, tmp_path / "hf")
    family, kind = family_of(tmp_path / "hf")
    assert (family.importer, kind) == (import_t5, "t5")
