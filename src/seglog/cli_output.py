"""Output helpers shared by the ``seglog`` commands: aligned tables, JSON for scripts,
and progress bars on a terminal.

Everything a command prints as its result goes to the ``out`` stream it is given
(stdout); progress and diagnostics go to stderr, so ``seglog ... --json | jq`` always
reads clean JSON. A progress bar is drawn only when stderr is a terminal (never in a
pipe, a log file or a test), with the standard library only.

>>> import io; buf = io.StringIO()
>>> write_table(buf, ["TOPIC", "PARTITIONS"], [["events", 3]]); print(buf.getvalue(), end="")
TOPIC   PARTITIONS
events  3
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TextIO, TypeVar

T = TypeVar("T")


def write_json(out: TextIO, value: Any) -> None:
    """One JSON document on one line (JSON lines when called repeatedly)."""
    out.write(json.dumps(value, separators=(",", ":"), ensure_ascii=False) + "\n")


def write_table(out: TextIO, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Columns padded to their widest cell, two spaces apart (like kafka-consumer-groups)."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r]
                                           for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                  + "\n")


class Progress:
    """A one-line progress bar on stderr, redrawn at most ten times a second.

    Inactive (draws nothing) unless ``stream`` is a terminal. Not thread-safe: one
    command's main thread owns it. ``total`` may be None when unknown (a counter only).
    Use as a context manager so the line is cleared however the work ends.
    """

    _WIDTH = 30
    _INTERVAL_S = 0.1

    def __init__(self, label: str, total: int | None = None, *, unit: str = "",
                 stream: TextIO | None = None, hide_if_tty: TextIO | None = None) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        # hide_if_tty: the command's own output; when it streams to the same terminal
        # line by line, a bar would be torn apart by it
        self.active = _isatty(self.stream) and not (hide_if_tty is not None
                                                    and _isatty(hide_if_tty))
        self._last_draw = 0.0
        self._drawn = False

    def advance(self, n: int = 1, *, label: str | None = None) -> None:
        self.done += n
        if label is not None:
            self.label = label
        if not self.active:
            return
        # Wall time only paces the redraws; it never decides anything the command does.
        now = time.monotonic()
        if now - self._last_draw >= self._INTERVAL_S or (
                self.total is not None and self.done >= self.total):
            self._last_draw = now
            self._draw()

    def _draw(self) -> None:
        if self.total:
            frac = min(self.done / self.total, 1.0)
            filled = int(frac * self._WIDTH)
            bar = "#" * filled + "." * (self._WIDTH - filled)
            text = f"{self.label} [{bar}] {frac:4.0%} {self.done}/{self.total}{self.unit}"
        else:
            text = f"{self.label} {self.done}{self.unit}"
        self.stream.write("\r\x1b[K" + text)
        self.stream.flush()
        self._drawn = True

    def clear(self) -> None:
        """Erase the bar (before the command prints a line); the next advance redraws."""
        self.close()
        self._last_draw = 0.0

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def with_progress(items: Sequence[T], label: str, *, stream: TextIO | None = None
                  ) -> Iterator[T]:
    """Yield ``items``, drawing a bar of how many were done (on a terminal only)."""
    with Progress(label, len(items), stream=stream) as bar:
        for item in items:
            yield item
            bar.advance()
