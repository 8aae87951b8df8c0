"""Token choice on the device: one small ONNX graph that draws every sampled row's next token from a step's
logits where they are (on CUDA, in the GPU's memory: only the rows' rules go in and one token a row comes
out), by the rules of engine/row_sampling.py, which testing/sampling_reference.py writes plainly:

- the suppressed tokens left out (a bias of -inf, kept on the device);
- penalties on each row's tokens so far (their ids and counts, gathered, changed and scattered back);
- temperature; top_k (the k-th largest of one TopK for every row), min_p, and top_p (the kept tokens
  sorted by one TopK, ties in token order as ONNX's TopK orders them, their probabilities summed in
  float64, the nucleus scattered back as a mask);
- the row's uniform found in the kept weights' cumulative sums (float64) in token order.

Rows whose logits go through their sequence's rules (Whisper's), rows that are scored, and greedy rows
with a penalty stay on the host (token_choice.py). A row's parameters are the engine's SamplingParams
(engine/sampling.py), read by their fields."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

OPSET = 17  # ReduceMax's axes an attribute, ReduceSum's an input
FLOAT, DOUBLE, INT64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64
ROW_INPUTS = {  # name -> type, one value a row: (rows, 1)
    "repetition": FLOAT,
    "frequency": FLOAT,
    "presence": FLOAT,
    "temperature": FLOAT,
    "top_k": INT64,  # 0: every token
    "min_log_p": FLOAT,  # log(min_p): -inf keeps every token
    "top_p": FLOAT,
    "uniform": DOUBLE,
}


def _constants() -> list[onnx.TensorProto]:
    def scalar(name, dtype, value):
        return helper.make_tensor(name, dtype, [], [value])

    return [
        scalar("zero_f", FLOAT, 0.0),
        scalar("one_f", FLOAT, 1.0),
        scalar("neg_inf", FLOAT, float("-inf")),
        scalar("zero_d", DOUBLE, 0.0),
        scalar("one_d", DOUBLE, 1.0),
        scalar("minus_one_d", DOUBLE, -1.0),
        scalar("zero_i", INT64, 0),
        scalar("one_i", INT64, 1),
        helper.make_tensor("axis_one", INT64, [1], [1]),
    ]


def _penalized(nodes: list) -> str:
    """The logits with the suppressed tokens left out and the penalties on each row's tokens so far."""
    n = helper.make_node
    nodes += [
        n("Add", ["logits", "bias"], ["allowed"]),
        n("GatherElements", ["allowed", "history"], ["seen_values"], axis=1),
        n("Greater", ["seen_values", "zero_f"], ["seen_positive"]),
        n("Div", ["seen_values", "repetition"], ["seen_divided"]),
        n("Mul", ["seen_values", "repetition"], ["seen_multiplied"]),
        n("Where", ["seen_positive", "seen_divided", "seen_multiplied"], ["seen_repeated"]),
        n("Mul", ["frequency", "counts"], ["seen_frequency"]),
        n("Sub", ["seen_repeated", "seen_frequency"], ["seen_less_frequency"]),
        n("Sub", ["seen_less_frequency", "presence"], ["seen_penalized"]),
        n("Greater", ["counts", "zero_f"], ["seen_real"]),  # a padding entry writes its token's own value back
        n("Where", ["seen_real", "seen_penalized", "seen_values"], ["seen_new"]),
        n("ScatterElements", ["allowed", "history", "seen_new"], ["penalized"], axis=1),
    ]
    return "penalized"


def _kept(nodes: list, logits: str) -> str:
    """scaled = (logit - max) / temperature; the tokens top_k and min_p keep."""
    n = helper.make_node
    nodes += [
        n("ReduceMax", [logits], ["top"], axes=[1], keepdims=1),
        n("Sub", [logits, "top"], ["centred"]),
        n("Div", ["centred", "temperature"], ["scaled"]),
        n("TopK", ["scaled", "k_max"], ["highest", "highest_at"], axis=1, largest=1, sorted=1),
        n("Greater", ["top_k", "zero_i"], ["k_on"]),
        n("Sub", ["top_k", "one_i"], ["k_last"]),
        n("Where", ["k_on", "k_last", "zero_i"], ["k_index"]),
        n("GatherElements", ["highest", "k_index"], ["kth"], axis=1),
        n("Where", ["k_on", "kth", "neg_inf"], ["k_floor"]),
        n("GreaterOrEqual", ["scaled", "k_floor"], ["k_kept"]),
        n("GreaterOrEqual", ["scaled", "min_log_p"], ["p_kept"]),
        n("And", ["k_kept", "p_kept"], ["kept"]),
        n("Exp", ["scaled"], ["exp"]),
        n("Cast", ["exp"], ["exp_d"], to=DOUBLE),
    ]
    return "kept"


