"""A library producer's appends reach other processes by themselves: within ``linger.ms``
of ``append`` (fsynced first), at once with ``linger.ms=0`` or ``flush()``, and never
with ``publish=False`` until the caller publishes (the sink's commit relies on that)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.config.config import ManagerConfig
from seglog.logstore.errors import ConfigError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

TP = ("events", 0)


def _records(n: int = 3) -> bytes:
    return encode_batches(pa.array([f"r{i}".encode() for i in range(n)]))


def _published(log_dir: Path) -> dict[tuple[str, int], int]:
    """What another process sees: a fresh read-only manager's high watermarks."""
    with LogManager([log_dir], read_only=True) as reader:
        return reader.high_watermarks()


_WAIT_IN_OTHER_PROCESS = textwrap.dedent("""
    import sys, time
    from seglog.logstore.manager.log_manager import LogManager
    deadline = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < deadline:
        with LogManager([sys.argv[1]], read_only=True) as reader:
            if reader.high_watermarks().get(("events", 0), 0) >= 3:
                print("seen"); sys.exit(0)
        time.sleep(0.01)
    print("not seen"); sys.exit(1)
""")


def test_another_process_sees_an_append_with_no_further_call(tmp_path: Path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("events", partitions=1)
        watcher = subprocess.Popen([sys.executable, "-c", _WAIT_IN_OTHER_PROCESS,
                                    str(tmp_path), "30"], stdout=subprocess.PIPE, text=True)
        mgr.append(*TP, _records())
        # The writer stays open and idle: no flush, no checkpoint call, no close.
        out, _ = watcher.communicate(timeout=60)
        assert (watcher.returncode, out.strip()) == (0, "seen")


def test_linger_zero_publishes_before_append_returns(tmp_path: Path):
    with LogManager([tmp_path], config={"linger.ms": 0}) as mgr:
        mgr.create_topic("events", partitions=1)
        mgr.append(*TP, _records())
        assert _published(tmp_path)[TP] == 3
        log = mgr.get_log(*TP)
        assert log.recovery_point >= 3, "published data must be fsynced first"


def test_flush_publishes_what_lingers(tmp_path: Path):
    with LogManager([tmp_path], config={"linger.ms": 3_600_000}) as mgr:
        mgr.create_topic("events", partitions=1)
        mgr.append(*TP, _records())
        assert _published(tmp_path)[TP] == 0
        mgr.flush()
        assert _published(tmp_path)[TP] == 3


def test_publish_false_waits_for_the_caller(tmp_path: Path):
    with LogManager([tmp_path], config={"linger.ms": 0}) as mgr:
        mgr.create_topic("events", partitions=1)
        mgr.append(*TP, _records(), publish=False)
        mgr.flush()  # nothing of the caller's is pending
        assert _published(tmp_path)[TP] == 0
        mgr.checkpoint_high_watermarks()
        assert _published(tmp_path)[TP] == 3


def test_a_burst_of_appends_is_published_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    publishes = []
    with LogManager([tmp_path], config={"linger.ms": 3_600_000}) as mgr:
        mgr.create_topic("events", partitions=1)
        real = mgr.publisher._publish
        monkeypatch.setattr(mgr.publisher, "_publish",
                            lambda: (publishes.append(1), real())[1])
        for _ in range(50):
            mgr.append(*TP, _records(1))
        mgr.flush()
        assert len(publishes) == 1
        assert _published(tmp_path)[TP] == 50


def test_close_and_pause_end_the_publisher_and_publish(tmp_path: Path):
    mgr = LogManager([tmp_path], config={"linger.ms": 3_600_000})
    mgr.create_topic("events", partitions=1)
    mgr.append(*TP, _records())
    mgr.pause()
    assert _published(tmp_path)[TP] == 3
    assert mgr.resume()
    mgr.append(*TP, _records())
    mgr.close()
    assert _published(tmp_path)[TP] == 6
    assert not [t for t in threading.enumerate() if t.name == "seglog-publisher"]


def test_a_failed_background_publish_is_raised_by_flush(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    with LogManager([tmp_path], config={"linger.ms": 1}) as mgr:
        mgr.create_topic("events", partitions=1)
        failed = threading.Event()

        def broken() -> None:
            failed.set()
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(mgr.publisher, "_publish", broken)
        mgr.append(*TP, _records())
        assert failed.wait(30)
        deadline = time.monotonic() + 30
        with pytest.raises(OSError, match="No space left"):  # once the thread stored it
            while time.monotonic() < deadline:
                mgr.flush()
        mgr.flush()  # raised once; the writer goes on


def test_linger_ms_is_validated():
    assert ManagerConfig.of({}).linger_ms == 5
    with pytest.raises(ConfigError, match="linger.ms"):
        ManagerConfig.of({"linger.ms": "-1"})
