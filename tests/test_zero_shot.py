"""Zero-shot classification: BART's sequence classifier (BartForSequenceClassification, bart-large-mnli's
architecture) imported, its logits equal to transformers' on random checkpoints of two shapes, exported and
served; it and a BERT NLI cross-encoder score texts against candidate labels exactly as transformers'
zero-shot-classification pipeline does (one label true or each on its own, a hypothesis template, a
premise cut where it is too long) on gRPC Classify, huggingface_hub's zero_shot_classification (and
its body shape at the base URL), and KServe through tritonclient; what it cannot take refused by field."""

from __future__ import annotations

import io
import json
import shutil

import grpc
import huggingface_hub
import numpy as np
import pytest
import torch
import tritonclient.http as triton
from huggingface_hub import InferenceClient

from model.export.model_dir import export_model_dir
from model.families.bart.classifier import bart_classifier_config, import_bart_classifier
from model.families.bart.importer import BartImportError
from model.families.bart.random_checkpoint import BartShape, random_bart_classifier
from model.families.choice import family_of
from model.families.cross_encoder.importer import import_cross_encoder
from model.families.cross_encoder.random_checkpoint import CrossEncoderShape, random_cross_encoder
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .http_client import http
from .model_cache import built
from .slow_tests import slow_fixture

transformers = pytest.importorskip("transformers")

SHAPES = {
    "bart-nli-h4-2x1": BartShape(d_model=32, heads=4, encoder_layers=2, decoder_layers=1, d_ff=64, max_positions=64),
    "bart-nli-scaled-h2-1x2": BartShape(
        d_model=48, heads=2, encoder_layers=1, decoder_layers=2, d_ff=96, scale_embedding=True, max_positions=64
    ),
}
SERVED = "bart-nli-h4-2x1"
BERT_NLI_LABELS = ("contradiction", "entailment", "neutral")  # the cross-encoder NLI models' order
TEXTS = ["three hundred and twelve", "seven thousand and four", "the cat sleeps on the warm windowsill"]
CANDIDATES = ["numbers", "animals", "weather", "a very long label about the weather in spring"]
LONG = " ".join(["two hundred and five"] * 40)  # past 64 tokens: the premise is cut


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return {
        name: random_bart_classifier(tmp_path_factory.mktemp(name), shape, seed=seed)
        for seed, (name, shape) in enumerate(SHAPES.items())
    }


@slow_fixture(scope="module")
def nli_models() -> dict:
    """name -> (the checkpoint transformers' pipeline loads, our exported model directory)."""

    def build(root):
        source = random_bart_classifier(root / "bart-src", SHAPES[SERVED], seed=0)
        export_model_dir(import_bart_classifier(source, root / "bart-nli", "bart-nli"), progress_stream=io.StringIO())
        shape = CrossEncoderShape(labels=BERT_NLI_LABELS, max_length=64)
        cross_encoder = random_cross_encoder(root / "bert-src", shape, seed=3)
        ours = import_cross_encoder(cross_encoder, root / "bert-nli", "bert-nli")
        export_model_dir(ours, progress_stream=io.StringIO())

    root = built("zero-shot", build, extra_sources=("tests/test_zero_shot.py",))
    return {
        "bart-nli": (root / "bart-src", root / "bart-nli"),
        "bert-nli": (root / "bert-src" / "model", root / "bert-nli"),
    }


@slow_fixture(scope="module")
def server(nli_models, number_rankers):
    models = [nli_models["bart-nli"][1], nli_models["bert-nli"][1], number_rankers["numbers-language"]]
    server = ServerThread(models, rerank_max_documents=40)
    yield server
    server.close()


@pytest.fixture(scope="module")
def pipelines(nli_models):
    return {
        name: transformers.pipeline("zero-shot-classification", model=str(source), device="cpu")
        for name, (source, _) in nli_models.items()
    }


