"""``seglog check`` for the exactly-once sink's state in a log dir (``.seglog-sink/``).

Read-only. Reports, per log dir: each sink ledger (does it parse, does each entry match
the batch headers it points at), each commit intent (damaged, or what unfinished commit
it still proves), the maintenance state file, and leftover staging. What
is a problem and what is only worth knowing is documented in ``docs/sink-state.md``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from seglog.logstore.errors import SeglogError
from seglog.logstore.records.record_format import TopicPartition
from seglog.logstore.storage.storage import LOCAL

from .errors import LedgerDamagedError
from .sink_intent import read_intents, unexplained_tail
from .sink_ledger import LedgerEntry, ledger_dir, read_ledger_file
from .sink_replay import newest_sink_batch
from .sink_staging import producer_id_of, sink_state_dir

__all__ = ["SinkFinding", "check_sink_state"]

_MAINTENANCE_FILE = "maintenance.json"


@dataclass(frozen=True, slots=True)
class SinkFinding:
    """One line of the report; ``problem`` findings make ``seglog check`` fail."""

    path: Path
    problem: bool
    text: str


def check_sink_state(log_dir: Path) -> list[SinkFinding]:
    """Findings about ``log_dir``'s sink state (none if the dir has no ``.seglog-sink``)."""
    state = sink_state_dir(log_dir)
    if not LOCAL.is_dir(state):
        return []
    out: list[SinkFinding] = []
    ledgers = ledger_dir(log_dir)
    files = (sorted(ledgers / n for n in LOCAL.list_names(ledgers)) if LOCAL.is_dir(ledgers)
             else [])
    for path in files:
        if path.name.endswith(".tmp"):
            out.append(SinkFinding(path, False, "left by an interrupted ledger write: "
                                                "safe to delete"))
            continue
        try:
            sink, entries = read_ledger_file(path)
        except (OSError, LedgerDamagedError) as e:
            out.append(SinkFinding(path, True, f"damaged sink ledger ({e}): the sink's "
                                               "next commit to this dir rebuilds it from "
                                               "the data"))
            continue
        out.extend(_check_entries(log_dir, path, sink, entries))
    out.extend(_check_intents(log_dir))
    out.extend(_check_maintenance(state / _MAINTENANCE_FILE))
    staging = state / "staging"
    sink_dirs = sorted(staging / n for n in LOCAL.list_names(staging)) \
        if LOCAL.is_dir(staging) else []
    for sink_dir in sink_dirs:
        n = sum(1 for _ in LOCAL.walk_files(sink_dir))
        if n:
            out.append(SinkFinding(sink_dir, False, f"{n} staging file(s) of micro-batches "
                                                    "in flight or of failed attempts (swept "
                                                    "by later commits)"))
    return out


def _check_entries(log_dir: Path, path: Path, sink: str,
                   entries: dict[TopicPartition, LedgerEntry]) -> list[SinkFinding]:
    from seglog.logstore.manager.log_dirs_reader import LogDirsReader

    pid = producer_id_of(sink)
    out = []
    try:
        mgr = LogDirsReader([log_dir])
    except SeglogError as e:
        return [SinkFinding(path, True, f"cannot open {log_dir} to check the ledger: {e}")]
    with mgr:
        hws = mgr.high_watermarks()
        for (topic, partition), entry in sorted(entries.items()):
            tp = f"{topic}-{partition}"
            if (topic, partition) not in hws:
                out.append(SinkFinding(path, False, f"{tp}: no such partition here any more"))
                continue
            if entry.end > hws[(topic, partition)]:
                out.append(SinkFinding(path, False, f"{tp}: micro-batch {entry.batch_id} ends "
                                       f"at {entry.end}, above the high watermark: a commit "
                                       "that stopped before its checkpoint (its next commit "
                                       "settles it)"))
                continue
            w = newest_sink_batch(mgr.get_log(topic, partition), pid, entry)
            if w.source not in ("ledger", "removed"):
                out.append(SinkFinding(path, True, f"{tp}: the ledger says micro-batch "
                                       f"{entry.batch_id} is at offsets "
                                       f"{entry.start}..{entry.end - 1}, "
                                       "but the data there is not that batch of this sink "
                                       "(the next commit rebuilds the entry)"))
    if not any(f.problem for f in out):
        out.append(SinkFinding(path, False, f"sink ledger of {sink!r}: {len(entries)} "
                                            "partition(s), OK"))
    return out


def _check_intents(log_dir: Path) -> list[SinkFinding]:
    from seglog.logstore.manager.log_dirs_reader import LogDirsReader

    found = read_intents(log_dir)
    out = [SinkFinding(path, True, f"damaged commit intent ({why}): it proves nothing, so a "
                                   "sink commit refuses the tail it may explain; delete it "
                                   "once that tail is removed (docs/sink-state.md)")
           for path, why in found.damaged]
    if not found.intents:
        return out
    try:
        mgr = LogDirsReader([log_dir])
    except SeglogError as e:
        return [*out, SinkFinding(log_dir, True, f"cannot open {log_dir} to check the "
                                                 f"commit intents: {e}")]
    with mgr:
        for intent in found.intents:
            path = intent.path or log_dir
            left = unexplained_tail(intent, mgr)
            who = f"commit intent of sink {intent.sink_id!r}, micro-batch {intent.batch_id}"
            if not left:
                out.append(SinkFinding(path, False, f"{who}: its offsets are "
                                       "published or gone (the next commit removes it)"))
                continue
            where = ", ".join(f"{r.topic}-{r.partition} offsets {first}..{end - 1}"
                              for r, first, end in left)
            out.append(SinkFinding(path, False, f"{who}: unfinished, above the high "
                                   f"watermark: {where} (the next commit to each partition "
                                   "removes them)"))
    return out


def _check_maintenance(path: Path) -> list[SinkFinding]:
    try:
        doc = json.loads(LOCAL.read(path))
        int(doc["last_run_ms"])
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [SinkFinding(path, True, f"damaged ({e!r}): the next commit runs maintenance "
                                        "and rewrites it")]
    return []
