"""The bundled multilingual numbers model (checkpoints/numbers-multilingual, NLLB-200's architecture):
imported and exported as `attnserve build` does it, served, it equals transformers' generate with the
target forced, and it is exact on held-out numbers in every language and direction, mixed in batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model.bundled.multilingual_numbers import CODES, DIGITS, LANGUAGES, directions, example
from service.grpc_api.pb import inference_pb2 as pb
from testing.multilingual_numbers_eval import evaluate
from testing.server_thread import ServerThread

transformers = pytest.importorskip("transformers")
SOURCE = Path(__file__).resolve().parent.parent / "checkpoints" / "numbers-multilingual"


@pytest.fixture(scope="module")
def multilingual_server(multilingual_numbers_dir):
    server = ServerThread([multilingual_numbers_dir])
    yield server
    server.close()


def test_it_serves_its_languages_and_the_digits_code(multilingual_server):
    (info,) = multilingual_server.stub().ListModels(pb.ListModelsRequest(), timeout=10).models
    assert tuple(info.languages) == CODES and info.needs_source_language and info.needs_target_language


@pytest.mark.parametrize("number", [0, 7, 21, 80, 100, 1001, 312405, 999999999])
def test_answers_equal_transformers_generate(multilingual_server, number):
    model = transformers.M2M100ForConditionalGeneration.from_pretrained(SOURCE).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(SOURCE)
    stub = multilingual_server.stub()
    for source, target in directions():
        text, _ = example(number, source, target)
        tokenizer.src_lang = source
        batch = tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            (row,) = model.generate(
                **batch, forced_bos_token_id=tokenizer.convert_tokens_to_ids(target), max_new_tokens=24, num_beams=1
            )
        want = [t for t in row[2:].tolist() if t not in (model.config.pad_token_id, model.config.eos_token_id)]
        request = pb.GenerateRequest(input=text, source_language=source, target_language=target)
        response = stub.Generate(request, timeout=60)
        assert list(response.token_ids) == want, (number, source, target)


def test_requests_may_name_languages_by_iso_code(multilingual_server):
    stub = multilingual_server.stub()
    for code, iso in (("fra_Latn", "fr"), ("deu_Latn", "de-DE"), ("spa_Latn", "spa"), ("eng_Latn", "en")):
        request = pb.GenerateRequest(input="312405", source_language="zxx", target_language=iso)
        assert stub.Generate(request, timeout=60).text == example(312405, DIGITS, code)[1]


def test_held_out_numbers_are_exact_in_every_language_and_direction(multilingual_numbers_dir):
    """A sample of the README's table (2,000 numbers per direction there): all directions in flight at once."""
    report = evaluate(multilingual_numbers_dir, count=150)
    assert set(report) == {f"{s}->{t}" for s, t in directions()} and len(LANGUAGES) == 4
    for direction, result in report.items():
        assert result["accuracy"] >= 0.99, (direction, result["errors"][:3])


def test_its_vocabulary_trains_again_to_the_committed_one():
    """tokenizers' BPE trainer, given the training's texts again, makes the committed vocabulary and merges
    (its WordPiece trainer breaks ties in no fixed order; this one has given the same pieces every time)."""
    import json

    from model.bundled.multilingual_numbers import MultilingualTrainSettings, train_pieces

    vocab, merges = train_pieces(MultilingualTrainSettings())
    committed = json.loads((SOURCE / "tokenizer.json").read_text())["model"]
    assert vocab == committed["vocab"] and len(vocab) == 1200
    assert merges == [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in committed["merges"]]
