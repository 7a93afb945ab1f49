"""``seglog check`` on a log dir reports the exactly-once sink's state (``.seglog-sink``)."""

from __future__ import annotations

import io
from pathlib import Path

from test_sink_replay import SINK, TOPIC, options, stage

from seglog.cli import main
from seglog.streaming.sink_commit import SinkLedger, commit


def _check(log_dir: Path) -> tuple[int, str]:
    out = io.StringIO()
    return main(["check", str(log_dir)], out), out.getvalue()


def test_check_reports_the_sink_ledger_and_its_damage(tmp_path: Path) -> None:
    opts = options([tmp_path])
    commit(stage(opts, 0, (0, 1)), 0, opts)
    commit(stage(opts, 1, (1, 2)), 1, opts)
    ledger = SinkLedger(tmp_path, SINK)
    code, text = _check(tmp_path)
    assert code == 0, text
    assert f"{ledger.path}: sink ledger of {SINK!r}: 3 partition(s), OK" in text

    # an entry that names offsets holding another micro-batch: the data contradicts it
    raw = ledger.path.read_bytes()
    ledger.path.write_bytes(raw.replace(f'"{TOPIC}", 2, 1,'.encode(),
                                        f'"{TOPIC}", 2, 0,'.encode()))
    code, text = _check(tmp_path)
    assert code == 1 and f"{TOPIC}-2: the ledger says micro-batch 0" in text, text

    ledger.path.write_bytes(raw[:30])
    code, text = _check(tmp_path)
    assert code == 1 and f"{ledger.path}: damaged sink ledger (not JSON" in text, text
    # the next commit to the dir rebuilds it, and check is happy again
    commit(stage(opts, 2, (0,)), 2, opts)
    code, text = _check(tmp_path)
    assert code == 0 and "OK" in text, text

    (tmp_path / ".seglog-sink" / "maintenance.json").write_bytes(b"{")
    code, text = _check(tmp_path)
    assert code == 1 and "maintenance.json: damaged" in text, text
