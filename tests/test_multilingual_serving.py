"""Multilingual checkpoints (M2M100, NLLB-200, mBART-50) served with a target language per request:
rows with different targets in one continuous batch give what transformers' generate gives with that
target forced (greedy and beam search, n-best lists with their scores), on attnserve.v1, the OpenAI door
and KServe v2 alike; the code is never part of the answer; languages are refused by name."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import openai
import pytest
import torch
import transformers

from model.bundled.number_sentences import sentences
from model.export.model_dir import export_model_dir
from model.families.marian.importer import import_marian
from model.families.marian.random_checkpoint import MarianShape, random_marian_checkpoint
from service.grpc_api.pb import inference_pb2 as pb
from service.grpc_api.pb import open_inference_pb2 as oip
from service.grpc_api.pb import open_inference_pb2_grpc as oip_grpc
from testing.server_thread import ServerThread

from .model_cache import built
from .multilingual_checkpoints import MAX_NEW, SHAPES

INPUTS = sentences(24, seed=2027)
SCORE_TOLERANCE = 1e-4


MARIAN_TARGETS = ("fra", "spa", "por")


@pytest.fixture(scope="module")
def several_targets():
    """A random Marian checkpoint with several targets (>>fra<< tokens), as opus-mt-en-ROMANCE is."""
    shape = MarianShape(d_model=32, heads=4, target_codes=MARIAN_TARGETS, pair=("en", "ROMANCE"))

    def build(root: Path) -> None:
        source = random_marian_checkpoint(root / "hf", shape, seed=5)
        export_model_dir(
            import_marian(source, root / "marian-romance", "marian-romance"), progress_stream=io.StringIO()
        )

    root = built("marian-targets", build, extra_sources=("tests/test_multilingual_serving.py",))
    return root / "hf", root / "marian-romance"


@pytest.fixture(scope="module")
def server(multilingual_checkpoints, marian_checkpoints, several_targets):
    """The multilingual models, and Marian models of one pair and of several targets beside them."""
    dirs = [c.dir for c in multilingual_checkpoints.values()]
    dirs += [marian_checkpoints["marian-swish-h4"].dir, several_targets[1]]
    server = ServerThread(dirs, max_new_tokens=MAX_NEW + 1)
    yield server
    server.close()


def generate(stub, model: str, text: str, target: str, source: str = "", **params) -> pb.GenerateResponse:
    request = pb.GenerateRequest(
        model=model,
        input=text,
        source_language=source,
        target_language=target,
        params=pb.GenerationParams(**{"max_new_tokens": MAX_NEW, **params}),
    )
    return stub.Generate(request, timeout=60)


def mixed(checkpoint) -> list[tuple[str, str]]:
    """Each input with a target language, the targets interleaved so that every step mixes them."""
    return [(text, checkpoint.targets[i % len(checkpoint.targets)]) for i, text in enumerate(INPUTS)]


def expected_greedy(checkpoint, calls) -> dict[tuple[str, str], list[int]]:
    """transformers' greedy ids for each (text, target), a batch per target (its forced token is one)."""
    out = {}
    for target in checkpoint.targets:
        texts = [text for text, t in calls if t == target]
        for text, best in zip(texts, checkpoint.hf_n_best(texts, target, num_beams=1, do_sample=False)):
            out[text, target] = best[0][0]
    return out


def decoded(checkpoint, ids: list[int]) -> str:
    """transformers' text of ids, language codes left out (transformers 5 keeps M2M100's in the text)."""
    return checkpoint.hf_tokenizer.decode([i for i in ids if i not in checkpoint.code_ids], skip_special_tokens=True)


@pytest.mark.parametrize("name", list(SHAPES))
def test_mixed_targets_in_one_batch_match_generate(multilingual_checkpoints, server, name):
    checkpoint = multilingual_checkpoints[name]
    calls = mixed(checkpoint)
    expected = expected_greedy(checkpoint, calls)
    stub = server.stub()
    scheduler = server.engine_core.registry.models[name].scheduler
    before = scheduler.largest_step
    with ThreadPoolExecutor(len(calls)) as pool:
        responses = list(pool.map(lambda c: generate(stub, name, c[0], c[1], checkpoint.source_language), calls))
    differ = set()
    for (text, target), response in zip(calls, responses):
        want = expected[text, target]
        assert list(response.token_ids) == want, (text, target)
        assert response.text == decoded(checkpoint, want)
        assert response.usage.generated_tokens == len(want)  # the code is not counted
        differ.add(tuple(want))
    assert len(differ) > len(checkpoint.targets)  # targets and texts change the answers
    assert scheduler.largest_step > max(before, len(checkpoint.targets))  # the languages shared steps


