"""The soak's end checks (``benchmarks/soak.py``): the journals the processes left
(``benchmarks/soak_roles.py``) against what the log dir holds at the end.

- every acknowledged record of the topic ``in`` is present exactly once, in the partition
  its writer chose, and each writer's records of a partition are in the order it wrote
  them; no record is there that no writer tried (a record tried and not acknowledged, or
  failed, may be present, at most once: it is counted, not a violation);
- every read returned committed rows only, in order: each record a reader journaled at
  an offset is the record at that offset at the end, and no read skipped an offset;
- each Spark sink output holds every record of ``in`` exactly once;
- nothing outside seglog's objects changed (the planted foreign files and objects).

Every violation is one line naming the record, partition and offset and the journal
that saw it.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from soak_roles import TOPIC

_ID = re.compile(r"w(\d+)-(\d+)$")


@dataclass
class Findings:
    violations: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def violation(self, text: str) -> None:
        self.violations.append(text)


@dataclass
class _Writer:
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)  # seq -> (partition, lo)
    acked: set[int] = field(default_factory=set)  # seqs
    failed: set[int] = field(default_factory=set)


def _read_writer(path: Path) -> _Writer:
    w = _Writer()
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue  # a line cut by a kill (never an ack: acks are written whole, fsynced)
        try:
            lo, hi = int(parts[1]), int(parts[2])
        except ValueError:
            continue
        if parts[0] == "try":
            for span in parts[3:]:
                p, s, n = (int(x) for x in span.split(":"))
                for seq in range(s, s + n):
                    w.spans[seq] = (p, s)
        elif parts[0] == "ack":
            w.acked.update(range(lo, hi + 1))
        elif parts[0] == "fail":
            w.failed.update(range(lo, hi + 1))
    return w


def check_input(work: Path, log: Mapping[int, list[str]], out: Findings) -> None:
    """``log``: partition -> the value at each offset from 0 of ``in`` at the end."""
    writers = {
        int(m.group(1)): _read_writer(p)
        for p in sorted(work.glob("writer-*.journal"))
        if (m := re.search(r"writer-(\d+)\.journal$", p.name))
    }
    seen: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)  # -> (p, offset)
    for p, values in log.items():
        last: dict[int, tuple[int, int]] = {}  # writer -> (seq, offset) last seen in p
        for offset, value in enumerate(values):
            out.counts["records checked"] += 1
            m = _ID.match(value)
            if m is None or int(m.group(1)) not in writers:
                out.violation(f"{TOPIC}-{p} offset {offset}: {value!r} was written by no writer")
                continue
            wid, seq = int(m.group(1)), int(m.group(2))
            seen[(wid, seq)].append((p, offset))
            w = writers[wid]
            if seq not in w.spans:
                out.violation(
                    f"{TOPIC}-{p} offset {offset}: {value} was never tried by "
                    f"writer {wid} (writer-{wid}.journal)"
                )
            elif w.spans[seq][0] != p:
                out.violation(
                    f"{TOPIC}-{p} offset {offset}: {value} belongs in partition {w.spans[seq][0]}"
                )
            before = last.get(wid)
            if before is not None and before[0] > seq:
                out.violation(
                    f"{TOPIC}-{p} offset {offset}: {value} comes after "
                    f"w{wid}-{before[0]} (offset {before[1]}), written later"
                )
            last[wid] = (seq, offset)
    for wid, w in sorted(writers.items()):
        out.counts["records acknowledged"] += len(w.acked)
        for seq in sorted(w.acked):
            where = seen.get((wid, seq), [])
            if not where:
                p = w.spans.get(seq, (-1, 0))[0]
                out.violation(
                    f"w{wid}-{seq}: acknowledged (writer-{wid}.journal) but missing "
                    f"from {TOPIC}-{p}"
                )
        for seq in w.spans:
            where = seen.get((wid, seq), [])
            if len(where) > 1:
                out.violation(
                    f"w{wid}-{seq}: present {len(where)} times, at "
                    + ", ".join(f"{TOPIC}-{p}@{o}" for p, o in where)
                )
            if where and seq not in w.acked:
                kind = "failed" if seq in w.failed else "in flight at a kill"
                out.counts[f"records present though {kind}"] += 1


def check_readers(work: Path, log: Mapping[int, list[str]], out: Findings) -> None:
    for path in sorted(work.glob("reader-*.journal")):
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            parts = line.split(" ", 3)
            if parts[0] == "gap":
                out.violation(f"{path.name}:{n}: a read skipped offsets: {line}")
            elif parts[0] == "error":
                out.counts["reader errors"] += 1
            elif parts[0] == "R" and len(parts) == 4:
                p, first = int(parts[1]), int(parts[2])
                values = log.get(p, [])
                for i, value in enumerate(parts[3].split(",")):
                    out.counts["records read checked"] += 1
                    offset = first + i
                    have = values[offset] if offset < len(values) else None
                    if have != value:
                        out.violation(
                            f"{path.name}:{n}: read {value} at {TOPIC}-{p} offset "
                            f"{offset}; the log has {have or 'nothing'} there"
                        )
                        break
                out.counts["reads checked"] += 1


def check_output(
    name: str, input_values: Counter[str], output_values: Counter[str], out: Findings
) -> None:
    out.counts[f"{name} records checked"] += sum(output_values.values())
    for value, n in sorted((input_values - output_values).items())[:1000]:
        out.violation(f"sink output {name}: {value} missing ({n} of {input_values[value]})")
    for value, n in sorted((output_values - input_values).items())[:1000]:
        out.violation(f"sink output {name}: {value} {n} time(s) more than in {TOPIC}")


def check_foreign(
    before: Mapping[str, bytes | None], after: Mapping[str, bytes | None], out: Findings
) -> None:
    for name, data in before.items():
        now = after.get(name)
        if now is None:
            out.violation(f"foreign {name}: deleted")
        elif now != data:
            out.violation(f"foreign {name}: changed ({len(data or b'')} -> {len(now)} bytes)")
        out.counts["foreign objects checked"] += 1
