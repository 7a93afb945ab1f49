"""Where ``seglog check`` sends what it finds: text lines as it always printed them, or
one JSON document (``--json``) with the same findings as structured values.

The check walks the dirs once and tells a reporter each finding; the reporter decides
the form. Not thread-safe: one command's main thread owns it.

JSON document (keys documented in docs/cli.md)::

    {"ok": bool, "exitCode": 0|1,
     "dirs": [{"path", "problems": [{"file", "message"}], "notes": [{"file", "message"}],
               "stateFiles": [{"status": "problem"|"note"|"fixed", "kind", "file",
                               "line": int|null, "message"}],
               "partitions": [{"dir", "segments", "batches", "logEndOffset", "ok",
                               "problems": [{"file", "message"}],
                               "notes": [{"file", "message"}]}],
               "sink": [{"file", "problem": bool, "message"}]}]}
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from .cli_output import write_json

if TYPE_CHECKING:  # the check loads these lazily; the command line starts without them
    from seglog.logstore.manager.log_check import Problem
    from seglog.streaming.sink_check import SinkFinding


class CheckReporter(Protocol):
    def begin_dir(self, path: PurePath) -> None: ...
    def dir_problem(self, path: PurePath, message: str) -> None: ...
    def dir_note(self, path: PurePath, message: str) -> None: ...
    def state_finding(self, p: Problem) -> None: ...
    def problem(self, file: PurePath, message: str, *, text: str | None = None) -> None: ...
    def note(self, file: PurePath, message: str) -> None: ...
    def end_partition(self, dir_: PurePath, segments: int, batches: int, log_end_offset: int,
                      problems: int, notes: int) -> None: ...
    def sink_finding(self, f: SinkFinding) -> None: ...
    def finish(self, exit_code: int) -> None: ...


def _nothing() -> None:
    pass


def problem_status(p: Problem) -> str:
    return "note" if p.note else "fixed" if p.fixed else "problem"


class TextCheckReport:
    """The lines ``seglog check`` prints (unchanged since before ``--json``)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        # Called before each line: the check sets it to erase its progress bar, which
        # the line would otherwise be appended to on a terminal.
        self.before_write: Callable[[], object] = _nothing

    def _line(self, text: str) -> None:
        self.before_write()
        self.out.write(text + "\n")

    def begin_dir(self, path: PurePath) -> None:
        pass

    def dir_problem(self, path: PurePath, message: str) -> None:
        self._line(f"{path}: {message}")

    def dir_note(self, path: PurePath, message: str) -> None:
        self._line(f"{path}: {message}")

    def state_finding(self, p: Problem) -> None:
        self._line(f"{problem_status(p)}: {p.message}")

    def problem(self, file: PurePath, message: str, *, text: str | None = None) -> None:
        # text: the finding's own line when its message already names the file
        self._line(text if text is not None else f"{file}: {message}")

    def note(self, file: PurePath, message: str) -> None:
        self._line(f"{file}: note: {message}")

    def end_partition(self, dir_: PurePath, segments: int, batches: int, log_end_offset: int,
                      problems: int, notes: int) -> None:
        status = "OK" if not problems else f"{problems} problem(s)"
        if notes:
            status += f" ({notes} note(s))"
        self._line(f"{dir_}: {segments} segment(s), {batches} batch(es), log end offset "
                   f"{log_end_offset}: {status}")

    def sink_finding(self, f: SinkFinding) -> None:
        self._line(f"{f.path}: {f.text}")

    def finish(self, exit_code: int) -> None:
        pass


# CorruptCheckpointError names "<file>, line N": the only place the line is known.
_LINE_RE = re.compile(r", line (\d+):")


class JsonCheckReport:
    """Collects the findings; ``finish`` writes them as one JSON document."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.dirs: list[dict[str, Any]] = []
        self._partition: dict[str, Any] = self._new_partition()

    @staticmethod
    def _new_partition() -> dict[str, Any]:
        return {"problems": [], "notes": []}

    def _dir(self) -> dict[str, Any]:
        return self.dirs[-1]

    def begin_dir(self, path: PurePath) -> None:
        self.dirs.append({"path": str(path), "problems": [], "notes": [], "stateFiles": [],
                          "partitions": [], "sink": []})

    def dir_problem(self, path: PurePath, message: str) -> None:
        self._dir()["problems"].append({"file": str(path), "message": message})

    def dir_note(self, path: PurePath, message: str) -> None:
        self._dir()["notes"].append({"file": str(path), "message": message})

    def state_finding(self, p: Problem) -> None:
        m = _LINE_RE.search(p.message) if p.kind == "corrupt-checkpoint" else None
        self._dir()["stateFiles"].append({
            "status": problem_status(p), "kind": p.kind, "file": str(p.path),
            "line": int(m[1]) if m else None, "message": p.message})

    def problem(self, file: PurePath, message: str, *, text: str | None = None) -> None:
        self._partition["problems"].append({"file": str(file), "message": message})

    def note(self, file: PurePath, message: str) -> None:
        self._partition["notes"].append({"file": str(file), "message": message})

    def end_partition(self, dir_: PurePath, segments: int, batches: int, log_end_offset: int,
                      problems: int, notes: int) -> None:
        doc = {"dir": str(dir_), "segments": segments, "batches": batches,
               "logEndOffset": log_end_offset, "ok": not problems, **self._partition}
        self._dir()["partitions"].append(doc)
        self._partition = self._new_partition()

    def sink_finding(self, f: SinkFinding) -> None:
        self._dir()["sink"].append({"file": str(f.path), "problem": f.problem,
                                    "message": f.text})

    def finish(self, exit_code: int) -> None:
        write_json(self.out, {"ok": exit_code == 0, "exitCode": exit_code,
                              "dirs": self.dirs})
