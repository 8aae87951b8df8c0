"""TEI's GET /info: what the model a TEI route answers with is (the named one, or the server's default
embedding model, else its default classifier), in TEI's fields, with the server's limits."""

from __future__ import annotations

from importlib.metadata import version

from ..core.serving import ServingCore

DTYPES = {"fp32": "float32", "fp16": "float16", "int8": "int8"}


def tei_info(core: ServingCore, name: str = "") -> dict:
    model = core.model(name) if name else core.default_model(("embedding", "classification"))
    if model.task == "classification":
        labels = {
            "id2label": {str(i): n for i, n in enumerate(model.labels)},
            "label2id": {n: i for i, n in enumerate(model.labels)},
        }
        model_type = {"reranker" if len(model.labels) == 1 else "classifier": labels}
    elif model.task == "embedding":
        model_type = {"embedding": {"pooling": model.pooling}}
    else:
        model_type = {model.task: {}}
    limits = core.limits()
    return {
        "model_id": model.name,
        "model_sha": None,
        "model_dtype": DTYPES.get(model.precision, "float32"),
        "served_model_name": model.name,
        "model_type": model_type,
        "max_concurrent_requests": limits.max_concurrent_requests,
        "max_input_length": model.max_input_tokens,
        "max_batch_tokens": limits.max_batch_tokens,
        "max_batch_requests": limits.max_batch_size,
        "max_client_batch_size": limits.max_client_batch_size,
        "auto_truncate": True,
        "tokenization_workers": limits.tokenize_threads,
        "version": version("attnserve"),
        "sha": None,
        "docker_label": None,
    }
