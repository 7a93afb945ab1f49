"""A reader of seglog's output that stops early (``seglog dump-log ... | head -1``) is
not an error: every streaming command exits 0 without a word on stderr."""

from __future__ import annotations

import os
import subprocess

import pyarrow as pa
import pytest
from _cli import SEGLOG

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("pipe") / "logs"
    with LogManager([d]) as m:
        m.create_topic("t", 1)
        for _ in range(40):
            # far more output than a pipe's buffer holds, so the writer sees the close
            values = [b"x" * 200 + str(i).encode() for i in range(100)]
            m.append("t", 0, encode_batches(pa.array(values, pa.binary())))
    return d


def _first_line_then_close(*argv: str) -> tuple[int, bytes, str]:
    proc = subprocess.Popen(
        [str(SEGLOG), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ)
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # `| head -1`: the reader goes away
    err = proc.stderr.read().decode()
    return proc.wait(timeout=120), first, err


@pytest.mark.parametrize(
    "argv",
    [
        ("dump-log", "--print-data-log", "{seg}"),
        ("dump-log", "--json", "--print-data-log", "{seg}"),
        ("consume", "t", "--path", "{dir}", "--from-beginning"),
        ("consume", "t", "--path", "{dir}", "--from-beginning", "--format", "json"),
    ],
)
def test_a_reader_that_stops_is_not_an_error(log_dir, argv):
    seg = next((log_dir / "t-0").glob("*.log"))
    args = [a.format(seg=seg, dir=log_dir) for a in argv]
    code, first, err = _first_line_then_close(*args)
    assert first  # it did print before the reader went away
    assert code == 0, err
    assert err.strip() == "" or "Processed a total of" in err, err
    assert "Broken pipe" not in err and "Traceback" not in err
