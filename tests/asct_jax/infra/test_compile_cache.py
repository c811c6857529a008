"""asct_jax.infra.compile_cache: `enable` turns JAX's persistent cache on in a directory
(the user's ~ expanded, every program cached however small or fast to compile) or, for
"", leaves the configuration alone; its listeners are registered once however often it is
called; `counts` tallies exactly JAX's cache-hit and cache-miss events and the compile
seconds saved (rounded to ms); and a program compiled again after jax.clear_caches() is
read back from the directory, counted as one miss then one hit."""
import collections
import os
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st
from jax.experimental.compilation_cache import compilation_cache as jax_cc

from asct_jax.infra import compile_cache

HIT, MISS = "/jax/compilation_cache/cache_hits", "/jax/compilation_cache/cache_misses"
SAVED = "/jax/compilation_cache/compile_time_saved_sec"
OTHER = "/jax/compilation_cache/compile_requests_use_cache"   # an event not counted
OPTIONS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
           "jax_persistent_cache_min_entry_size_bytes")


@pytest.fixture
def jax_options():
    """The cache options as they were before the test, restored after it (and JAX's cache
    re-initialised from them), so that the other tests keep conftest's cache."""
    before = {name: getattr(jax.config, name) for name in OPTIONS}
    yield before
    for name, value in before.items():
        jax.config.update(name, value)
    jax_cc.reset_cache()


def test_an_empty_directory_leaves_the_cache_as_it_was(jax_options):
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 2.5)
    assert compile_cache.enable("") is False
    assert jax.config.jax_compilation_cache_dir == jax_options["jax_compilation_cache_dir"]
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 2.5


def test_enable_expands_home_and_caches_every_program(jax_options, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 2.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 1 << 20)
    assert compile_cache.enable(os.path.join("~", "cache", "jax")) is True
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "cache" / "jax")
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
    assert jax.config.jax_persistent_cache_min_entry_size_bytes == 0
    assert compile_cache.DEFAULT_DIR == os.path.join("~", ".cache", "asct_jax", "jax")


def test_listeners_are_registered_once_however_often_enable_runs(jax_options, tmp_path):
    with mock.patch.object(compile_cache, "_counts", collections.Counter()):
        for _ in range(3):
            assert compile_cache.enable(str(tmp_path)) is True
        jax.monitoring.record_event(HIT)
        jax.monitoring.record_event_duration_secs(SAVED, 1.5)
        assert compile_cache.counts() == {"hits": 1, "misses": 0, "saved_s": 1.5}


EVENTS = st.lists(st.one_of(
    st.sampled_from([("event", HIT), ("event", MISS), ("event", OTHER), ("event", SAVED)]),
    st.tuples(st.sampled_from(["duration"]), st.sampled_from([SAVED, OTHER, HIT]),
              st.floats(0, 100, allow_nan=False))), max_size=12)


@given(EVENTS)
def test_counts_tally_exactly_the_hit_miss_and_saved_time_events(events):
    compile_cache.enable(jax.config.jax_compilation_cache_dir or "")  # listeners on
    with mock.patch.object(compile_cache, "_counts", collections.Counter()):
        assert compile_cache.counts() == {"hits": 0, "misses": 0, "saved_s": 0.0}
        for kind, name, *secs in events:
            if kind == "event":
                jax.monitoring.record_event(name)
            else:
                jax.monitoring.record_event_duration_secs(name, *secs)
        got = compile_cache.counts()
    saved = sum(e[2] for e in events if e[0] == "duration" and e[1] == SAVED)
    assert got == {"hits": sum(e == ("event", HIT) for e in events),
                   "misses": sum(e == ("event", MISS) for e in events),
                   "saved_s": round(saved, 3)}
    assert isinstance(got["saved_s"], float) and isinstance(got["hits"], int)


def test_counts_round_the_saved_seconds_to_milliseconds():
    with mock.patch.object(compile_cache, "_counts", collections.Counter()):
        compile_cache._on_duration(SAVED, 0.12345)
        compile_cache._on_duration(SAVED, 1.0004)
        compile_cache._on_event(SAVED)                  # not an event: a duration
        assert compile_cache.counts() == {"hits": 0, "misses": 0, "saved_s": 1.124}


def test_a_program_compiled_again_is_read_back_from_the_directory(jax_options, tmp_path):
    """The real events: enable in a fresh folder, compile (one miss: written), clear JAX's
    in-memory caches, compile again (one hit: read back)."""
    directory = tmp_path / "xla"
    with mock.patch.object(compile_cache, "_counts", collections.Counter()):
        assert compile_cache.enable(str(directory))
        jax_cc.reset_cache()              # JAX reads the directory on its next compile
        f = jax.jit(lambda x: jnp.cumsum(x * 3.0 + 1.0))
        x = np.arange(7.0, dtype=np.float32)   # a host array: f is the one program
        expected = np.cumsum(np.arange(7.0) * 3 + 1)
        np.testing.assert_allclose(f(x), expected)
        first = compile_cache.counts()
        written = sorted(os.listdir(directory))
        jax.clear_caches()
        np.testing.assert_allclose(f(x), expected)
        second = compile_cache.counts()
    assert (first["hits"], first["misses"]) == (0, 1) and len(written) == 1
    assert (second["hits"], second["misses"]) == (1, 1)
    assert sorted(os.listdir(directory)) == written      # read, not written again
