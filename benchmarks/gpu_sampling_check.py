"""The preflight's sampling check: the sampling graph (service/runner/sampling_graph.py) on the device, its
nodes' placements, and per case of benchmarks/sampling_bench.py, at Marian's vocabulary (58,101), the time
a step's rows take in the graph with their logits on the device, against the host's token choice
(service/engine/row_sampling.py) on the same machine, and the graph's tokens against the plain reference's
(testing/sampling_reference.py) for the same uniforms, where the draw was not within 1e-6 of an edge.
256 rows on the GPU; 8 on the CPU (the rehearsal)."""

from __future__ import annotations

import numpy as np

from .common import median_seconds
from .sampling_bench import CASES

VOCAB = 58101
COMPARED_ROWS = 8  # rows checked against the reference (float64 over the vocabulary: slow)


def check_sampling_graph(device: str) -> dict:
    import onnxruntime as ort

    from service.engine.row_sampling import RowSampler
    from service.engine.sampling import SamplingParams
    from service.runner.sampling_graph import SamplingGraph, sampling_graph
    from service.runner.sessions import SessionSettings, create_session, placements
    from testing.sampling_reference import reference_next_token

    rows = 256 if device == "cuda" else 8
    session = create_session(sampling_graph().SerializeToString(), SessionSettings(device=device, intra_op_threads=1))
    counts: dict[str, int] = {}
    for provider, _, _ in placements(session) if device == "cuda" else []:
        counts[provider] = counts.get(provider, 0) + 1
    graph = SamplingGraph(session, device)
    logits = (np.random.default_rng(0).standard_normal((rows, VOCAB)) * 3).astype(np.float32)
    on_device = ort.OrtValue.ortvalue_from_numpy(logits, device, 0)
    generated = [list(range(30))] * rows
    uniforms = np.random.default_rng(1).random((rows, 1))
    cases = {}
    for name, fields in CASES.items():
        params = [SamplingParams(**fields)] * rows
        tokens = graph.draw(on_device, generated, params, uniforms)
        graph_s = median_seconds(lambda: graph.draw(on_device, generated, params, uniforms), 5)
        host = RowSampler()
        rngs = [np.random.default_rng(i) for i in range(rows)]
        host_s = median_seconds(lambda: host.sample(logits.copy(), generated, params, rngs), 3, warmup=1)
        compared = equal = 0
        for row in range(min(rows, COMPARED_ROWS)):
            token, margin = reference_next_token(logits[row], generated[row], params[row], _Fixed(uniforms[row, 0]))
            if margin > 1e-6:
                compared += 1
                equal += int(token == tokens[row])
        cases[name] = {
            "graph_us_per_token": round(graph_s / rows * 1e6, 2),
            "host_us_per_token": round(host_s / rows * 1e6, 2),
            "host_over_graph": round(host_s / graph_s, 2),
            "compared": compared,
            "equal": equal,
        }
    if any(case["equal"] != case["compared"] for case in cases.values()):
        raise RuntimeError(f"the graph's tokens differ from the reference's: {cases}")
    return {"rows": rows, "vocab": VOCAB, "placements": counts or {"not recorded on the CPU": 0}, "cases": cases}


class _Fixed:
    """A generator whose next uniform is given: the reference draws with the graph's uniform."""

    def __init__(self, uniform: float):
        self.uniform = uniform

    def random(self) -> float:
        return self.uniform
