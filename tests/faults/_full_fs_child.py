"""Child process of test_full_filesystem: one write scenario on a log dir whose filesystem
the child fills itself. Run as ``python _full_fs_child.py <scenario> <log dir> <filler>``.

It prints one JSON line: what the failing write raised, and what the writer saw before and
after the filler was removed. A SIGBUS kills it before it can print, which the parent sees
as exit status -7.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from _log_checks import make_batch

from seglog.logstore.errors import SeglogError
from seglog.logstore.index import abstract_index
from seglog.logstore.manager.log_manager import LogManager

PAGE = 4096
# (a default so that this child also runs against code from before the chunked allocation)
ALLOCATION_CHUNK = getattr(abstract_index, "ALLOCATION_CHUNK", 64 * 1024)
CONFIG = {"segment.index.bytes": str(1 << 20), "index.interval.bytes": "1"}


def fill(filler: Path, leave: int = 0) -> None:
    """Write zeros into ``filler`` until the filesystem refuses, then give back ``leave``
    bytes (whole tmpfs pages)."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        block = bytes(PAGE)
        while True:
            try:
                os.write(fd, block)
            except OSError:
                break
        if leave:
            os.ftruncate(fd, max(os.fstat(fd).st_size - leave, 0))
    finally:
        os.close(fd)


def attempt(fn) -> str | None:
    try:
        fn()
    except SeglogError as e:
        return f"{type(e).__name__}: {e}"
    return None


def append_scenario(root: Path, filler: Path, scenario: str) -> dict:
    config = dict(CONFIG)
    if scenario == "roll":
        config["segment.bytes"] = "300"  # the third batch of 118 bytes rolls
        # one page per index, so trimming the rolled segment's indexes frees no space
        config["segment.index.bytes"] = str(PAGE)
    out: dict = {}
    with LogManager([root]) as mgr:
        mgr.create_topic("t", 1, config)
        log = mgr.get_log("t", 0)
        for _ in range(2 if scenario == "roll" else 1):
            mgr.append("t", 0, make_batch(log.log_end_offset, 2))
        out["end_before"] = log.log_end_offset
        out["size_before"] = log.size_in_bytes
        # the .log's first page has room: only the index (or the new segment) needs space;
        # "timeindex" leaves room for the offset index's first allocation only
        leave = {"timeindex": ALLOCATION_CHUNK + PAGE, "partial-log": 2 * PAGE}
        fill(filler, leave=leave.get(scenario, 0))
        # "partial-log": a batch of ~36 KiB, of which only some pages can be written
        count = 300 if scenario == "partial-log" else 2
        out["error"] = attempt(lambda: mgr.append("t", 0, make_batch(log.log_end_offset,
                                                                      count)))
        out["end_while_full"] = log.log_end_offset
        out["sizes_while_full"] = [s.size for s in log.segments]
        filler.unlink()
        mgr.append("t", 0, make_batch(log.log_end_offset, 2))
        out["end_after"] = log.log_end_offset
        out["segments"] = log.num_segments
    return out


def recovery_scenario(root: Path, filler: Path, step: str) -> dict:
    if step == "write":
        mgr = LogManager([root])
        mgr.create_topic("t", 1, CONFIG)
        for i in range(20):
            mgr.append("t", 0, make_batch(i * 2, 2))
        mgr.flush_all()
        mgr.checkpoint_high_watermarks()
        print(json.dumps({"end": mgr.get_log("t", 0).log_end_offset}), flush=True)
        os._exit(0)  # a crash: no clean shutdown, the indexes stay untrimmed
    if step == "lost-indexes":
        # the rebuild must allocate: no index of the old ones is left to reuse
        for suffix in (".index", ".timeindex"):
            (root / "t-0" / f"00000000000000000000{suffix}").unlink()
    # else the sanity check reads the untrimmed indexes' last "entries": holes
    fill(filler)
    out = {"error": attempt(lambda: LogManager([root]).close())}
    filler.unlink()
    return out


def main() -> None:
    scenario, root, filler = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    if scenario.startswith("recovery-"):
        out = recovery_scenario(root, filler, scenario.removeprefix("recovery-"))
    else:
        out = append_scenario(root, filler, scenario)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
