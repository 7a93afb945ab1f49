"""Files the writer cannot open for writing give KafkaStorageError naming the file and
the cause. Root ignores mode bits, so the tests make files immutable (``chattr +i``),
which refuses root too."""

from __future__ import annotations

import io
import subprocess

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from seglog.cli import main as seglog_main
from seglog.logstore.errors import KafkaStorageError
from seglog.logstore.manager.log_manager import LogManager


def batch(n: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for i in range(n):
        b.append(i, 1_700_000_000_000 + i, None, b"v%d" % i, [])
    return bytes(b.build())


def test_an_immutable_active_index_is_a_storage_error_naming_it(tmp_path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 1)
        mgr.append("t", 0, batch(3))
    index = tmp_path / "t-0" / "00000000000000000000.index"
    proc = subprocess.run(["chattr", "+i", str(index)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"chattr +i refused here: {proc.stderr.strip()}")
    try:
        with LogManager([tmp_path]) as mgr, pytest.raises(
                KafkaStorageError, match=rf"cannot open index {index} for writing: Operation "
                                         "not permitted"):
            mgr.append("t", 0, batch(2))
    finally:
        subprocess.run(["chattr", "-i", str(index)], check=True)
    with LogManager([tmp_path], read_only=True) as reader:
        assert reader.high_watermarks() == {("t", 0): 3}
    out = io.StringIO()
    assert seglog_main(["check", str(tmp_path)], out) == 0
    assert "log end offset 3: OK" in out.getvalue()
