"""Another writer removes a dead sink's unfinished commit, proven by its commit intent, and
nothing else: a batch job (or query) whose commit was SIGKILLed after its first append
leaves a tail above the high watermark that the next job to the partition truncates
automatically, while published data under a lowered high watermark is still refused.

The crash states are real: the commit runs in a forked child that SIGKILLs itself at a
named step (``SEGLOG_CRASH_AT``)."""

from __future__ import annotations

import collections
import os
import time
import uuid
from pathlib import Path

import pytest
from test_sink_replay import (
    TOPIC,
    _lower_high_watermark,
    crash_commit,
    rows,
    segment_bytes,
    visible,
)

from seglog.logstore.errors import CorruptRecordError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.streaming.errors import SinkCommitError
from seglog.streaming.sink_commit import CRASH_STEPS, abort, commit, sweep_staging
from seglog.streaming.sink_intent import intent_file, read_intents
from seglog.streaming.sink_local_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions
from seglog.streaming.sink_staging import staging_root

ALL = (0, 1, 2, 3)
PUBLISHED = CRASH_STEPS[CRASH_STEPS.index("after-checkpoint"):]


def options(dirs: list[Path]) -> SinkOptions:
    return SinkOptions.parse({"logDirs": ",".join(map(str, dirs)), "topic": TOPIC,
                              "numPartitions": "4", "maxBatchBytes": "2048"})


