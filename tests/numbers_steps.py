"""The numbers model's runner and a generation cache as the loader makes them, for the tests that drive
decoder steps by hand (tests/test_runner.py, tests/test_decode_buckets.py)."""

from __future__ import annotations

from modeldir.files import CACHE_GRAPHS, open_model_dir
from modeldir.tokenizer import TextTokenizer
from service.engine.generation_cache import MIN_SOURCE_CAPACITY, GenerationCache
from service.runner.cache_memory import CacheGeometry, one_buffer_resize
from service.runner.seq2seq import Seq2SeqRunner
from service.runner.sessions import SessionSettings, create_session

SETTINGS = SessionSettings(device="cpu", intra_op_threads=2)


class Holder:
    row = None


def generation(model_dir, rows: int, target_tokens: int) -> tuple[Seq2SeqRunner, GenerationCache, TextTokenizer]:
    """The numbers model's runner and a cache of `rows` rows of `target_tokens` positions, as the loader
    makes them."""
    files = open_model_dir(model_dir)
    c = files.config
    graphs = {role: create_session(files.graphs[role], SETTINGS) for role in CACHE_GRAPHS}
    graphs["cache_resize"] = create_session(one_buffer_resize(files.graphs["cache_resize"]), SETTINGS)
    runner = Seq2SeqRunner(
        create_session(files.encoder, SETTINGS),
        create_session(files.decoder, SETTINGS),
        graphs,
        c.n_decoder_layers,
        "fp32",
    )
    d_head = c.d_model // c.n_heads
    geometry = CacheGeometry(c.n_decoder_layers, c.n_heads, d_head, target_tokens, c.max_input_tokens)
    memory = runner.cache_memory(geometry, rows, MIN_SOURCE_CAPACITY)
    return runner, GenerationCache(memory), TextTokenizer(files.tokenizer, c.max_input_tokens)