@pytest.mark.parametrize("name", list(SHAPES))
def test_beams_keep_their_rows_language_and_match_the_n_best(multilingual_checkpoints, server, name):
    checkpoint = multilingual_checkpoints[name]
    stub = server.stub()
    calls = mixed(checkpoint)[:9]

    def one(call):
        text, target = call
        return generate(stub, name, text, target, checkpoint.source_language, num_beams=3, num_return_sequences=2)

    with ThreadPoolExecutor(len(calls)) as pool:
        responses = list(pool.map(one, calls))
    for (text, target), response in zip(calls, responses):
        (want,) = checkpoint.hf_n_best([text], target, n=2, num_beams=3, do_sample=False)
        assert list(response.token_ids) == want[0][0], (text, target)
        assert len(response.hypotheses) == 2
        for hypothesis, (ids, score) in zip(response.hypotheses, want):
            assert list(hypothesis.token_ids) == ids, (text, target)
            assert abs(hypothesis.score - score) <= SCORE_TOLERANCE


def test_the_openai_and_kserve_doors_take_the_languages_as_parameters(multilingual_checkpoints, server):
    name = "nllb-h2"
    checkpoint = multilingual_checkpoints[name]
    text, target = INPUTS[3], "fr"  # an ISO 639-1 code for fra_Latn
    expected = generate(server.stub(), name, text, "fra_Latn", "eng_Latn")
    with openai.OpenAI(base_url=f"http://127.0.0.1:{server.server.http.port}/v1", api_key="-", max_retries=0) as sdk:
        completion = sdk.completions.create(
            model=name,
            prompt=text,
            max_tokens=MAX_NEW,
            extra_body={"source_language": "en", "target_language": target},
        )
        assert completion.choices[0].text == expected.text
        assert completion.usage.completion_tokens == expected.usage.generated_tokens
        with pytest.raises(openai.BadRequestError, match="target_language") as error:
            sdk.completions.create(model=name, prompt=text, extra_body={"source_language": "en"})
        assert "required by model 'nllb-h2'" in str(error.value)
        card = next(m for m in sdk.models.list().data if m.id == name)
        assert card.model_extra["languages"] == list(checkpoint.codes)
        assert card.model_extra["needs_source_language"] is True
    kserve = oip_grpc.GRPCInferenceServiceStub(server.channel())
    request = oip.ModelInferRequest(model_name=name)
    request.inputs.add(name="text", datatype="BYTES", shape=[1]).contents.bytes_contents.append(text.encode())
    request.parameters["max_new_tokens"].int64_param = MAX_NEW
    request.parameters["source_language"].string_param = "eng"
    request.parameters["target_language"].string_param = "fra"
    response = kserve.ModelInfer(request, timeout=60)
    assert response.outputs[0].contents.bytes_contents[0].decode() == expected.text
    request.parameters["target_language"].string_param = "klingon"
    with pytest.raises(grpc.RpcError) as error:
        kserve.ModelInfer(request, timeout=60)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "parameters.target_language: 'klingon' is not a language of this model" in error.value.details()


@pytest.mark.parametrize(
    "model, source, target, field, message",
    [
        ("m2m100-h4", "en", "", "target_language", "required by model 'm2m100-h4': one of "),
        ("m2m100-h4", "", "fr", "source_language", "required by model 'm2m100-h4'"),
        ("nllb-h2", "eng_Latn", "zh", "target_language", "names several languages of this model: zho_Hans, zho_Hant"),
        ("nllb-h2", "eng_Latn", "fraa", "target_language", "is not a language of this model; it serves fra_Latn"),
        ("mbart50-h4", "xx_YY", "fr_XX", "source_language", "'xx_YY' is not a language of this model"),
        ("marian-swish-h4", "", "fr", "target_language", "model 'marian-swish-h4' names no languages"),
    ],
)
def test_languages_are_refused_naming_the_field(server, model, source, target, field, message):
    with pytest.raises(grpc.RpcError) as error:
        generate(server.stub(), model, INPUTS[0], target, source)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details().startswith(f"{field}: ") and message in error.value.details()