def _nucleus(nodes: list, kept: str) -> str:
    """The kept tokens that top_p keeps too: the smallest set of the most probable whose probability among
    the kept reaches top_p (every kept token where top_p is 1)."""
    n = helper.make_node
    nodes += [
        n("Where", [kept, "scaled", "neg_inf"], ["kept_scaled"]),
        n("TopK", ["kept_scaled", "sort_k"], ["sorted", "sorted_at"], axis=1, largest=1, sorted=1),
        n("Exp", ["sorted"], ["sorted_exp"]),
        n("Cast", ["sorted_exp"], ["sorted_d"], to=DOUBLE),
        n("CumSum", ["sorted_d", "axis_one"], ["sorted_sums"]),
        n("Where", [kept, "exp_d", "zero_d"], ["kept_d"]),
        n("ReduceSum", ["kept_d", "axis_one"], ["kept_total"], keepdims=1),
        n("Div", ["sorted_sums", "kept_total"], ["sorted_share"]),
        n("Cast", ["top_p"], ["top_p_d"], to=DOUBLE),
        n("Less", ["sorted_share", "top_p_d"], ["short"]),
        n("Cast", ["short"], ["short_d"], to=DOUBLE),
        n("ReduceSum", ["short_d", "axis_one"], ["cut_raw"], keepdims=1),
        n("Cast", [kept], ["kept_one"], to=DOUBLE),
        n("ReduceSum", ["kept_one", "axis_one"], ["kept_count"], keepdims=1),
        n("Sub", ["kept_count", "one_d"], ["kept_last"]),
        n("Min", ["cut_raw", "kept_last"], ["cut"]),
        n("Shape", ["sorted"], ["sort_length"], start=1, end=2),
        n("Cast", ["sort_length"], ["sort_length_d"], to=DOUBLE),
        n("Squeeze", ["sort_length_d"], ["sort_end"]),
        n("Range", ["zero_d", "sort_end", "one_d"], ["place"]),
        n("LessOrEqual", ["place", "cut"], ["inside"]),
        n("Cast", ["inside"], ["inside_f"], to=FLOAT),
        n("Shape", ["scaled"], ["vocab_shape"]),
        n("ConstantOfShape", ["vocab_shape"], ["no_token"], value=helper.make_tensor("z", FLOAT, [1], [0.0])),
        n("ScatterElements", ["no_token", "sorted_at", "inside_f"], ["nucleus_f"], axis=1),
        n("Greater", ["nucleus_f", "zero_f"], ["in_nucleus"]),
        n("Less", ["top_p", "one_f"], ["p_on"]),
        n("Not", ["p_on"], ["p_off"]),
        n("Or", ["in_nucleus", "p_off"], ["nucleus_or_all"]),
        n("And", [kept, "nucleus_or_all"], ["chosen_from"]),
    ]
    return "chosen_from"


def _drawn(nodes: list, chosen_from: str) -> str:
    """The uniform's token among the kept weights' cumulative sums, in token order."""
    n = helper.make_node
    nodes += [
        n("Where", [chosen_from, "exp_d", "zero_d"], ["weights"]),
        n("CumSum", ["weights", "axis_one"], ["sums"]),
        n("ReduceMax", ["sums"], ["total"], axes=[1], keepdims=1),
        n("Mul", ["uniform", "total"], ["target"]),
        n("LessOrEqual", ["sums", "target"], ["passed"]),
        n("Cast", ["passed"], ["passed_d"], to=DOUBLE),
        n("ReduceSum", ["passed_d", "axis_one"], ["drawn"], keepdims=1),
        n("Shape", ["weights"], ["vocab_length"], start=1, end=2),
        n("Cast", ["vocab_length"], ["vocab_length_d"], to=DOUBLE),
        n("Squeeze", ["vocab_length_d"], ["vocab_end"]),
        n("Range", ["zero_d", "vocab_end", "one_d"], ["token_ids"]),
        n("Greater", ["weights", "zero_d"], ["weighty"]),
        n("Where", ["weighty", "token_ids", "minus_one_d"], ["weighty_ids"]),
        n("ReduceMax", ["weighty_ids"], ["last_weighty"], axes=[1], keepdims=1),
        n("Min", ["drawn", "last_weighty"], ["token_d"]),  # rounding past the last token of any weight: that one
        n("Cast", ["token_d"], ["tokens"], to=INT64),
    ]
    return "tokens"


