"""A full filesystem, for real: a 2 MiB tmpfs filled by the writer's own process.

A store into an unallocated page of a memory-mapped index kills the process with SIGBUS
when no page can be had; seglog must instead raise KafkaStorageError, leave the log as
it was, and continue once space is freed. Each scenario runs in a child process (a
SIGBUS shows as exit status -7); afterwards the parent reads the log back, checks its
files, and asks ``seglog check`` for the same end offset.
"""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _log_checks import check_partition_files, make_batch, read_whole_log

from seglog.cli import main as seglog_main
from seglog.logstore.manager.log_manager import LogManager

CHILD = Path(__file__).with_name("_full_fs_child.py")


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {proc.stderr.strip()}")
    try:
        (mnt / "logs").mkdir()
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def run_child(scenario: str, mnt: Path) -> dict:
    proc = subprocess.run([sys.executable, str(CHILD), scenario, str(mnt / "logs"),
                           str(mnt / "filler")], capture_output=True, text=True, timeout=120)
    assert proc.returncode != -signal.SIGBUS, f"{scenario}: the writer died of SIGBUS"
    assert proc.returncode == 0, f"{scenario}: exit {proc.returncode}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def reader_and_check_agree(root: Path, expected_end: int) -> None:
    """A reader in another process, the files themselves and ``seglog check`` all see
    offsets 0..expected_end-1, intact."""
    with LogManager([root], read_only=True) as mgr:
        log = mgr.get_log("t", 0)
        assert log.high_watermark == expected_end
        assert read_whole_log(log) == expected_end
    assert check_partition_files(root / "t-0") == expected_end
    out = io.StringIO()
    assert seglog_main(["check", str(root)], out) == 0, out.getvalue()
    assert re.search(rf"log end offset {expected_end}: OK", out.getvalue()), out.getvalue()


@pytest.mark.parametrize(("scenario", "failing_file"), [
    ("index", r"00000000000000000000\.index"),
    ("timeindex", r"00000000000000000000\.timeindex"),
    # the roll's first write: the producer-state snapshot, else the new segment's .log
    ("roll", r"00000000000000000004\.(snapshot|log)"),
    ("partial-log", r"00000000000000000000\.log"),
])
def test_append_on_a_full_filesystem_raises_and_continues(small_fs, scenario, failing_file):
    out = run_child(scenario, small_fs)
    assert out["error"] is not None and out["error"].startswith("KafkaStorageError"), out
    assert re.search(failing_file, out["error"]) and "No space left" in out["error"], out
    # nothing of the failed append stayed: not in the Log, not in the files
    before = out["end_before"]
    assert out["end_while_full"] == before
    assert out["sizes_while_full"][0] == out["size_before"]
    assert sum(out["sizes_while_full"][1:]) == 0
    assert out["end_after"] == before + 2
    reader_and_check_agree(small_fs / "logs", before + 2)


@pytest.mark.parametrize("step", ["lost-indexes", "untrimmed-indexes"])
def test_recovery_at_open_on_a_full_filesystem(small_fs, step):
    """A crash leaves untrimmed, sparse indexes; the next writer opens on a full
    filesystem. Reading their holes must not fault (the rebuild then reuses their
    space); rebuilding lost indexes raises KafkaStorageError, and the next open after
    space is freed recovers everything."""
    root = small_fs / "logs"
    assert run_child("recovery-write", small_fs) == {"end": 40}
    out = run_child(f"recovery-{step}", small_fs)
    if step == "lost-indexes":
        assert out["error"] is not None and out["error"].startswith("KafkaStorageError"), out
        assert "00000000000000000000.index" in out["error"] and "No space left" in out["error"]
    else:
        assert out["error"] is None
    with LogManager([root]) as mgr:
        log = mgr.get_log("t", 0)
        assert log.log_end_offset == 40
        mgr.append("t", 0, make_batch(40, 2))
    reader_and_check_agree(root, 42)