def test_max_new_tokens_leaves_room_for_the_code(server):
    limit = MAX_NEW  # the server's rows hold MAX_NEW + 2 positions: the start token, the code, MAX_NEW more
    ok = generate(server.stub(), "m2m100-h4", INPUTS[1], "fr", "en", ignore_eos=True)
    assert len(ok.token_ids) == limit
    with pytest.raises(grpc.RpcError, match=f"at most {limit} for model 'm2m100-h4'.*target language's code"):
        generate(server.stub(), "m2m100-h4", INPUTS[1], "fr", "en", max_new_tokens=limit + 1)


def test_list_models_says_what_each_model_serves(multilingual_checkpoints, server):
    models = {m.name: m for m in server.stub().ListModels(pb.ListModelsRequest(), timeout=10).models}
    assert len(models["m2m100-h4"].languages) == 100 and "fr" in models["m2m100-h4"].languages
    assert "zho_Hant" in models["nllb-h2"].languages and len(models["nllb-h2"].languages) == 202
    assert models["mbart50-h4"].languages[:2] == ["ar_AR", "cs_CZ"]
    for name in SHAPES:
        assert models[name].needs_source_language and models[name].needs_target_language
    marian = models["marian-swish-h4"]
    assert list(marian.languages) == [] and not marian.needs_target_language


def test_streams_carry_no_code(multilingual_checkpoints, server):
    checkpoint = multilingual_checkpoints["mbart50-h4"]
    request = pb.GenerateRequest(
        model="mbart50-h4",
        input=INPUTS[5],
        source_language="en_XX",
        target_language="de",
        params=pb.GenerationParams(max_new_tokens=MAX_NEW),
    )
    pieces = list(server.stub().GenerateStream(request, timeout=60))
    ids = [i for piece in pieces for i in piece.token_ids]
    (want,) = checkpoint.hf_n_best([INPUTS[5]], "de_DE", num_beams=1, do_sample=False)
    assert ids == want[0][0]
    assert "".join(p.text for p in pieces) == decoded(checkpoint, ids)


def test_marian_with_several_targets_takes_the_target_at_the_start_of_the_source(server, several_targets):
    source, _ = several_targets
    hf = transformers.MarianMTModel.from_pretrained(source).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(source)
    stub = server.stub()
    answers = set()
    for i, text in enumerate(INPUTS[:9]):
        target = MARIAN_TARGETS[i % 3]
        batch = tokenizer([f">>{target}<< {text}"], return_tensors="pt")
        with torch.no_grad():
            (row,) = hf.generate(**batch, max_new_tokens=MAX_NEW, num_beams=1, do_sample=False)
        want = [t for t in row[1:].tolist() if t not in (hf.config.pad_token_id, hf.config.eos_token_id)]
        response = generate(
            stub, "marian-romance", text, {"fra": "fr", "spa": "es", "por": "pt-PT"}[target], num_beams=1
        )
        assert list(response.token_ids) == want, (text, target)
        assert response.usage.prompt_tokens == batch["input_ids"].shape[1]  # the code counts in the source
        answers.add(tuple(want))
    assert len(answers) > 3
    own_source = generate(stub, "marian-romance", INPUTS[0], "fra", source="en")  # its own source: no news
    assert list(own_source.token_ids) == list(generate(stub, "marian-romance", INPUTS[0], "fra").token_ids)
    with pytest.raises(grpc.RpcError, match="takes no source language"):
        generate(stub, "marian-romance", INPUTS[0], "fra", source="de")
    with pytest.raises(grpc.RpcError, match="target_language: required by model 'marian-romance': one of fra"):
        generate(stub, "marian-romance", INPUTS[0], "")
    (info,) = [m for m in stub.ListModels(pb.ListModelsRequest(), timeout=10).models if m.name == "marian-romance"]
    assert (list(info.languages), info.needs_source_language, info.needs_target_language) == (
        list(MARIAN_TARGETS),
        False,
        True,
    )
    assert (info.source_language, info.target_language) == ("en", "ROMANCE")
