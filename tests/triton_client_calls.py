"""Calls a server's Open Inference Protocol with Triton's own client, tritonclient, and prints what came back
as JSON: run as a process of its own (tests/test_open_inference.py), because tritonclient's generated
protobuf code and attnserve's define the same `inference.*` names and cannot share a process.

    python tests/triton_client_calls.py HOST:PORT [--token TOKEN]
"""

from __future__ import annotations

import argparse
import json
import queue

import numpy as np
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException

TEXTS = ["The delivery truck blocked the narrow street.", "A cat sleeps on the warm windowsill.", "Hello"]
NUMBERS = ["12", "345", "7"]


def text_input(texts: list[str], shape: list[int] | None = None) -> triton.InferInput:
    tensor = triton.InferInput("text", shape or [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object).reshape(shape or [len(texts)]))
    return tensor


def outcome(call) -> dict:
    """{"ok": value} or {"code": "INVALID_ARGUMENT", "message": ...}."""
    try:
        return {"ok": call()}
    except InferenceServerException as error:
        return {"code": str(error.status()).removeprefix("StatusCode."), "message": error.message()}


def infer(client, model: str, inputs, **kwargs) -> dict:
    result = client.infer(model, inputs, **kwargs)
    response = result.get_response()
    outputs = {}
    for output in response.outputs:
        values = result.as_numpy(output.name)
        if values.dtype == object:
            values = np.vectorize(lambda b: b.decode())(values) if values.size else values
        outputs[output.name] = {"shape": list(values.shape), "datatype": output.datatype, "values": values.tolist()}
    parameters = {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in response.parameters.items()}
    return {"model": response.model_name, "id": response.id, "outputs": outputs, "parameters": parameters}


def streamed(client, requests: list[dict], headers) -> list[dict]:
    """Each request on one ModelStreamInfer stream; every response as it came, until each request's last."""
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)), headers=headers)
    for request in requests:
        client.async_stream_infer(**request)
    responses, finished = [], 0
    while finished < len(requests):
        result, error = answers.get(timeout=60)
        if error is not None:
            responses.append({"error": error.message()})
            finished += 1
            continue
        response = result.get_response()
        final = response.parameters["triton_final_response"].bool_param
        text = result.as_numpy("text")
        responses.append(
            {"id": response.id, "final": final, "text": text.ravel()[0].decode() if text is not None else None}
        )
        finished += final
    client.stop_stream()
    return responses


# Sampling with every rule and penalty, seeded: the same text as attnserve.v1's for the parameters it is sent
# back with (tests/test_open_inference.py).
SAMPLED = {"temperature": 1.5, "seed": 5, "top_k": 20, "min_p": 0.01, "presence_penalty": 0.5, "frequency_penalty": 1.0}


def calls(client, headers) -> dict:
    h = {"headers": headers}
    return {
        "live": outcome(lambda: client.is_server_live(**h)),
        "ready": outcome(lambda: client.is_server_ready(**h)),
        "model_ready": {
            f"{name}@{version}": outcome(lambda name=name, version=version: client.is_model_ready(name, version, **h))
            for name, version in [("minilm", ""), ("numbers", "1"), ("absent", ""), ("minilm", "2")]
        },
        "server_metadata": outcome(lambda: client.get_server_metadata(as_json=True, **h)),
        "metadata": {
            m: outcome(lambda m=m: client.get_model_metadata(m, as_json=True, **h)) for m in ("minilm", "numbers")
        },
        "config": outcome(lambda: client.get_model_config("minilm", as_json=True, **h)),
        "embed": outcome(lambda: infer(client, "minilm", [text_input(TEXTS)], request_id="e1", **h)),
        "embed_column": outcome(lambda: infer(client, "minilm", [text_input(TEXTS, [3, 1])], **h)),
        "embed_dimensions": outcome(
            lambda: infer(client, "minilm", [text_input(TEXTS)], parameters={"dimensions": 64}, **h)
        ),
        "generate": outcome(
            lambda: infer(client, "numbers", [text_input(NUMBERS)], parameters={"max_new_tokens": 20}, **h)
        ),
        "sampled_with": SAMPLED,
        "generate_sampled": outcome(lambda: infer(client, "numbers", [text_input(NUMBERS)], parameters=SAMPLED, **h)),
        "generate_text_only": outcome(
            lambda: infer(client, "numbers", [text_input(NUMBERS)], outputs=[triton.InferRequestedOutput("text")], **h)
        ),
        "beams": outcome(
            lambda: infer(
                client, "numbers", [text_input(["345"])], parameters={"num_beams": 3, "num_return_sequences": 3}, **h
            )
        ),
        "errors": {
            "unknown_model": outcome(lambda: infer(client, "absent", [text_input(TEXTS)], **h)),
            "version": outcome(lambda: infer(client, "minilm", [text_input(TEXTS)], model_version="2", **h)),
            "input_name": outcome(lambda: infer(client, "minilm", [wrong_name()], **h)),
            "datatype": outcome(lambda: infer(client, "minilm", [wrong_datatype()], **h)),
            "empty_text": outcome(lambda: infer(client, "minilm", [text_input(["fine", ""])], **h)),
            "too_many": outcome(lambda: infer(client, "minilm", [text_input(["x"] * 33)], **h)),
            "dimensions": outcome(
                lambda: infer(client, "minilm", [text_input(TEXTS)], parameters={"dimensions": 999}, **h)
            ),
            "unknown_parameter": outcome(
                lambda: infer(client, "minilm", [text_input(TEXTS)], parameters={"temperature": 0.5}, **h)
            ),
            "parameter_kind": outcome(
                lambda: infer(client, "numbers", [text_input(NUMBERS)], parameters={"temperature": "hot"}, **h)
            ),
            "max_new_tokens": outcome(
                lambda: infer(client, "numbers", [text_input(NUMBERS)], parameters={"max_new_tokens": 10**6}, **h)
            ),
            "prompt_empty": outcome(lambda: infer(client, "numbers", [text_input(["12", ""])], **h)),
            "output_name": outcome(
                lambda: infer(
                    client, "minilm", [text_input(TEXTS)], outputs=[triton.InferRequestedOutput("logits")], **h
                )
            ),
        },
        "stream": outcome(
            lambda: streamed(
                client,
                [
                    {
                        "model_name": "numbers",
                        "inputs": [text_input(["123"])],
                        "request_id": "s1",
                        "parameters": {"stream": True},
                    },
                    {"model_name": "absent", "inputs": [text_input(["1"])], "request_id": "bad"},
                    {"model_name": "minilm", "inputs": [text_input(["a cat"])], "request_id": "s2"},
                ],
                headers,
            )
        ),
    }


def wrong_name() -> triton.InferInput:
    tensor = triton.InferInput("sentence", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([b"hello"], dtype=object))
    return tensor


def wrong_datatype() -> triton.InferInput:
    tensor = triton.InferInput("text", [1], "FP32")
    tensor.set_data_from_numpy(np.array([1.0], dtype=np.float32))
    return tensor


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("--token", help="send it as a bearer token; also call once without it")
    args = parser.parse_args()
    client = triton.InferenceServerClient(args.target)
    if args.token:
        results = {
            "without_token": outcome(lambda: infer(client, "minilm", [text_input(TEXTS)])),
            "with_token": outcome(
                lambda: infer(client, "minilm", [text_input(TEXTS)], headers={"authorization": f"Bearer {args.token}"})
            ),
        }
    else:
        results = calls(client, None)
    print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
