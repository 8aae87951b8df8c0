"""Real English sentences, offline: taken from the docstrings of the Python standard library's source (read
with ast, never imported), for the quality checks of reduced-precision graphs. The same for a given
Python release; thousands of sentences written by people about real things, not word salads."""

from __future__ import annotations

import ast
import re
import sysconfig
from pathlib import Path

SKIPPED_PARTS = {"test", "tests", "idlelib", "lib2to3", "site-packages", "turtledemo", "ensurepip"}
SENTENCE_END = re.compile(r"(?<=[a-z0-9)][.!?])\s+(?=[A-Z])")
CODE_LIKE = re.compile(r"(>>>|::|\(\)|[=_{}\[\]<>|\\`*#@$%^~])")


def _docstrings(path: Path):
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="ignore"))
    except (SyntaxError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield doc


def _sentences(doc: str, min_words: int, max_words: int):
    for paragraph in re.split(r"\n\s*\n", doc):
        text = " ".join(paragraph.split())
        for sentence in SENTENCE_END.split(text):
            words = sentence.split()
            if not min_words <= len(words) <= max_words or CODE_LIKE.search(sentence):
                continue
            if not sentence[0].isupper() or sentence[-1] not in ".!?":
                continue
            letters = sum(c.isalpha() or c.isspace() for c in sentence)
            if letters / len(sentence) >= 0.9:
                yield sentence


def stdlib_sentences(count: int, min_words: int = 6, max_words: int = 40) -> list[str]:
    """The first `count` distinct sentences, files in path order (ValueError if the library has fewer)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    seen: dict[str, None] = {}
    for path in sorted(root.rglob("*.py")):
        if SKIPPED_PARTS & set(path.relative_to(root).parts):
            continue
        for doc in _docstrings(path):
            for sentence in _sentences(doc, min_words, max_words):
                seen.setdefault(sentence)
                if len(seen) == count:
                    return list(seen)
    raise ValueError(f"the standard library's docstrings hold {len(seen)} such sentences, fewer than {count}")
