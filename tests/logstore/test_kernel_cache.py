"""kernel_cache: a kernel compiles once per machine, and a query's planning starts it early.

Every test gets an empty numba cache (``NUMBA_CACHE_DIR``) and its own state dir (the
locks and markers live under the temp dir), so it sees what a fresh install sees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from seglog.logstore.records import kernel_cache

# Waits for the barrier file, so that both processes reach their first call together
# (after their imports), then hashes one value and says whether numba compiled the kernel
# or loaded it from the cache.
_FIRST_CALL = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import pyarrow as pa
    from seglog.streaming.partitioner import _murmur2_kernel, murmur2_array

    barrier = Path(sys.argv[1])
    while not barrier.exists():
        time.sleep(0.005)
    murmur2_array(pa.array([b"21"]))
    stats = _murmur2_kernel.stats
    print(json.dumps({"compiled": sum(stats.cache_misses.values()),
                      "loaded": sum(stats.cache_hits.values())}))
""")


def _fresh_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba-cache")
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    return env


def test_processes_starting_together_compile_a_kernel_once(tmp_path):
    env = _fresh_env(tmp_path)
    barrier = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _FIRST_CALL, str(barrier)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    barrier.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["compiled"] for r in results) == [0, 1], results
    assert sorted(r["loaded"] for r in results) == [0, 1], results


@pytest.fixture
def fresh_state(tmp_path, monkeypatch):
    """This process's kernel_cache as on a fresh machine (own state dir and numba cache,
    inherited by the warm-up processes it starts)."""
    env = _fresh_env(tmp_path)
    monkeypatch.setenv("NUMBA_CACHE_DIR", env["NUMBA_CACHE_DIR"])
    monkeypatch.setenv("TMPDIR", env["TMPDIR"])
    monkeypatch.delenv(kernel_cache.PREWARM_ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", env["TMPDIR"])
    monkeypatch.setattr(kernel_cache, "_key", None)
    monkeypatch.setattr(kernel_cache, "_children", [])
    return Path(env["NUMBA_CACHE_DIR"])


def test_planning_a_read_compiles_its_kernels_in_the_background_once(fresh_state):
    assert not kernel_cache.is_marked("codec_kernels.decode_v2")
    assert kernel_cache.prewarm("read")
    # A second planning process while the first warm-up runs starts none.
    assert not kernel_cache.prewarm("read")
    (child,) = kernel_cache._children
    assert child.wait(timeout=600) == 0
    assert kernel_cache.is_marked("codec_kernels.decode_v2")
    compiled = sorted(p.name for p in fresh_state.rglob("*.nbi"))
    assert any(name.startswith("codec_kernels.decode_v2-") for name in compiled), compiled
    # The encoder is a write's: a read's warm-up leaves it alone.
    assert not any(name.startswith("codec_kernels.plan_v2-") for name in compiled), compiled
    assert not kernel_cache.prewarm("read")  # marked now


def test_planning_a_write_compiles_the_encoder_and_the_partitioner(fresh_state):
    assert kernel_cache.prewarm("write")
    (child,) = kernel_cache._children
    assert child.wait(timeout=600) == 0
    assert all(kernel_cache.is_marked(k) for k in kernel_cache.QUERY_KERNELS["write"])
    assert not kernel_cache.prewarm("write")


def test_prewarm_is_off_with_seglog_prewarm_0(fresh_state, monkeypatch):
    monkeypatch.setenv(kernel_cache.PREWARM_ENV, "0")
    assert not kernel_cache.prewarm("read")
    assert kernel_cache._children == []


def test_an_unwritable_temp_dir_costs_only_the_sharing(tmp_path, monkeypatch, caplog):
    from seglog.streaming.partitioner import murmur2

    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(not_a_dir))
    monkeypatch.setattr(kernel_cache, "_called", set())
    monkeypatch.setattr(kernel_cache, "_key", None)
    assert murmur2(b"21") == -973932308
    assert "no compile lock for partitioner._murmur2_kernel" in caplog.text


def test_the_cache_key_reads_the_kernels_real_sources(fresh_state, caplog):
    """The key hashes the files numba's index checks; one path off (after logstore/ was
    split into packages the partitioner was looked for under logstore/) and no kernel was
    ever marked, so every query's planning started a warm-up again."""
    assert all(path.is_file() for path in kernel_cache._SOURCES), kernel_cache._SOURCES
    kernel_cache.first_call("probe.kernel", lambda: None)
    assert kernel_cache.is_marked("probe.kernel")
    assert "could not mark" not in caplog.text
