"""The multilingual families' tokenizers, token-exact with transformers' on hypothesis-drawn text:
M2M100Tokenizer (sentencepiece and vocab.json), NllbTokenizer (both places of the source's code),
MBart50Tokenizer and MBartTokenizer (mBART-25's, the code last), each framing the source with its language code; and the codes a request may use."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.bundled.number_sentences import sentences
from model.families.multilingual.importer import language_fields
from model.families.multilingual.random_checkpoint import MultilingualShape, random_multilingual_checkpoint
from modeldir.config import ModelConfig
from modeldir.language_tokenizer import LanguageTokenizer, load_model_tokenizer
from modeldir.languages import Languages, UnknownLanguage

transformers = pytest.importorskip("transformers")

# name -> (shape, transformers' family for the import, a source language in the checkpoint's codes)
FAMILIES = {
    "m2m100": (MultilingualShape("m2m100"), "m2m_100", "fr"),
    "nllb": (MultilingualShape("nllb"), "m2m_100", "fra_Latn"),
    "nllb-legacy": (MultilingualShape("nllb", legacy_behaviour=True), "m2m_100", "deu_Latn"),
    "mbart50": (MultilingualShape("mbart50"), "mbart", "es_XX"),
    "mbart25": (MultilingualShape("mbart25"), "mbart", "de_DE"),
}
MAX_TOKENS = 48
# Text in several scripts, with the specials' spellings and spaces of every kind among it.
ALPHABET = st.sampled_from(
    list("abcdefghijklmnopqrstuvwxyzéèàüößñçABCDEFGXYZ0123456789 .,!?-'\"\t\n")
    + ["東京", "Привет", "مرحبا", "☃", "😀", "\u00a0", "  ", "<s>", "</s>", "<unk>", "<pad>", "__fr__", "fra_Latn"]
)


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """name -> (transformers' tokenizer for the source language, ours, the source language)."""
    out = {}
    for seed, (name, (shape, family, source)) in enumerate(FAMILIES.items()):
        directory = random_multilingual_checkpoint(tmp_path_factory.mktemp(name), shape, seed)
        hf = transformers.AutoTokenizer.from_pretrained(directory, src_lang=source)
        fields = language_fields(directory, family)
        assert fields["target_language"] == ("decoder_start" if name == "mbart25" else "first_token")
        config = ModelConfig(
            task="seq2seq",
            vocab_size=1,
            d_model=8,
            n_heads=1,
            d_ff=8,
            n_encoder_layers=1,
            n_decoder_layers=1,
            max_positions=MAX_TOKENS,
            eos_id=2,
            **fields,
        )
        path = directory / "tokenizer.json" if config.tokenizer == "tokenizers" else directory
        out[name] = (hf, load_model_tokenizer(config, path), source)
    return out


def language_ids(tokenizer: LanguageTokenizer) -> set[int]:
    return set(tokenizer.ids.values())


@pytest.mark.parametrize("name", list(FAMILIES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(ALPHABET, max_size=40), real=st.sampled_from(sentences(40, seed=7)))
def test_ids_match_transformers(tokenizers, name, parts, real):
    hf, ours, source = tokenizers[name]
    for text in (real, "".join(parts), real + "".join(parts)):
        expected = hf(text, truncation=True, max_length=MAX_TOKENS)["input_ids"]
        (encoded,) = ours.encode([text], source=source)
        assert encoded.ids == expected, (name, text)
        assert encoded.truncated == (len(hf(text)["input_ids"]) > MAX_TOKENS)


@pytest.mark.parametrize("name", list(FAMILIES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_decoding_matches_transformers_without_the_language_codes(tokenizers, name, data):
    """transformers 5 keeps M2M100's codes in decoded text (it no longer marks them special); ours never
    has a language code in an answer, so the codes are left out of what is compared."""
    hf, ours, _ = tokenizers[name]
    ids = data.draw(st.lists(st.integers(0, len(hf) - 1), max_size=30))
    ids = [i for i in ids if i not in language_ids(ours)]
    assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=True)


def test_the_source_code_goes_where_the_checkpoint_puts_it(tokenizers):
    places = (
        ("nllb", "first"),
        ("nllb-legacy", "last"),
        ("m2m100", "first"),
        ("mbart50", "first"),
        ("mbart25", "last"),
    )
    for name, place in places:
        hf, ours, source = tokenizers[name]
        (encoded,) = ours.encode(["one hundred"], source=source)
        code = ours.language_id(source)
        assert encoded.ids[0 if place == "first" else -1] == code and encoded.ids.count(code) == 1
        assert encoded.ids[-1 if place == "first" else -2] == 2  # </s>


def test_the_codes_are_the_checkpoints_and_their_ids_transformers(tokenizers):
    for name, count in (("m2m100", 100), ("nllb", 202), ("mbart50", 52), ("mbart25", 25)):
        hf, ours, _ = tokenizers[name]
        assert len(ours.languages.codes) == count
        for code in ours.languages.codes[::7]:
            assert ours.language_id(code) == hf.convert_tokens_to_ids(ours.languages.token_of(code)), code


NLLB_LIKE = Languages(
    ("eng_Latn", "fra_Latn", "zho_Hans", "zho_Hant", "srp_Cyrl", "por_Latn"), source="prefix", target="first_token"
)


@pytest.mark.parametrize(
    "asked, code",
    [
        ("fra_Latn", "fra_Latn"),
        ("FRA_LATN", "fra_Latn"),
        ("fr", "fra_Latn"),
        ("fra", "fra_Latn"),
        ("fr-FR", "fra_Latn"),
        ("fr-Latn", "fra_Latn"),
        ("zh-Hant", "zho_Hant"),
        ("zh-Hans-CN", "zho_Hans"),
        ("sr", "srp_Cyrl"),
        ("pt-BR", "por_Latn"),
    ],
)
def test_bcp47_and_iso_codes_name_the_checkpoints_code(asked, code):
    assert NLLB_LIKE.resolve("target_language", asked) == code


@pytest.mark.parametrize(
    "asked, message",
    [
        ("zh", "'zh' names several languages of this model: zho_Hans, zho_Hant"),
        ("zh-TW", "several languages"),
        ("sr-Latn", "not a language of this model"),
        ("de", "not a language of this model; it serves"),
        ("xx", "not a language of this model"),
        ("", "not a language of this model"),
    ],
)
def test_unknown_and_ambiguous_codes_are_refused_naming_the_field(asked, message):
    with pytest.raises(UnknownLanguage, match=message) as error:
        NLLB_LIKE.resolve("target_language", asked)
    assert error.value.field == "target_language"


def test_the_listing_puts_the_nearest_first():
    assert NLLB_LIKE.listing("zho").startswith("zho_Hans, zho_Hant")
    assert NLLB_LIKE.listing("fre").startswith("fra_Latn")
    many = Languages(tuple(f"l{i:02d}" for i in range(40)))
    assert many.listing("l17").startswith("l17") and many.listing("l17").endswith("and 28 more (40 in all)")


@given(
    asked=st.one_of(st.text(max_size=24), st.from_regex(r"[a-zA-Z]{2,3}([-_][A-Za-z0-9]{2,8}){0,3}", fullmatch=True))
)
def test_any_code_resolves_to_a_served_one_or_is_refused_by_name(asked):
    try:
        assert NLLB_LIKE.resolve("source_language", asked) in NLLB_LIKE.codes
    except UnknownLanguage as error:
        assert error.field == "source_language" and repr(asked) in error.message
