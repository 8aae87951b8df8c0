"""The tokenizer of a multilingual model: its sources framed with their language codes per call
(modeldir/languages.py), over the checkpoint's own tokenizer; and M2M100's tokenizer, which has no
tokenizer.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import sentencepiece

from .byte_tokenizer import FIRST_SENTINEL, ByteTokenizer
from .config import ModelConfig
from .files import BYTE_KIND, M2M100_TOKENIZER_FILES
from .languages import Languages
from .stream_decoding import StreamDecoder
from .tokenizer import Encoded, MarianTokenizer, TextTokenizer, load_tokenizer


class M2M100Tokenizer(MarianTokenizer):
    """As transformers' M2M100Tokenizer: pieces of sentencepiece.bpe.model through vocab.json (unknown
    pieces: <unk>), the language tokens (__fr__) after the vocabulary's last id in the checkpoint's order.
    The text of <s>, </s>, <pad> and <unk> in the input stands for those tokens; a language token's text is
    text (transformers 5 no longer registers them as added tokens). Ids -> text as Marian's, with the
    language tokens left out too (transformers 5 keeps them in the text: the codes are never part of an
    answer here)."""

    codes_in_text = False  # no >>fra<< codes: such text is text

    def __init__(self, directory: Path, max_tokens: int, language_tokens: tuple[str, ...]):
        directory = Path(directory)
        spm_file, vocab_file = (directory / name for name in M2M100_TOKENIZER_FILES)
        self.max_tokens = max_tokens
        self.source = self.target = sentencepiece.SentencePieceProcessor(model_file=str(spm_file))
        vocab = json.loads(vocab_file.read_text(encoding="utf-8"))
        self.SPECIALS = ("<s>", "</s>", "<pad>", "<unk>")
        missing = [t for t in self.SPECIALS if t not in vocab]
        if missing:
            raise ValueError(f"{vocab_file} lacks the special tokens {', '.join(missing)}")
        self.vocab = {**vocab, **{token: len(vocab) + i for i, token in enumerate(language_tokens)}}
        self.target_vocab = self.vocab
        self.pieces = {i: piece for piece, i in self.vocab.items()}
        self.unk_id, self.eos_id = self.vocab["<unk>"], self.vocab["</s>"]
        self.special_ids = {self.vocab[t] for t in (*self.SPECIALS, *language_tokens)}
        self._specials = re.compile("(" + "|".join(re.escape(t) for t in self.SPECIALS) + ")")
        self.skipped = frozenset((*self.SPECIALS, *language_tokens))


class LanguageTokenizer:
    """A multilingual model's tokenizer: encode takes the call's source and target language (the
    checkpoint's codes, resolved by Languages.resolve) and frames each text as the checkpoint does;
    everything else is its own tokenizer's."""

    def __init__(self, base: TextTokenizer | MarianTokenizer, languages: Languages, eos_id: int):
        self.base, self.languages, self.eos_id, self.max_tokens = base, languages, eos_id, base.max_tokens
        self.ids = {code: base.token_to_id(languages.token_of(code)) for code in languages.codes}
        missing = [languages.token_of(code) for code, i in self.ids.items() if i is None]
        if missing:
            raise ValueError(f"the tokenizer has no token for the languages {', '.join(missing[:8])}")
        self.special_ids = frozenset(base.special_ids) | frozenset(self.ids.values())

    def language_id(self, code: str) -> int:
        return self.ids[code]

    def encode(self, texts: list[str], source: str | None = None, target: str | None = None) -> list[Encoded]:
        """Each text framed with the codes of `source` and `target` where the checkpoint puts them
        (without a source: none; the first-token target is the decoder's, not here)."""
        source_id = self.ids[source] if source else None
        target_id = self.ids[target] if target and self.languages.target == "source_prefix" else None
        encoded = []
        for content in self.base.content(texts):
            ids, cut = self.languages.frame(content, source_id, target_id, self.eos_id, self.max_tokens)
            encoded.append(Encoded(ids, self.base.tokens(ids), cut))
        return encoded

    def encode_target(self, text: str) -> Encoded:
        return self.base.encode_target(text)

    def tokens(self, ids: list[int]) -> list[str]:
        return self.base.tokens(ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.base.decode(ids, skip_special_tokens=skip_special_tokens)

    def stream_decoder(self) -> StreamDecoder:
        return self.base.stream_decoder()

    def token_to_id(self, token: str) -> int | None:
        return self.base.token_to_id(token)


def languages_of(config: ModelConfig) -> Languages | None:
    """The languages a model serves and where their codes go; None for a model of one language pair."""
    if not config.languages:
        return None
    return Languages(config.languages, config.language_token, config.source_language, config.target_language)


def load_model_tokenizer(
    config: ModelConfig, path: Path
) -> TextTokenizer | MarianTokenizer | ByteTokenizer | LanguageTokenizer:
    """A model directory's tokenizer, by its config (path: tokenizer.json, or the directory for the
    tokenizers that read several files)."""
    languages = languages_of(config)
    if config.tokenizer == "m2m100":
        tokens = tuple(languages.token_of(code) for code in languages.codes) if languages else ()
        base = M2M100Tokenizer(path, config.max_input_tokens, tokens)
    elif config.tokenizer == BYTE_KIND:
        base = ByteTokenizer(config.max_input_tokens, extra_ids=config.vocab_size - FIRST_SENTINEL)
    else:
        base = load_tokenizer(config.tokenizer, path, config.max_input_tokens)
    return LanguageTokenizer(base, languages, config.eos_id) if languages else base