def stage_job(opts: SinkOptions, sink: str, tag: int, parts: tuple[int, ...] = ALL,
              batch: int = 0, tasks: int = 2):
    """What ``df.write`` stages: rows tagged ``tag`` under sink ``sink``, micro-batch 0."""
    data = rows(tag, parts)
    cols = SinkColumns.resolve(data.schema, default_topic=TOPIC)
    step = -(-data.num_rows // tasks)
    return [stage_rows(opts, cols, [data.slice(t * step, step)], sink, batch, t, 0)
            for t in range(tasks)]


def expected(*tags: tuple[int, tuple[int, ...]]) -> collections.Counter:
    out: collections.Counter = collections.Counter()
    for tag, parts in tags:
        data = rows(tag, parts)
        out.update(zip(data.column("partition").to_pylist(), data.column("value").to_pylist(),
                       strict=True))
    return out


def job_id() -> str:
    return f"job-{uuid.uuid4().hex}"


def crash_job(opts: SinkOptions, sink: str, tag: int, step: str,
              parts: tuple[int, ...] = ALL) -> list:
    """A batch job whose commit is SIGKILLed at ``step``; then, as Spark's driver does
    when the commit's worker dies, ``abort`` removes its staging."""
    staged = stage_job(opts, sink, tag, parts)
    crash_commit(staged, 0, opts, step)  # use_ledger differs, the steps do not
    abort(staged, 0, opts, sink_ids=[sink])
    return staged


def tails(dirs: list[Path]) -> dict[tuple[str, int], int]:
    """Partitions with offsets above their high watermark: how many."""
    out = {}
    with LogManager(dirs) as mgr:
        for p in mgr.partitions(TOPIC):
            log = mgr.get_log(TOPIC, p)
            if log.log_end_offset > log.high_watermark:
                out[(TOPIC, p)] = log.log_end_offset - log.high_watermark
    return out


def intents(dirs: list[Path]) -> list[Path]:
    return sorted(p for d in dirs for p in (d / ".seglog-sink" / "intent").glob("*.json"))


# ---------------------------------------------------------------------------- removed
@pytest.mark.parametrize("step", CRASH_STEPS)
def test_a_dead_jobs_commit_is_removed_by_the_next_job(tmp_path: Path, step: str,
                                                       caplog) -> None:
    """A published job, then a job whose commit dies at ``step``, then another job: it
    succeeds, the dead job's rows are gone unless its checkpoint was written, and nothing
    published is lost."""
    opts = options([tmp_path])
    commit(stage_job(opts, job_id(), 0), 0, opts, use_ledger=False)
    dead = job_id()
    crash_job(opts, dead, 1, step)
    appended = CRASH_STEPS.index(step) >= CRASH_STEPS.index("mid-partition")
    published = step in PUBLISHED
    assert bool(tails([tmp_path])) == (appended and not published)
    assert visible([tmp_path]) == expected((0, ALL), *([(1, ALL)] if published else []))

    result = commit(stage_job(opts, job_id(), 2), 0, opts, use_ledger=False)
    assert result.records == 60
    assert visible([tmp_path]) == expected((0, ALL), (2, ALL),
                                           *([(1, ALL)] if published else []))
    assert tails([tmp_path]) == {} and intents([tmp_path]) == []
    if appended and not published:
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any(f"unfinished commit of sink {dead!r}'s micro-batch 0" in m
                   for m in warned), warned


def test_a_dead_querys_commit_is_removed_by_another_query(tmp_path: Path) -> None:
    """The same for streaming queries (ledgers, growing micro-batch ids); the dead query,
    restarted later, publishes its micro-batch once."""
    opts = options([tmp_path])
    dead, live = "query-dead", "query-live"
    for b in range(3):
        commit(stage_job(opts, dead, 10 + b, batch=b), b, opts)
    crash_commit(stage_job(opts, dead, 13, batch=3), 3, opts, "mid-publish")
    assert tails([tmp_path])
    commit(stage_job(opts, live, 20, parts=(0, 1), batch=7), 7, opts)
    # the other partitions keep the dead query's tail: its intent stays for them
    assert set(tails([tmp_path])) <= {(TOPIC, 2), (TOPIC, 3)}
    assert intents([tmp_path]) == ([intent_file(tmp_path, dead)] if tails([tmp_path]) else [])
    commit(stage_job(opts, dead, 13, batch=3, tasks=3), 3, opts)  # the restart's replay
    assert visible([tmp_path]) == expected(*((10 + b, ALL) for b in range(4)), (20, (0, 1)))
    assert tails([tmp_path]) == {} and intents([tmp_path]) == []


def test_two_log_dirs_each_hold_their_own_evidence(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    opts = options(dirs)
    commit(stage_job(opts, job_id(), 0), 0, opts, use_ledger=False)
    crash_job(opts, job_id(), 1, "mid-publish")  # first partition in, the rest not
    assert len(intents(dirs)) == 2  # one per dir it was about to append to
    commit(stage_job(opts, job_id(), 2), 0, opts, use_ledger=False)
    assert visible(dirs) == expected((0, ALL), (2, ALL))
    assert tails(dirs) == {} and intents(dirs) == []


def test_the_evidence_outlives_abort_and_the_staging_sweep(tmp_path: Path) -> None:
    """Spark's abort and the 24-hour sweep remove the dead job's staging; its intent
    stays while its tail is in a log, even through another job's commit to the dir."""
    opts = options([tmp_path])
    commit(stage_job(opts, job_id(), 0), 0, opts, use_ledger=False)
    dead = job_id()
    staged = crash_job(opts, dead, 1, "after-ledger")
    assert all(not Path(f.path).exists() for m in staged for f in m.fragments)  # abort
    assert tails([tmp_path]) and intents([tmp_path]) == [intent_file(tmp_path, dead)]
    root = staging_root(tmp_path, dead)
    root.mkdir(parents=True, exist_ok=True)
    past = time.time() - 3 * 24 * 3600
    os.utime(root, (past, past))
    sweep_staging([str(tmp_path)], job_id(), 0)
    assert not root.exists()
    # another job, another topic, same dir: its commit sweeps, and keeps the evidence
    other = SinkOptions.parse({"path": str(tmp_path), "topic": "elsewhere"})
    data = rows(5, (0,))
    cols = SinkColumns.resolve(data.select(["value"]).schema, default_topic="elsewhere")
    commit([stage_rows(other, cols, [data.select(["value"])], job_id(), 0, 0, 0)], 0, other,
           use_ledger=False)
    assert intents([tmp_path]) == [intent_file(tmp_path, dead)]
    commit(stage_job(opts, job_id(), 2), 0, opts, use_ledger=False)
    assert visible([tmp_path]) == expected((0, ALL), (2, ALL))
    assert intents([tmp_path]) == []


# ---------------------------------------------------------------------------- refused
def test_a_lowered_high_watermark_over_a_finished_jobs_data_is_refused(tmp_path: Path
                                                                       ) -> None:
    """Finished jobs leave no intent: their data under a lowered high watermark (a
    dropped digit) is another producer's batches without proof, so the commit refuses.
    Also when the first job was killed right after its checkpoint (a stale intent): the
    next commit in the dir removed that intent."""
    opts = options([tmp_path])
    first = job_id()
    crash_job(opts, first, 0, "after-checkpoint")
    assert intents([tmp_path]) == [intent_file(tmp_path, first)]  # stale: data visible
    commit(stage_job(opts, job_id(), 1, parts=(1,)), 0, opts, use_ledger=False)
    assert intents([tmp_path]) == []
    commit(stage_job(opts, job_id(), 2, parts=(0,)), 0, opts, use_ledger=False)
    tp = (TOPIC, 0)
    true_hw = _lower_high_watermark(tmp_path, tp, 0)
    assert true_hw == 15 + 60
    before = segment_bytes([tmp_path])
    staged = stage_job(opts, job_id(), 3)
    with pytest.raises(SinkCommitError) as err:
        commit(staged, 0, opts, use_ledger=False)
    msg = str(err.value)
    for part in (f"partition {TOPIC}-0: offsets 0..74 lie above the high watermark 0",
                 "not this sink's", "no commit intent in", "changed nothing"):
        assert part in msg, msg
    assert segment_bytes([tmp_path]) == before
    _lower_high_watermark(tmp_path, tp, true_hw)
    commit(staged, 0, opts, use_ledger=False)
    assert visible([tmp_path]) == expected((0, ALL), (1, (1,)), (2, (0,)), (3, ALL))


def test_an_intent_that_does_not_match_proves_nothing(tmp_path: Path) -> None:
    """An intent for another micro-batch, or a damaged one, does not explain the tail:
    refused, naming what was found; the intent as written lets it through."""
    opts = options([tmp_path])
    dead = job_id()
    crash_job(opts, dead, 1, "after-append")
    path = intent_file(tmp_path, dead)
    raw = path.read_bytes()
    staged = stage_job(opts, job_id(), 2)
    before = segment_bytes([tmp_path])
    path.write_bytes(raw.replace(b'"batch": 0', b'"batch": 5'))
    with pytest.raises(SinkCommitError, match=f"intent of sink '{dead}' is for micro-batch 5"):
        commit(staged, 0, opts, use_ledger=False)
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(SinkCommitError, match=f"damaged intent file.*{path}"):
        commit(staged, 0, opts, use_ledger=False)
    assert read_intents(tmp_path).damaged and path.exists()  # evidence is kept
    assert segment_bytes([tmp_path]) == before
    path.write_bytes(raw)
    commit(staged, 0, opts, use_ledger=False)
    assert visible([tmp_path]) == expected((2, ALL))


def test_an_intent_does_not_cover_a_later_append(tmp_path: Path) -> None:
    """A dead job's intent covers the offsets it names only: a batch of the same producer
    and micro-batch beyond them (here a copy appended after its commit died) is refused."""
    opts = options([tmp_path])
    crash_job(opts, job_id(), 1, "after-append")
    tp = (TOPIC, 0)
    with LogManager([tmp_path]) as mgr:
        log = mgr.get_log(*tp)
        hw, end = log.high_watermark, log.log_end_offset
        (segment,) = sorted((tmp_path / f"{TOPIC}-0").glob("*.log"))
        buf = segment.read_bytes()
        first = next(h for h in iter_batch_headers(buf) if h.base_offset >= hw)
        mgr.append(TOPIC, 0, buf[first.position:first.end_position])  # same pid and batch
    _lower_high_watermark(tmp_path, tp, hw)  # the append's checkpoint published it: undo
    last = end + first.last_offset - first.base_offset
    with pytest.raises(SinkCommitError, match=f"offsets {end}..{last} hold a batch of "
                                              "producerId"):
        commit(stage_job(opts, job_id(), 2), 0, opts, use_ledger=False)


def test_a_rolled_back_commit_leaves_no_intent(tmp_path: Path) -> None:
    """A commit that fails (a truncated staging file) rolls its appends back and removes
    its intent: nothing is left for another writer to prove or refuse."""
    opts = options([tmp_path])
    commit(stage_job(opts, job_id(), 0), 0, opts, use_ledger=False)
    staged = stage_job(opts, job_id(), 1)
    victim = max((f for m in staged for f in m.fragments), key=lambda f: f.partition)
    with open(victim.path, "r+b") as f:
        f.truncate(victim.size - 5)
    with pytest.raises(CorruptRecordError, match="truncated or corrupt"):
        commit(staged, 0, opts, use_ledger=False)
    assert tails([tmp_path]) == {} and intents([tmp_path]) == []
    commit(stage_job(opts, job_id(), 2), 0, opts, use_ledger=False)
    assert visible([tmp_path]) == expected((0, ALL), (2, ALL))
