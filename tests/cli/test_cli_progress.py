"""Progress bars: drawn on stderr only when it is a terminal, never into the output."""

from __future__ import annotations

import io
import sys

import pyarrow as pa
from _cli import run

from seglog.cli_output import Progress
from seglog.logstore.log_manager import LogManager
from seglog.logstore.record_codec import encode_batches


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_on_a_terminal_only():
    tty, pipe = _Terminal(), io.StringIO()
    for stream in (tty, pipe):
        with Progress("check", 4, stream=stream) as bar:
            for _ in range(4):
                bar.advance()
    assert pipe.getvalue() == ""
    assert "check [" in tty.getvalue() and "4/4" in tty.getvalue()
    assert tty.getvalue().endswith("\r\x1b[K")  # the line is cleared at the end


def test_check_dump_log_and_maintain_draw_a_bar_on_a_terminal(tmp_path, capsys, monkeypatch):
    d = tmp_path / "logs"
    with LogManager([d]) as mgr:
        mgr.create_topic("t", 2)
        mgr.append("t", 0, encode_batches(pa.array([b"v"] * 50), max_batch_bytes=100))
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    for argv, label in ((["check", d], "check "),
                        (["dump-log", d / "t-0" / "00000000000000000000.log"], "dump-log "),
                        (["maintain", d], "maintain: ")):
        r = run(capsys, *argv)
        assert r.code == 0, r
        assert label in terminal.getvalue(), (label, terminal.getvalue())
        assert "\x1b" not in r.out  # the output itself stays clean
        terminal.seek(0)
        terminal.truncate()
