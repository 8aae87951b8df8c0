"""The test models' cache under build/test-models: reused while intact and current, built again otherwise."""

from __future__ import annotations

import pytest
from filelock import FileLock, Timeout

from . import model_cache


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(model_cache, "CACHE", tmp_path / "cache")
    builds = []

    def build(root):
        builds.append(root)
        (root / "model").mkdir()
        (root / "model" / "weights.bin").write_bytes(b"\x01\x02")

    return build, builds


def test_a_model_is_built_once_and_reused(cache):
    build, builds = cache
    first = model_cache.built("m", build)
    assert model_cache.built("m", build) == first and len(builds) == 1
    assert (first / "model" / "weights.bin").read_bytes() == b"\x01\x02"
    assert first.name == f"m-{model_cache.sources_hash()}"


def test_a_model_changed_after_its_build_is_built_again(cache):
    build, builds = cache
    first = model_cache.built("m", build)
    (first / "model" / "weights.bin").write_bytes(b"\x09")  # as a test that wrote into it would
    assert model_cache.built("m", build) == first and len(builds) == 2
    assert (first / "model" / "weights.bin").read_bytes() == b"\x01\x02"


def test_a_build_that_stopped_half_way_is_built_again(cache):
    build, builds = cache

    def fails(root):
        (root / "partial").write_text("half")
        raise RuntimeError("stopped")

    with pytest.raises(RuntimeError):
        model_cache.built("m", fails)
    target = model_cache.built("m", build)
    assert len(builds) == 1 and not (target / "partial").exists()


def test_other_sources_make_another_key(cache, monkeypatch):
    build, builds = cache
    first = model_cache.built("m", build)
    model_cache.sources_hash.cache_clear()
    monkeypatch.setattr(model_cache, "SOURCES", (*model_cache.SOURCES, "README.md"))
    second = model_cache.built("m", build)
    model_cache.sources_hash.cache_clear()
    assert second != first and not first.exists() and len(builds) == 2


def test_a_new_build_removes_its_own_older_builds_only(cache):
    """numbers' new key leaves numbers-t5's build alone (their names share a prefix) and removes numbers'
    build of an older key."""
    build, builds = cache
    other = model_cache.built("numbers-t5", build)
    older = model_cache.CACHE / "numbers-0123456789abcdef"
    older.mkdir()
    model_cache.built("numbers", build)
    assert other.is_dir() and model_cache.built("numbers-t5", build) == other and len(builds) == 2
    assert not older.exists()


def test_a_model_is_built_holding_its_lock(cache):
    """`make test` runs the suite in several processes: while one builds a model, another that asks for it
    waits for the lock, then finds the build intact instead of building it again beside the first."""
    build, builds = cache
    held = []

    def build_and_look(root):
        try:
            FileLock(model_cache.CACHE / "m.lock").acquire(timeout=0)  # as the other process would
            held.append(False)
        except Timeout:
            held.append(True)
        build(root)

    model_cache.built("m", build_and_look)
    assert held == [True] and len(builds) == 1
    with FileLock(model_cache.CACHE / "m.lock").acquire(timeout=0):  # and let go after
        pass
