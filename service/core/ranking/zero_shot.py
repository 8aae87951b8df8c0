"""Zero-shot classification as transformers' ZeroShotClassificationPipeline does it: each text (the premise)
paired with one hypothesis per candidate label ("This example is {}."), the pairs through an NLI classifier,
and each label's score from its entailment logit: softmax over the labels (one true), or per label
entailment against contradiction (multi_label, or a single candidate)."""

from __future__ import annotations

import numpy as np

from ...errors import invalid
from ..calls.validation import check_text

DEFAULT_TEMPLATE = "This example is {}."  # the pipeline's hypothesis_template


def label_list(labels: str) -> tuple[str, ...]:
    """Candidate labels sent as one string: comma-separated, each stripped, as the pipeline reads them."""
    return tuple(label.strip() for label in labels.split(",") if label.strip())


def is_entailment(label: str) -> bool:
    """Whether the pipeline takes a label for entailment: its name starts with "entail" (any case)."""
    return label.lower().startswith("entail")


def entailment_index(model_name: str, labels: tuple[str, ...]) -> int:
    """The first entailment label's: the pipeline's entailment_id."""
    for i, label in enumerate(labels):
        if is_entailment(label):
            return i
    raise invalid(
        "candidate_labels",
        f"model {model_name!r} has no entailment label (its labels: {', '.join(labels)}); "
        "zero-shot classification needs an NLI classifier",
    )


def hypotheses(template: str, candidates: list[str], max_labels: int) -> list[str]:
    """Each candidate label put into the template, after checking both."""
    if not candidates:
        raise invalid("candidate_labels", f"empty; send 1 to {max_labels} labels")
    if len(candidates) > max_labels:
        raise invalid("candidate_labels", f"{len(candidates)} labels; at most {max_labels} per call")
    for i, label in enumerate(candidates):
        check_text(f"candidate_labels[{i}]", label)
    try:
        filled = [template.format(label) for label in candidates]
    except (IndexError, KeyError, ValueError) as error:
        raise invalid("hypothesis_template", f"{template!r} cannot take a label ({error}); write {{}} where it goes")
    if template.format("") == template.format("x"):  # every label would make the same hypothesis
        raise invalid("hypothesis_template", f"{template!r} has no {{}} where the label goes")
    return filled


def zero_shot_scores(logits: np.ndarray, entailment: int, multi_label: bool) -> np.ndarray:
    """logits (texts, candidates, NLI labels) -> scores (texts, candidates), as the pipeline computes them."""
    logits = logits.astype(np.float64)
    if multi_label or logits.shape[1] == 1:
        contradiction = -1 if entailment == 0 else 0
        pair = logits[..., [contradiction, entailment]]
        pair = np.exp(pair - pair.max(axis=-1, keepdims=True))
        return pair[..., 1] / pair.sum(axis=-1)
    entail = logits[..., entailment]
    entail = np.exp(entail - entail.max(axis=-1, keepdims=True))
    return entail / entail.sum(axis=-1, keepdims=True)