def sampling_graph() -> onnx.ModelProto:
    """Inputs: logits (rows, vocab) float32; bias (1, vocab) float32 (-inf: suppressed); history (rows, U)
    int64 and counts (rows, U) float32, each row's distinct tokens so far and their counts (count 0: a
    padding entry); k_max (1) int64, the TopK that holds every row's top_k; sort_k (1) int64, vocab
    where a row has top_p < 1, else 1; and ROW_INPUTS, (rows, 1) each. Output: tokens (rows, 1) int64."""
    nodes: list = []
    drawn = _drawn(nodes, _nucleus(nodes, _kept(nodes, _penalized(nodes))))
    inputs = [
        helper.make_tensor_value_info("logits", FLOAT, ["rows", "vocab"]),
        helper.make_tensor_value_info("bias", FLOAT, [1, "vocab"]),
        helper.make_tensor_value_info("history", INT64, ["rows", "seen"]),
        helper.make_tensor_value_info("counts", FLOAT, ["rows", "seen"]),
        helper.make_tensor_value_info("k_max", INT64, [1]),
        helper.make_tensor_value_info("sort_k", INT64, [1]),
    ] + [helper.make_tensor_value_info(name, dtype, ["rows", 1]) for name, dtype in ROW_INPUTS.items()]
    outputs = [helper.make_tensor_value_info(drawn, INT64, ["rows", 1])]
    graph = helper.make_graph(nodes, "token_choice", inputs, outputs, initializer=_constants())
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def history_arrays(generated: list, params: list) -> tuple[np.ndarray, np.ndarray]:
    """Each row's distinct tokens so far and their counts (rows without a penalty: none), padded to the
    longest by repeating a row's last entry (the same value scattered twice), or (0, count 0)."""
    seen = []
    for tokens, row in zip(generated, params):
        ids, counts = np.unique(np.asarray(tokens, np.int64), return_counts=True) if row.penalizes else ((), ())
        seen.append((np.asarray(ids, np.int64), np.asarray(counts, np.float32)))
    width = max([1] + [ids.shape[0] for ids, _ in seen])
    history, counts = np.zeros((len(seen), width), np.int64), np.zeros((len(seen), width), np.float32)
    for row, (ids, row_counts) in enumerate(seen):
        if ids.shape[0]:
            history[row, : ids.shape[0]], history[row, ids.shape[0] :] = ids, ids[-1]
            counts[row, : ids.shape[0]], counts[row, ids.shape[0] :] = row_counts, row_counts[-1]
    return history, counts


def min_log_p(params: list) -> np.ndarray:
    """log(min_p) a row, as the reference takes it (float64, then float32); -inf where min_p is 0."""
    with np.errstate(divide="ignore"):
        return np.log(np.array([[p.min_p] for p in params], np.float64)).astype(np.float32)


class SamplingGraph:
    """The token choice graph in a session of its own on the step's device, with the model's suppressed
    tokens as a bias kept there."""

    def __init__(self, session: ort.InferenceSession, device: str, suppressed_ids=()):
        self.session, self.device = session, device
        self.suppressed_ids = np.asarray(suppressed_ids, np.int64)
        self.bias: ort.OrtValue | None = None
        self.drawn_rows = 0  # rows drawn here (for the tests and the GPU check)

    def _bias(self, vocab: int) -> ort.OrtValue:
        """-inf at the suppressed tokens, on the device, made at the first step (the logits' width)."""
        if self.bias is None or self.bias.shape()[1] != vocab:
            bias = np.zeros((1, vocab), np.float32)
            bias[0, self.suppressed_ids] = -np.inf
            self.bias = ort.OrtValue.ortvalue_from_numpy(bias, self.device, 0)
        return self.bias

    def sample(self, logits, generated: list, params: list, rngs: list) -> np.ndarray:
        """As RowSampler.sample: each row's token for the next uniform of its generator."""
        return self.draw(logits, generated, params, np.array([[rng.random()] for rng in rngs], np.float64))

    def draw(self, logits, generated: list, params: list, uniforms: np.ndarray) -> np.ndarray:
        """(rows, vocab) float32 logits (a numpy array, or an OrtValue on the device), each row's tokens so
        far, parameters (temperature > 0) and uniform in [0, 1) (rows, 1) float64 -> each row's token."""
        on_device = isinstance(logits, ort.OrtValue)
        vocab = logits.shape()[1] if on_device else logits.shape[1]
        binding = self.session.io_binding()
        for name, array in graph_feeds(vocab, generated, params, uniforms).items():
            binding.bind_cpu_input(name, array)
        binding.bind_ortvalue_input("bias", self._bias(vocab))
        if on_device:
            binding.bind_ortvalue_input("logits", logits)
        else:
            binding.bind_cpu_input("logits", np.ascontiguousarray(logits, np.float32))
        binding.bind_output("tokens", "cpu")
        self.session.run_with_iobinding(binding)
        self.drawn_rows += len(params)
        return binding.get_outputs()[0].numpy().reshape(len(params))


def graph_feeds(vocab: int, generated: list, params: list, uniforms: np.ndarray) -> dict[str, np.ndarray]:
    """The graph's inputs from the host, but the logits and the bias: the host's whole work a step, where
    the logits stay on the device (benchmarks/sampling_bench.py measures it)."""
    history, counts = history_arrays(generated, params)
    top_k = np.array([[p.top_k if 0 < p.top_k < vocab else 0] for p in params], np.int64)
    return {
        "history": history,
        "counts": counts,
        "k_max": np.array([max(1, int(top_k.max(initial=0)))], np.int64),
        "sort_k": np.array([vocab if any(p.top_p < 1.0 for p in params) else 1], np.int64),
        "repetition": np.array([[p.repetition_penalty] for p in params], np.float32),
        "frequency": np.array([[p.frequency_penalty] for p in params], np.float32),
        "presence": np.array([[p.presence_penalty] for p in params], np.float32),
        "temperature": np.array([[p.float32_temperature] for p in params], np.float32),
        "top_k": top_k,
        "min_log_p": min_log_p(params),
        "top_p": np.array([[p.top_p] for p in params], np.float32),
        "uniform": np.asarray(uniforms, np.float64).reshape(len(params), 1),
    }
