"""attnserve.v1 Translate on a real server: documents cut into sentences and put back together line for
line (each sentence translated as Generate translates it), under concurrency; the source detected; calls
routed to the served model that covers the pair; confidences equal to transformers' token log-
probabilities, alternatives equal to its n best; limits and bad input refused by name."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import openai
import pytest
import torch

from model.bundled.multilingual_numbers import DIGITS, example
from service.grpc_api.pb import inference_pb2 as pb

transformers = pytest.importorskip("transformers")
CHECKPOINT = Path(__file__).resolve().parent.parent / "checkpoints" / "numbers-multilingual"
MULTILINGUAL = "numbers-multilingual"


@pytest.fixture(scope="module")
def stub(translating):
    return translating.stub()


def translate(stub, texts, target, source="", **options) -> list[pb.Translation]:
    request = pb.TranslateRequest(texts=texts, target_language=target, source_language=source, **options)
    return list(stub.Translate(request, timeout=120).translations)


def generated(stub, text: str, target: str, source: str = DIGITS, model: str = MULTILINGUAL) -> str:
    request = pb.GenerateRequest(model=model, input=text, source_language=source, target_language=target)
    return stub.Generate(request, timeout=60).text


def refusal(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value.code(), raised.value.details()


def test_a_document_keeps_its_lines_and_each_sentence_is_translated_as_generate_does(stub):
    document = "312405. 17.\n\n  9\r\n1001!\n"
    (t,) = translate(stub, [document], "fra_Latn", source="zxx")
    words = {n: generated(stub, n, "fra_Latn") for n in ("312405.", "17.", "9", "1001!")}
    assert t.text == f"{words['312405.']} {words['17.']}\n\n  {words['9']}\r\n{words['1001!']}\n"
    assert t.sentences == 4 and t.model == MULTILINGUAL
    assert (t.source_language, t.target_language) == (DIGITS, "fra_Latn")
    assert not t.HasField("detected_confidence")  # the source was given
    assert t.prompt_tokens > 0 and t.generated_tokens > 0


def test_documents_come_back_whole_and_in_order_under_concurrency(stub):
    numbers = [[7 * i + j for j in range(5)] for i in range(24)]
    documents = ["\n".join(str(n) for n in line) for line in numbers]

    def one(document: str) -> str:
        return translate(stub, [document], "deu_Latn", source=DIGITS)[0].text

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(one, documents))
    for line, answer in zip(numbers, answers):
        assert answer.split("\n") == [example(n, DIGITS, "deu_Latn")[1] for n in line]


def test_texts_of_one_call_are_answered_in_order(stub):
    texts = [str(n) for n in (5, 80, 312405, 21)]
    answers = translate(stub, texts, "es", source="zxx")
    assert [a.text for a in answers] == [example(int(n), DIGITS, "spa_Latn")[1] for n in texts]


def test_an_unset_source_is_detected_in_each_text(stub):
    texts = [
        "trois cent douze mille quatre cent cinq",
        "three hundred and twelve thousand, four hundred and five",
        "312405",
    ]
    answers = translate(stub, texts, "zxx")
    assert [a.source_language for a in answers] == ["fra_Latn", "eng_Latn", DIGITS]
    assert all(a.detected_confidence > 0.5 for a in answers)
    assert [a.text for a in answers[:2]] == ["312405", "312405"]
    (auto,) = translate(stub, ["dreihundertzwölftausendvierhundertfünf"], "zxx", source="auto")
    assert (auto.source_language, auto.text) == ("deu_Latn", "312405")


def test_a_call_naming_no_model_goes_to_the_one_that_covers_its_pair(stub):
    (italian,) = translate(stub, ["Hello there."], "it", source="en")
    assert italian.model == "marian-en-it" and italian.text == generated(stub, "Hello there.", "", "", "marian-en-it")
    (french,) = translate(stub, ["12"], "fr", source="zxx")
    assert french.model == MULTILINGUAL and french.text == "douze"
    code, details = refusal(lambda: translate(stub, ["Bonjour"], "it", source="fr"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "'fr'" in details and "en to it only" in details
    code, details = refusal(lambda: translate(stub, ["12"], "ja"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("target_language: 'ja': no served model")
    assert "fra_Latn" in details and "it" in details


def reference(text: str, source: str, target: str, **generate) -> tuple[transformers.GenerationMixin, dict, object]:
    model = transformers.M2M100ForConditionalGeneration.from_pretrained(CHECKPOINT).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(CHECKPOINT)
    tokenizer.src_lang = source
    batch = tokenizer([text], return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **batch,
            forced_bos_token_id=tokenizer.convert_tokens_to_ids(target),
            max_new_tokens=30,
            output_scores=True,
            return_dict_in_generate=True,
            **generate,
        )
    return model, tokenizer, out


@pytest.mark.parametrize("number", [7, 312405, 999999999])
def test_a_confidence_is_the_mean_log_probability_of_the_tokens_transformers_gives(stub, number):
    text = str(number)
    model, _, out = reference(text, DIGITS, "eng_Latn", num_beams=1)
    steps = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)[0]
    tokens = out.sequences[0, 1:]
    chosen = steps[1:][tokens[1:] != model.config.pad_token_id]  # after the forced code, eos included
    (t,) = translate(stub, [text], "eng_Latn", source=DIGITS, return_scores=True)
    assert t.score == pytest.approx(float(chosen.mean()), abs=1e-4)
    assert t.score < 0


def test_alternatives_are_the_next_best_beams(stub):
    _, tokenizer, out = reference("312405", DIGITS, "fra_Latn", num_beams=4, num_return_sequences=3)
    best = tokenizer.batch_decode(out.sequences, skip_special_tokens=True)
    (t,) = translate(stub, ["312405"], "fra_Latn", source=DIGITS, alternatives=2, num_beams=4, return_scores=True)
    assert [t.text, *t.alternatives] == best
    assert t.score < 0
    one_line = "312405\n7"
    (t,) = translate(stub, [one_line], "fra_Latn", source=DIGITS, alternatives=1)
    assert len(t.alternatives) == 1 and t.alternatives[0].count("\n") == 1


def test_a_sentence_longer_than_the_model_takes_is_cut_never_truncated(stub, translating):
    limit = translating.engine_core.registry.models[MULTILINGUAL].max_input_tokens
    long_line = " ".join(["7"] * limit)  # one "sentence" of about twice the tokens the model takes
    (t,) = translate(stub, [long_line], "eng_Latn", source=DIGITS, sentence_splitting=pb.SENTENCE_SPLITTING_NONE)
    assert t.sentences >= 2
    assert t.prompt_tokens >= limit  # every token was read: nothing cut off


def test_limits_and_bad_input_are_refused_by_name(stub):
    cases = [
        (dict(texts=[]), grpc.StatusCode.INVALID_ARGUMENT, "texts: empty"),
        (dict(texts=["1", ""]), grpc.StatusCode.INVALID_ARGUMENT, "texts[1]: empty text"),
        (dict(texts=["  \n "]), grpc.StatusCode.INVALID_ARGUMENT, "texts: only whitespace"),
        (dict(texts=["1"] * 51), grpc.StatusCode.INVALID_ARGUMENT, "at most 50 per call (translation_max_texts)"),
        (dict(texts=["1 " * 3001]), grpc.StatusCode.INVALID_ARGUMENT, "at most 6000 per call (translation_max_"),
        (dict(texts=["1. " * 81]), grpc.StatusCode.INVALID_ARGUMENT, "81 sentences; at most 80 per call"),
        (dict(texts=["1"], target_language=""), grpc.StatusCode.INVALID_ARGUMENT, "target_language: required"),
        (dict(texts=["1"], num_beams=99), grpc.StatusCode.INVALID_ARGUMENT, "num_beams: 99; at most 8"),
        (dict(texts=["1"], alternatives=9), grpc.StatusCode.INVALID_ARGUMENT, "num_beams: 10; at most 8"),
        (dict(texts=["1"], max_new_tokens=999), grpc.StatusCode.INVALID_ARGUMENT, "max_new_tokens: 999; at most"),
        (dict(texts=["1"], sentence_splitting=7), grpc.StatusCode.INVALID_ARGUMENT, "sentence_splitting: '7'"),
        (dict(texts=["1"], model="numbers"), grpc.StatusCode.INVALID_ARGUMENT, "model 'numbers' names no languages"),
        (dict(texts=["1"], model="nope"), grpc.StatusCode.NOT_FOUND, "'nope' is not served"),
        (dict(texts=["1"], source_language="xx"), grpc.StatusCode.INVALID_ARGUMENT, "source_language: 'xx'"),
    ]
    for fields, status, message in cases:
        request = pb.TranslateRequest(**{"target_language": "fr", "source_language": "zxx", **fields})
        code, details = refusal(lambda: stub.Translate(request, timeout=60))
        assert (code, message in details) == (status, True), (fields, details)
    assert translate(stub, ["6"], "en", source="zxx")[0].text == "six"  # and it serves on


@pytest.fixture(scope="module")
def aligning(multilingual_numbers_dir):
    from testing.server_thread import ServerThread

    server = ServerThread([multilingual_numbers_dir], attention_maps=True)
    yield server
    server.close()


@pytest.mark.parametrize(
    ("text", "source", "target"),
    [
        ("312405", DIGITS, "fra_Latn"),
        ("twenty-one thousand and seven", "eng_Latn", DIGITS),
        ("1001", DIGITS, "deu_Latn"),
    ],
)
def test_word_alignments_are_the_cross_attention_transformers_computes(aligning, text, source, target):
    from service.core.translation.alignment import align, words_of

    (t,) = translate(aligning.stub(), [text], target, source=source, return_alignment=True)
    (a,) = t.alignments
    model = transformers.M2M100ForConditionalGeneration.from_pretrained(CHECKPOINT, attn_implementation="eager")
    model.eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(CHECKPOINT)
    tokenizer.src_lang = source
    batch = tokenizer([text], return_tensors="pt")
    generated = tokenizer([t.text], add_special_tokens=False)["input_ids"][0]
    decoder = [model.config.decoder_start_token_id, tokenizer.convert_tokens_to_ids(target), *generated]
    with torch.no_grad():
        out = model(**batch, decoder_input_ids=torch.tensor([decoder]), output_attentions=True)
    layer = max(model.config.decoder_layers - 2, 0)
    weights = out.cross_attentions[layer][0].mean(dim=0).numpy()
    codes = set(tokenizer.convert_tokens_to_ids([source, target]))
    special = set(tokenizer.all_special_ids) | codes | {model.config.decoder_start_token_id}
    (source_ids,) = batch["input_ids"].tolist()
    source_words, source_word = words_of(
        tokenizer.convert_ids_to_tokens(source_ids), [i in special for i in source_ids]
    )
    target_words, target_word = words_of(tokenizer.convert_ids_to_tokens(decoder), [i in special for i in decoder])
    assert (list(a.source_words), list(a.target_words)) == (source_words, target_words)
    assert list(zip(a.pairs[::2], a.pairs[1::2])) == align(weights, source_word, target_word)
    assert {j for j in a.pairs[1::2]} == set(range(len(target_words)))  # every target word is aligned


def test_alignments_need_the_attention_graphs(stub, multilingual_numbers_dir):
    """Loaded by default (--tag-alignment) for a seq2seq model; on a server started without it (and without
    --attention-maps) nothing more is loaded, an alignment is refused by name and tags are placed by
    their share of the text."""
    from testing.server_thread import ServerThread

    (aligned,) = translate(stub, ["5"], "fr", source="zxx", return_alignment=True)
    assert aligned.text == "cinq" and list(aligned.alignments[0].target_words) == ["cinq"]
    server = ServerThread([multilingual_numbers_dir], tag_alignment=False)
    try:
        assert server.engine_core.registry.models[MULTILINGUAL].attention is None
        bare = server.stub()
        code, details = refusal(lambda: translate(bare, ["5"], "fr", source="zxx", return_alignment=True))
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert "--tag-alignment" in details and "--attention-maps" in details
        markup = pb.Markup(tag_handling="html")
        (t,) = translate(bare, ["<p>5</p><p><b>12</b></p>"], "fr", source="zxx", markup=markup)
        assert t.text == "<p>cinq</p><p><b>douze</b></p>"
    finally:
        server.close()


def test_generate_naming_languages_but_no_model_is_routed_by_its_pair(stub, translating):
    """The default seq2seq model here is `numbers`, which names no languages: a Generate (or a completion)
    that names a target goes to the model that covers its pair instead."""
    routed = stub.Generate(pb.GenerateRequest(input="12", source_language="zxx", target_language="fr"), timeout=60)
    assert (routed.model, routed.text) == (MULTILINGUAL, "douze")
    italian = stub.Generate(pb.GenerateRequest(input="Hello.", target_language="it"), timeout=60)
    assert italian.model == "marian-en-it"
    assert stub.Generate(pb.GenerateRequest(input="12"), timeout=60).model == "numbers"  # no languages: the default
    sdk = openai.OpenAI(base_url=f"http://localhost:{translating.server.http.port}/v1", api_key="unused", max_retries=0)
    completion = sdk.completions.create(
        model="", prompt="12", extra_body={"source_language": "zxx", "target_language": "de"}
    )
    assert (completion.model, completion.choices[0].text) == (MULTILINGUAL, "zwölf")


def test_the_graph_cut_for_tag_alignment_gives_the_whole_graphs_weights_in_batches(multilingual_numbers_dir):
    """The attention-map graph cut at load to the alignment layer (runner/cross_attention.py), run on a
    padded batch, gives each input's weights as the whole graph gives them one input at a time."""
    import numpy as np
    import onnxruntime as ort

    from service.runner.attention_maps import CROSS, AttentionMapsRunner
    from service.runner.cross_attention import CrossAttentionRunner, cut_graph

    path = multilingual_numbers_dir / "onnx" / "attention.onnx"
    whole = AttentionMapsRunner(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]), "seq2seq")
    graph, cut = cut_graph(path, 1)
    assert cut and len(graph) < path.stat().st_size
    runner = CrossAttentionRunner(ort.InferenceSession(graph, providers=["CPUExecutionProvider"]), cut)
    items = [([5, 17, 9, 2], [2, 30, 31], 1), ([8, 2], [2, 40, 41, 42, 43, 44], 1), ([7, 7, 7, 7, 7, 7, 2], [2], 1)]
    for (source, target, layer), weights in zip(items, runner.run_batch(items)):
        alone = whole.run(source, target, {CROSS: [layer]}).weights[CROSS][0].mean(axis=0)
        assert weights.shape == (len(target), len(source))
        np.testing.assert_allclose(weights, alone, atol=1e-6)
