"""Progress bars: bytes counted where bytes are the work, drawn on stderr (tqdm: rate and
ETA) only when it is a terminal, never into the output nor with ``--json``."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import resource
import selectors
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pyarrow as pa
import pytest
from _cli import SEGLOG, run

from seglog import cli_check, cli_export, cli_import
from seglog.cli_output import Progress
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Counted(Progress):
    """The commands' Progress, keeping every instance so a test reads its counts."""

    made: list[_Counted] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _Counted.made.append(self)


@pytest.fixture
def counted(monkeypatch) -> list[_Counted]:
    _Counted.made = []
    for module in (cli_check, cli_export, cli_import):
        monkeypatch.setattr(module, "Progress", _Counted)
    return _Counted.made


def _log_dir(d: Path, records: int = 200) -> Path:
    with LogManager([d]) as mgr:
        mgr.create_topic("t", 2)
        for p in (0, 1):
            mgr.append(
                "t", p, encode_batches(pa.array([b"v" * 50] * records), max_batch_bytes=1000)
            )
    return d


def _log_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.glob("*/*.log"))


def test_progress_counts_and_draws_on_a_terminal_only():
    tty, pipe, quiet = _Terminal(), io.StringIO(), _Terminal()
    for stream, enabled in ((tty, True), (pipe, True), (quiet, False)):
        with Progress("check", 4096, in_bytes=True, stream=stream, enabled=enabled) as bar:
            for _ in range(4):
                bar.advance(1024)
        assert bar.done == 4096
    assert pipe.getvalue() == "" and quiet.getvalue() == ""  # a pipe; --json
    drawn = tty.getvalue()
    assert "check" in drawn and "/4.00k" in drawn and "B/s" in drawn, drawn


def test_check_counts_every_byte_of_the_logs(tmp_path: Path, capsys, counted):
    d = _log_dir(tmp_path / "logs")
    r = run(capsys, "check", d)
    assert r.code == 0, r
    (bar,) = counted
    assert bar.in_bytes and bar.done == bar.total == _log_bytes(d) > 0
    assert r.err == ""  # stderr is no terminal here: nothing drawn


def test_bucket_import_check_and_export_count_bytes(tmp_path: Path, s3_uri: str, capsys, counted):
    d = _log_dir(tmp_path / "logs")
    size = _log_bytes(d)
    assert run(capsys, "import", d, s3_uri).code == 0
    assert run(capsys, "check", s3_uri).code == 0
    r = run(capsys, "export", s3_uri, tmp_path / "exported")
    assert r.code == 0, r
    imported, checked, exported = counted
    assert imported.done == imported.total == size
    stored = sum(
        e.size
        for ps in BucketLogManager(s3_uri, read_only=True).state.partitions.values()
        for e in ps.segments
    )
    assert checked.done == checked.total == stored == exported.done == exported.total
    assert _log_bytes(tmp_path / "exported") == stored
    assert r.err == ""


def test_json_mode_draws_nothing_on_a_terminal(tmp_path: Path, capsys, monkeypatch):
    d = _log_dir(tmp_path / "logs")
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    for argv in (
        ["check", d, "--json"],
        ["dump-log", d / "t-0" / "00000000000000000000.log", "--json"],
        ["maintain", d, "--json"],
    ):
        assert run(capsys, *argv).code == 0
    assert terminal.getvalue() == ""
    assert run(capsys, "check", d).code == 0  # the same command draws without --json
    assert "check " in terminal.getvalue()


def test_dump_log_and_maintain_draw_on_a_terminal(tmp_path: Path, capsys, monkeypatch):
    d = _log_dir(tmp_path / "logs")
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    for argv, label in (
        (["dump-log", d / "t-0" / "00000000000000000000.log"], "dump-log "),
        (["maintain", d], "maintain: "),
    ):
        r = run(capsys, *argv)
        assert r.code == 0, r
        assert label in terminal.getvalue(), (label, terminal.getvalue())
        assert "\x1b" not in r.out and "\r" not in r.out  # the output itself stays clean
        terminal.seek(0)
        terminal.truncate()


def _read_terminal(primary: int) -> bytes:
    """What a child draws on the pty ``primary`` until it closes the terminal. A selector
    (epoll), not select(): a descriptor numbered above 1023 is fine there."""
    drawn = b""
    with selectors.DefaultSelector() as sel:
        sel.register(primary, selectors.EVENT_READ)
        while sel.select(timeout=60):
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            drawn += chunk
    return drawn


@pytest.fixture(params=["few", "crowded"])
def descriptors(request):
    """``crowded``: the process already holds descriptors past 1023 (a long test session
    once did), where select() refuses the next one; the test must not care."""
    if request.param == "few":
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if min(soft, hard) < 1100:
        pytest.skip(f"RLIMIT_NOFILE {soft}/{hard}: no room for 1,100 descriptors")
    held = []
    try:
        while not held or held[-1] < 1030:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in held:
            os.close(fd)


def test_check_draws_its_bytes_on_a_pseudo_terminal(tmp_path: Path, descriptors):
    """The real command with stderr on a pty (a user's terminal), stdout a pipe."""
    d = _log_dir(tmp_path / "logs", records=2000)
    primary, secondary = pty.openpty()
    # a terminal's size, as a user's has (a fresh pty is 0 x 0, where tqdm shows nothing)
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    try:
        with subprocess.Popen(
            [str(SEGLOG), "check", str(d)], stdout=subprocess.PIPE, stderr=secondary
        ) as proc:
            os.close(secondary)
            secondary = -1
            drawn = _read_terminal(primary)
            out = proc.stdout.read().decode() if proc.stdout else ""
            assert proc.wait(timeout=60) == 0, (out, drawn)
    finally:
        for fd in (primary, secondary):
            if fd >= 0:
                os.close(fd)
    text = drawn.decode(errors="replace")
    from tqdm import tqdm

    total = tqdm.format_sizeof(_log_bytes(d), divisor=1024)  # as the bar shows it
    assert f"check {d}" in text and f"/{total}" in text and "B/s" in text, text
    assert out.count(": OK") == 2 and "\r" not in out  # the report, undisturbed
