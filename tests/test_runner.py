"""The runner: what crosses between host and device per decode step (counted by the runner itself), and
where each node of a session was placed."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from modeldir.files import open_model_dir
from modeldir.tokenizer import pad_batch
from service.runner.sessions import CPU, CUDA, SessionSettings, cpu_fallbacks, placements

from .numbers_steps import Holder, generation


def admit_and_step(runner, cache, tokenizer, texts: list[str], steps: int, logit_rows=()) -> list:
    """Admit one sequence per text, encode them together, run `steps` greedy steps: -> the runner's
    (sent, fetched) bytes of each step."""
    for text in texts:
        cache.allocate(Holder(), len(tokenizer.encode([text])[0].ids), steps)
    ids, mask = pad_batch([e.ids for e in tokenizer.encode(texts)], 0)
    cache.write_cross(runner.encode(ids, mask).cross, [(row, row) for row in range(len(texts))])
    tokens = np.ones((len(texts), 1), np.int64)  # the start token
    counts = []
    for _ in range(steps):
        n = cache.used
        out = runner.step(tokens, cache.lengths[:n], cache.cross_layout(n), list(logit_rows), cache.memory, n)
        cache.advance(n)
        tokens = out.next_tokens[:, None]
        counts.append((out.sent, out.fetched))
    return counts


@pytest.mark.parametrize("rows", [1, 7])
def test_a_greedy_step_moves_o_rows_bytes_whatever_the_cache_holds(numbers_dir, rows):
    """In: the step's token ids (int64), past and source lengths (int32 each), the query and row slots of
    the cross-attention's groups (int64 each); out: each row's argmax (int64). 40 bytes a row, at every
    step, for a cache of 8 rows of 16 positions or 64 rows of 64: the cache never crosses."""
    texts = [str(7**i) for i in range(1, rows + 1)]
    for cache_rows, target in ((8, 16), (64, 64)):
        runner, cache, tokenizer = generation(numbers_dir, cache_rows, target)
        counts = admit_and_step(runner, cache, tokenizer, texts, steps=12)
        assert counts == [(rows * (8 + 4 + 4 + 8 + 8), rows * 8)] * 12, (cache_rows, target)
        assert cache.memory.nbytes >= cache_rows * target * 2 * 3 * 64 * 4  # the self K/V alone: 3 layers, d 64


def test_rows_that_sample_or_search_fetch_their_logits_and_no_others(numbers_dir):
    runner, cache, tokenizer = generation(numbers_dir, 8, 16)
    counts = admit_and_step(runner, cache, tokenizer, ["12", "345", "6789"], steps=3, logit_rows=[2, 0])
    vocab = open_model_dir(numbers_dir).config.vocab_size
    assert counts == [(3 * 32 + 2 * 8, 3 * 8 + 2 * vocab * 4)] * 3


def test_greedy_tokens_of_the_device_argmax_are_the_model_s_translation(numbers_dir):
    runner, cache, tokenizer = generation(numbers_dir, 4, 20)
    texts = ["312405", "12"]
    for text in texts:
        cache.allocate(Holder(), len(tokenizer.encode([text])[0].ids), 19)
    ids, mask = pad_batch([e.ids for e in tokenizer.encode(texts)], 0)
    cache.write_cross(runner.encode(ids, mask).cross, [(0, 0), (1, 1)])
    tokens, out = np.ones((2, 1), np.int64), []
    for _ in range(12):
        step = runner.step(tokens, cache.lengths[:2], cache.cross_layout(2), [], cache.memory, 2)
        cache.advance(2)
        tokens = step.next_tokens[:, None]
        out.append(step.next_tokens.tolist())
    decoded = [tokenizer.decode([row[i] for row in out]).split("</s>")[0] for i in range(2)]
    assert decoded[0].startswith("three hundred and twelve thousand, four hundred and five")
    assert decoded[1].startswith("twelve")


def test_placements_are_read_and_compute_on_the_cpu_is_found(numbers_dir):
    """On CUDA a session is refused when compute nodes land on the CPU. The check reads ONNX Runtime's
    own record of the placement: here a CPU session, where every node is on the CPU, so that the rule sees
    real placements: shape arithmetic allowed, compute (MatMul, GroupQueryAttention, ...) found."""
    options = ort.SessionOptions()
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    decoder = ort.InferenceSession(str(open_model_dir(numbers_dir).decoder), options, providers=[CPU])
    placed = placements(decoder)
    assert len(placed) > 50 and {provider for provider, _, _ in placed} == {CPU}
    found = {op for _, op in cpu_fallbacks(placed)}
    assert {"MatMul", "GroupQueryAttention", "MultiHeadAttention", "LayerNormalization", "ArgMax"} <= found
    assert not {"Shape", "Gather", "Unsqueeze", "Concat"} & found
    assert cpu_fallbacks([(CUDA, "/l0/MatMul", "MatMul"), (CPU, "/Shape", "Shape")]) == []
    assert cpu_fallbacks([(CPU, "/l0/GroupQueryAttention", "GroupQueryAttention")]) == [
        ("/l0/GroupQueryAttention", "GroupQueryAttention")
    ]


def test_cuda_sessions_get_the_memory_settings_and_the_cpu_gets_none():
    from service.runner.sessions import _provider_options

    settings = SessionSettings(device="cuda", gpu_mem_limit=8 << 30)
    cuda, cpu = _provider_options(settings, CUDA)
    assert cuda == (
        CUDA,
        {"device_id": "0", "arena_extend_strategy": "kSameAsRequested", "gpu_mem_limit": str(8 << 30)},
    )
    assert cpu == CPU and _provider_options(SessionSettings(), CPU) == [CPU]
    assert "gpu_mem_limit" not in _provider_options(SessionSettings(device="cuda"), CUDA)[0][1]


def test_the_default_cache_and_rows_follow_the_device():
    """The defaults (0): 1 GiB and 64 rows on the CPU; on CUDA what the device has left, up to 1,024 rows.
    The self-attention buffers hold as many rows of the longest answer as if each source were as long as
    it, and as many more rows of shorter answers as fit (TARGET_STEP positions at the least); the cross
    buffers take the rest; under CUDA graphs (fixed_cross) each row has room for the longest source."""
    from service.core.models.opening import CPU_CACHE_BYTES, CachePlan, CacheSettings
    from service.core.models.served_models import Architecture
    from service.ops.config import ServerConfig
    from service.runner.sessions import CPU, CUDA

    defaults = ServerConfig()
    assert defaults.kv_cache_bytes == 0 and defaults.max_running_sequences == 0
    architecture = Architecture(6, 6, 8, 512, 512)
    auto = CacheSettings(max_new_tokens=256, cache_bytes=0, cache_tokens=0, max_running=0, max_waiting=10)
    fp32, fp16 = (auto.geometry(architecture, 512, p) for p in ("fp32", "fp16"))
    assert fp32.bytes_per_row == 2 * fp16.bytes_per_row == (257 + 512) * 6 * 2 * 512 * 4
    positions = CPU_CACHE_BYTES // fp32.bytes_per_token
    assert positions == 43690 and CPU_CACHE_BYTES // fp32.bytes_per_row == 56  # rows sized for the longest source
    assert auto.plan(fp32, CPU) == CachePlan(64, positions - 64 * 257, 64 * 257)  # the CPU's default step
    assert auto.plan(fp16, CPU, auto_bytes=200 * fp16.bytes_per_row) == CachePlan(64, 64 * 512, 64 * 257)  # to spare
    ten = 10 * fp16.bytes_per_row  # what the device has left: 14 longest answers, or 112 rows of 32 positions
    assert auto.plan(fp16, CUDA, auto_bytes=ten) == CachePlan(14 * 257 // 32, 7690 - 14 * 257, 14 * 257)
    assert auto.plan(fp16, CUDA, auto_bytes=ten, fixed_cross=True) == CachePlan(10, 10 * 512, 10 * 257)
    assert auto.plan(fp16, CUDA, auto_bytes=300 * fp16.bytes_per_row).self_tokens == 448 * 257  # 300 * 769 // 514
    assert auto.plan(fp16, CUDA, auto_bytes=300 * fp16.bytes_per_row).rows == 1024
    assert auto.plan(fp16, CUDA, auto_bytes=5000 * fp16.bytes_per_row).self_tokens == 1024 * 257
    capped = CacheSettings(max_new_tokens=256, cache_bytes=0, cache_tokens=0, max_running=4, max_waiting=10)
    assert capped.plan(fp16, CUDA) == CachePlan(4, 4 * 512, 4 * 257)
    one_source = CacheSettings(max_new_tokens=256, cache_bytes=0, cache_tokens=257 + 512, max_running=0, max_waiting=1)
    assert one_source.plan(fp16, CUDA) == CachePlan(8, 512, 257)  # the least cache: one longest answer and source
    short = auto.geometry(architecture, 32, "fp32")  # sources shorter than answers: rows as before
    assert CacheSettings(max_new_tokens=256, cache_bytes=0, cache_tokens=2 * 289, max_running=0, max_waiting=1).plan(
        short, CPU
    ) == CachePlan(16, 2 * 32, 2 * 257)


def test_the_thread_rule_gives_small_models_and_cuda_one_quiet_thread_and_leaves_set_values_alone():
    from service.runner.sessions import CPU, CUDA, SMALL_LAYER_MACS, SessionSettings, available_cores, threads_for

    unset = SessionSettings()
    numbers, minilm = 4 * 64 * 64 + 2 * 64 * 512, 4 * 384 * 384 + 2 * 384 * 1536  # a layer's multiply-adds a token
    assert numbers < SMALL_LAYER_MACS < minilm
    rule = {(p, m): threads_for(unset, p, m) for p in (CPU, CUDA) for m in (numbers, minilm)}
    expected = [(1, False), (available_cores(), True), (1, False), (1, False)]
    assert [(s.intra_op_threads, s.spinning) for s in rule.values()] == expected
    chosen = threads_for(SessionSettings(intra_op_threads=3, spinning=False), CPU, minilm)
    assert (chosen.intra_op_threads, chosen.spinning) == (3, False)
    assert threads_for(SessionSettings(spinning=True), CPU, numbers).spinning is True
