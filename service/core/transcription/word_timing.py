"""Word timestamps as openai-whisper's timing.py makes them, in numpy: the alignment heads' cross-attention
over the window's audio frames (from the word-alignment graph), normalised per head over the tokens,
median-filtered along time, averaged over heads; dynamic time warping of tokens against frames; each word
starting and ending where the path jumps to its first token and past its last; then openai's corrections
(long words at sentence and segment edges truncated, punctuation merged into its word, segment edges moved
to their words)."""

from __future__ import annotations

import string
from dataclasses import dataclass, field

import numpy as np

TOKENS_PER_SECOND = 50  # a timestamp's 20 ms: the convolution stem halves the 10 ms frames
MEDIAN_FILTER_WIDTH = 7
PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
SENTENCE_END_MARKS = ".。!！?？"
# Languages written without spaces between words: a word is each run of tokens that decodes whole.
UNSPACED_LANGUAGES = ("zh", "ja", "th", "lo", "my", "yue")


@dataclass
class WordTiming:
    word: str
    tokens: list[int]
    start: float  # seconds from the window's start
    end: float
    probability: float


@dataclass
class TimedSegment:
    """A window's segment while its words are placed: openai's corrections move its edges."""

    start: float
    end: float
    tokens: list[int]
    words: list[dict] = field(default_factory=list)  # word, start, end, probability (seconds in the recording)


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """The median of each `width` values along the last axis, the edges reflected (timing.median_filter)."""
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    return np.median(np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1), axis=-1).astype(x.dtype)