@pytest.fixture(autouse=True)
def client_may_connect(monkeypatch):
    """conftest.py puts huggingface_hub offline; InferenceClient here reaches only this server."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


def by_label(labels, scores) -> dict[str, float]:
    return dict(zip(labels, map(float, scores)))


def pipeline_scores(pipe, text: str, candidates: list[str], **options) -> dict[str, float]:
    answer = pipe(text, candidates, **options)
    return by_label(answer["labels"], answer["scores"])


def assert_scores(got: dict[str, float], want: dict[str, float]) -> None:
    assert got.keys() == want.keys()
    np.testing.assert_allclose([got[k] for k in want], list(want.values()), atol=2e-5)
    assert sorted(got, key=got.get) == sorted(want, key=want.get)  # the same order, best first


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_classifier_s_logits_equal_transformers(checkpoints, name, tmp_path):
    family, described = family_of(checkpoints[name])
    assert described == "bart classifier"
    from model.architecture.weights import load_model_dir

    _, config, ours = load_model_dir(family.importer(checkpoints[name], tmp_path / "ours", name))
    assert (config.task, config.head, config.classifier_input, config.labels, config.score_activation) == (
        "embedding",
        "classifier",
        "decoder_last_eos",
        ("contradiction", "neutral", "entailment"),
        "softmax",
    )
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(checkpoints[name]).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoints[name])
    batch = tokenizer(TEXTS, [f"This example is {c}." for c in CANDIDATES[:3]], padding=True, return_tensors="pt")
    assert len(set(batch["attention_mask"].sum(1).tolist())) > 1  # rows of several lengths, padded
    # in float64, where what is computed differently shows above rounding (float32's is ~1e-4 here: the
    # exported graph's float32 parity is test_the_exported_graph_keeps_parity's)
    with torch.no_grad():
        want = hf.double()(**batch).logits
        got = ours.double()(batch["input_ids"], batch["attention_mask"])[1]
    assert got.shape == want.shape == (3, 3)
    assert (got - want).abs().max() <= 1e-9


def test_the_exported_graph_keeps_parity(nli_models):
    manifest = json.loads((nli_models["bart-nli"][1] / "manifest.json").read_text())
    assert manifest["parity"]["logits_max_abs_diff"] <= 1e-4


@pytest.mark.parametrize("model", ["bart-nli", "bert-nli"])
def test_zero_shot_over_grpc_equals_the_pipeline(server, pipelines, model):
    stub = server.stub()
    for multi_label in (False, True):
        request = pb.ClassifyRequest(model=model, inputs=TEXTS, candidate_labels=CANDIDATES, multi_label=multi_label)
        response = stub.Classify(request, timeout=60)
        assert list(response.labels) == CANDIDATES  # in the request's order
        for text, row in zip(TEXTS, response.results):
            want = pipeline_scores(pipelines[model], text, CANDIDATES, multi_label=multi_label)
            assert_scores(by_label(response.labels, row.scores), want)
            assert row.label == max(want, key=want.get)
        if not multi_label:
            np.testing.assert_allclose([sum(r.scores) for r in response.results], 1.0, atol=1e-6)
    # a template of its own, and one candidate (scored on its own, as the pipeline does)
    template = "This text is about {}, I think."
    response = stub.Classify(
        pb.ClassifyRequest(model=model, inputs=TEXTS[:1], candidate_labels=["numbers"], hypothesis_template=template)
    )
    want = pipeline_scores(pipelines[model], TEXTS[0], ["numbers"], hypothesis_template=template)
    assert_scores(by_label(response.labels, response.results[0].scores), want)
    assert 0 < want["numbers"] < 1


def test_raw_scores_are_the_entailment_logits(server, pipelines):
    raw = server.stub().Classify(
        pb.ClassifyRequest(model="bert-nli", inputs=[TEXTS[0]], candidate_labels=CANDIDATES, raw_scores=True)
    )
    pipe = pipelines["bert-nli"]
    pairs = pipe.tokenizer(
        [TEXTS[0]] * len(CANDIDATES), [f"This example is {c}." for c in CANDIDATES], padding=True, return_tensors="pt"
    )
    with torch.no_grad():
        logits = pipe.model(**pairs).logits
    want = logits[:, BERT_NLI_LABELS.index("entailment")].numpy()
    np.testing.assert_allclose(raw.results[0].scores, want, atol=1e-4)


def test_a_long_premise_is_cut_as_the_pipeline_cuts_it(server, pipelines):
    request = pb.ClassifyRequest(model="bart-nli", inputs=[LONG], candidate_labels=CANDIDATES)
    response = server.stub().Classify(request, timeout=60)
    assert_scores(
        by_label(response.labels, response.results[0].scores), pipeline_scores(pipelines["bart-nli"], LONG, CANDIDATES)
    )


def test_the_http_doors_answer_as_grpc(server, pipelines):
    url = f"http://localhost:{server.server.http.port}"
    grpc_answer = server.stub().Classify(
        pb.ClassifyRequest(model="bart-nli", inputs=TEXTS, candidate_labels=CANDIDATES, multi_label=True)
    )
    grpc_rows = [by_label(grpc_answer.labels, r.scores) for r in grpc_answer.results]
    # the base URL in huggingface_hub's shape, a batch of texts: each text's labels, best first
    parameters = {"candidate_labels": CANDIDATES, "multi_label": True}
    answer = http().post(url, json={"model": "bart-nli", "inputs": TEXTS, "parameters": parameters}, timeout=60)
    assert answer.status_code == 200, answer.text
    for row, want in zip(answer.json(), grpc_rows):
        assert [x["label"] for x in row] == sorted(want, key=lambda k: -want[k])
        assert_scores({x["label"]: x["score"] for x in row}, want)
    # huggingface_hub's zero_shot_classification at the base URL: the first NLI model served, by default
    client = InferenceClient(base_url=url)
    labels = client.zero_shot_classification(TEXTS[0], CANDIDATES, multi_label=True)
    assert_scores({x.label: x.score for x in labels}, grpc_rows[0])
    assert [x.label for x in labels] == sorted(grpc_rows[0], key=lambda k: -grpc_rows[0][k])
    template = "This text is about {}."
    one = client.zero_shot_classification(TEXTS[1], ",".join(CANDIDATES[:3]), hypothesis_template=template)
    want = pipeline_scores(pipelines["bart-nli"], TEXTS[1], CANDIDATES[:3], hypothesis_template=template)
    assert_scores({x.label: x.score for x in one}, want)
    # KServe through tritonclient: the labels in a parameter, comma-separated (parameters are scalars)
    kserve = triton.InferenceServerClient(f"localhost:{server.server.http.port}")
    outputs = kserve.get_model_metadata("bart-nli")["outputs"]
    assert outputs == [{"name": "scores", "datatype": "FP32", "shape": [-1, -1]}]
    text = triton.InferInput("text", [len(TEXTS)], "BYTES")
    text.set_data_from_numpy(np.array(TEXTS, dtype=object))
    parameters = {"candidate_labels": ", ".join(CANDIDATES), "multi_label": True}
    scores = kserve.infer("bart-nli", [text], parameters=parameters).as_numpy("scores")
    assert scores.shape == (len(TEXTS), len(CANDIDATES))
    for row, want in zip(scores, grpc_rows):
        assert_scores(by_label(CANDIDATES, row), want)


def refusal(stub, **fields) -> str:
    with pytest.raises(grpc.RpcError) as error:
        stub.Classify(pb.ClassifyRequest(**{"model": "bart-nli", "inputs": TEXTS[:1], **fields}), timeout=60)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return error.value.details()


def test_what_zero_shot_cannot_take_is_refused_by_field(server):
    stub = server.stub()
    details = refusal(stub, model="numbers-language", candidate_labels=["numbers"])
    assert "candidate_labels" in details and "no entailment label" in details and "fr" in details
    assert "hypothesis_template" in refusal(stub, candidate_labels=["a"], hypothesis_template="No label here.")
    assert "hypothesis_template" in refusal(stub, candidate_labels=["a"], hypothesis_template="It is {label}.")
    assert "candidate_labels[1]: empty text" in refusal(stub, candidate_labels=["a", ""])
    too_many = refusal(stub, inputs=TEXTS, candidate_labels=[f"label {i}" for i in range(14)])
    assert "3 texts x 14 labels = 42 pairs; at most 40" in too_many
    long_label = refusal(stub, candidate_labels=[" ".join(["weather"] * 80)])
    assert "hypothesis_template: too long to leave room for a text in 64 tokens" in long_label
    url = f"http://localhost:{server.server.http.port}"
    body = {"model": "bart-nli", "inputs": "a", "parameters": {"candidate_labels": " , "}}
    answer = http().post(url, json=body, timeout=60)
    assert answer.status_code == 422 and answer.json()["error"].startswith("candidate_labels: empty")
    # the server serves on: a call after the refusals is answered
    assert stub.Classify(pb.ClassifyRequest(model="bart-nli", inputs=TEXTS, candidate_labels=["numbers", "x"]))


def test_the_importer_refuses_a_classifier_without_labels(checkpoints, tmp_path):
    source = tmp_path / "one-label"
    shutil.copytree(checkpoints[SERVED], source)
    config = json.loads((source / "config.json").read_text())
    config["id2label"], config["label2id"] = {"0": "LABEL_0"}, {"LABEL_0": 0}
    (source / "config.json").write_text(json.dumps(config))
    with pytest.raises(BartImportError, match="id2label of at least 2 labels"):
        bart_classifier_config(source)
