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


def test_check_reports_commit_intents(tmp_path: Path) -> None:
    """An unfinished commit's intent is reported with the offsets it proves (no problem);
    a damaged one is a problem; after the next commit, nothing is left to report."""
    from test_sink_intent import crash_job, job_id, stage_job
    from test_sink_intent import options as job_options

    from seglog.streaming.sink_intent import intent_file

    opts = job_options([tmp_path])
    dead = job_id()
    crash_job(opts, dead, 1, "after-append")
    path = intent_file(tmp_path, dead)
    code, text = _check(tmp_path)
    assert code == 0, text
    assert (f"{path}: commit intent of sink {dead!r}, micro-batch 0: unfinished, above the "
            f"high watermark: {TOPIC}-0 offsets 0..14, {TOPIC}-1 offsets 0..14") in text, text
    raw = path.read_bytes()
    path.write_bytes(raw[:-3])
    code, text = _check(tmp_path)
    assert code == 1 and f"{path}: damaged commit intent (not JSON" in text, text
    path.write_bytes(raw)
    commit(stage_job(opts, job_id(), 2), 0, opts, use_ledger=False)
    code, text = _check(tmp_path)
    assert code == 0 and "commit intent" not in text, text