def dtw(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path through x (N, M) -> (row indices, column indices) along it: timing.dtw_cpu,
    its ties broken alike, computed one anti-diagonal at a time. Its costs are float64: dtw_cpu allocates
    them as float32 ones times inf, which numba (unlike numpy 2) makes float64."""
    n, m = x.shape
    x = x.astype(np.float64)
    cost = np.full((n + 1, m + 1), np.inf, np.float64)
    trace = np.full((n + 1, m + 1), -1, np.int8)
    cost[0, 0] = 0
    for diagonal in range(2, n + m + 1):
        i = np.arange(max(1, diagonal - m), min(n, diagonal - 1) + 1)
        j = diagonal - i
        c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
        first = (c0 < c1) & (c0 < c2)
        second = ~first & (c1 < c0) & (c1 < c2)
        cost[i, j] = x[i - 1, j - 1] + np.where(first, c0, np.where(second, c1, c2))
        trace[i, j] = np.where(first, 0, np.where(second, 1, 2))
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j, path = n, m, []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        step = trace[i, j]
        i, j = (i - 1, j - 1) if step == 0 else (i - 1, j) if step == 1 else (i, j - 1)
    rows, columns = np.array(path[::-1]).T
    return rows, columns


def split_on_unicode(decode, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
    """Tokens grouped into the shortest runs that decode into whole characters (Tokenizer.split_tokens_on_unicode)."""
    whole = decode(tokens)
    words, word_tokens, current, offset = [], [], [], 0
    for token in tokens:
        current.append(token)
        decoded = decode(current)
        if "\ufffd" not in decoded or whole[offset + decoded.index("\ufffd")] == "\ufffd":
            words.append(decoded)
            word_tokens.append(current)
            current, offset = [], offset + len(decoded)
    return words, word_tokens


def split_to_word_tokens(
    decode, tokens: list[int], end_of_text: int, language: str
) -> tuple[list[str], list[list[int]]]:
    """Tokens grouped into words (Tokenizer.split_to_word_tokens): at spaces, punctuation and special tokens,
    or at every character in a language written without spaces."""
    subwords, subword_tokens = split_on_unicode(decode, tokens)
    if language in UNSPACED_LANGUAGES:
        return subwords, subword_tokens
    words, word_tokens = [], []
    for subword, pieces in zip(subwords, subword_tokens):
        apart = pieces[0] >= end_of_text or subword.startswith(" ") or subword.strip() in string.punctuation
        if apart or not words:
            words.append(subword)
            word_tokens.append(list(pieces))
        else:
            words[-1] += subword
            word_tokens[-1].extend(pieces)
    return words, word_tokens


def find_alignment(
    weights: np.ndarray,
    next_token_probabilities: np.ndarray,
    words: list[str],
    word_tokens: list[list[int]],
    sot_length: int,
    frames: int,
) -> list[WordTiming]:
    """timing.find_alignment from the graph's outputs for [sot sequence, <|notimestamps|>, text, <|endoftext|>]:
    weights (heads, tokens, window frames / 2), softmax over the whole window; next_token_probabilities
    (tokens - 1,); words and word_tokens: the text and <|endoftext|> split into words; frames: the window's
    10 ms frames that hold audio."""
    n_text = sum(len(t) for t in word_tokens) - 1
    if n_text == 0 or len(word_tokens) <= 1 or frames < 2:  # no text, or no frame of audio to place it in
        return []
    heard = weights[:, :, : frames // 2]
    heard = heard / heard.sum(axis=-1, keepdims=True)  # the softmax over the heard frames alone
    normalised = (heard - heard.mean(axis=-2, keepdims=True)) / heard.std(axis=-2, keepdims=True)
    matrix = median_filter(normalised.astype(np.float32), MEDIAN_FILTER_WIDTH).mean(axis=0)
    text_indices, time_indices = dtw(-matrix[sot_length:-1])
    probabilities = next_token_probabilities[sot_length : sot_length + n_text]
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = time_indices[jumps] / TOKENS_PER_SECOND
    starts, ends = jump_times[boundaries[:-1]], jump_times[boundaries[1:]]
    return [
        WordTiming(word, tokens, float(start), float(end), float(np.mean(probabilities[i:j])))
        for word, tokens, start, end, i, j in zip(words, word_tokens, starts, ends, boundaries[:-1], boundaries[1:])
    ]


def merge_punctuations(alignment: list[WordTiming], prepended: str, appended: str) -> None:
    """Opening marks joined to the word after them, closing marks to the word before (in place)."""
    i, j = len(alignment) - 2, len(alignment) - 1
    while i >= 0:
        previous, following = alignment[i], alignment[j]
        if previous.word.startswith(" ") and previous.word.strip() in prepended:
            following.word = previous.word + following.word
            following.tokens = previous.tokens + following.tokens
            previous.word, previous.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(alignment):
        previous, following = alignment[i], alignment[j]
        if not previous.word.endswith(" ") and following.word in appended:
            previous.word = previous.word + following.word
            previous.tokens = previous.tokens + following.tokens
            following.word, following.tokens = "", []
        else:
            i = j
        j += 1


def place_words(
    segments: list[TimedSegment], alignment: list[WordTiming], end_of_text: int, time_offset: float, last_speech: float
) -> None:
    """timing.add_word_timestamps after find_alignment: the words given to their segments (in place), long
    words at sentence ends and after pauses truncated, and segment edges moved to their words'."""
    durations = np.array([t.end - t.start for t in alignment])
    durations = durations[durations.nonzero()]
    median = min(0.7, float(np.median(durations)) if len(durations) > 0 else 0.0)
    longest = median * 2
    if len(durations) > 0:  # a word at a sentence's edge is no longer than twice the median
        for i in range(1, len(alignment)):
            if alignment[i].end - alignment[i].start > longest:
                if alignment[i].word in SENTENCE_END_MARKS:
                    alignment[i].end = alignment[i].start + longest
                elif alignment[i - 1].word in SENTENCE_END_MARKS:
                    alignment[i].start = alignment[i].end - longest
    merge_punctuations(alignment, PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS)
    index = 0
    for segment in segments:
        text_tokens = [t for t in segment.tokens if t < end_of_text]
        saved, words = 0, []
        while index < len(alignment) and saved < len(text_tokens):
            timing = alignment[index]
            if timing.word:
                start, end = round(time_offset + timing.start, 2), round(time_offset + timing.end, 2)
                words.append({"word": timing.word, "start": start, "end": end, "probability": timing.probability})
            saved += len(timing.tokens)
            index += 1
        if words:
            _correct_edges(segment, words, median, longest, last_speech)
            last_speech = segment.end
        segment.words = words


def _correct_edges(segment: TimedSegment, words: list[dict], median: float, longest: float, last_speech: float):
    """The first word after a pause, and a segment's first and last words, kept to plausible lengths."""
    first_long = words[0]["end"] - words[0]["start"] > longest
    pair_long = len(words) > 1 and words[1]["end"] - words[0]["start"] > longest * 2
    if words[0]["end"] - last_speech > median * 4 and (first_long or pair_long):
        if len(words) > 1 and words[1]["end"] - words[1]["start"] > longest:
            boundary = max(words[1]["end"] / 2, words[1]["end"] - longest)
            words[0]["end"] = words[1]["start"] = boundary
        words[0]["start"] = max(0, words[0]["end"] - longest)
    if segment.start < words[0]["end"] and segment.start - 0.5 > words[0]["start"]:
        words[0]["start"] = max(0, min(words[0]["end"] - median, segment.start))
    else:
        segment.start = words[0]["start"]
    if segment.end > words[-1]["start"] and segment.end + 0.5 < words[-1]["end"]:
        words[-1]["end"] = max(words[-1]["start"] + median, segment.end)
    else:
        segment.end = words[-1]["end"]
