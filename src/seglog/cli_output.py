"""Output helpers shared by the ``seglog`` commands: aligned tables, JSON for scripts,
and progress bars on a terminal.

Everything a command prints as its result goes to the ``out`` stream it is given
(stdout); progress and diagnostics go to stderr, so ``seglog ... --json | jq`` always
reads clean JSON. A progress bar (tqdm) is drawn only when stderr is a terminal (never
in a pipe, a log file, a test or ``--json`` mode).

>>> import io; buf = io.StringIO()
>>> write_table(buf, ["TOPIC", "PARTITIONS"], [["events", 3]]); print(buf.getvalue(), end="")
TOPIC   PARTITIONS
events  3
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

if TYPE_CHECKING:
    from tqdm import tqdm

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
    """Work done so far, drawn on stderr as a tqdm bar (rate and ETA) on a terminal only.

    ``done`` always counts what ``advance`` was given (tests and callers read it); the bar
    exists only when ``enabled`` (False for ``--json``) and ``stream`` is a terminal, and
    ``hide_if_tty`` (the command's own output), when given, is not one: output streamed
    line by line to the same terminal would tear the bar apart. ``in_bytes``: ``total``
    and the steps are bytes, shown as kB/MB and B/s. tqdm is imported only when a bar is
    drawn, so a command's start-up never pays for it. Not thread-safe: one command's main
    thread owns it. Use as a context manager so the line is cleared however the work ends.
    """

    def __init__(self, label: str, total: int | None = None, *, in_bytes: bool = False,
                 unit: str = "it", stream: TextIO | None = None,
                 hide_if_tty: TextIO | None = None, enabled: bool = True) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.in_bytes = in_bytes
        self.unit = "B" if in_bytes else unit
        self.stream = stream if stream is not None else sys.stderr
        self.active = enabled and _isatty(self.stream) and not (
            hide_if_tty is not None and _isatty(hide_if_tty))
        self._bar: tqdm[Any] | None = None

    def _drawn(self) -> tqdm[Any]:
        if self._bar is None:
            from tqdm import tqdm as bar

            self._bar = bar(total=self.total, desc=self.label, unit=self.unit,
                            unit_scale=self.in_bytes, unit_divisor=1024 if self.in_bytes
                            else 1000, file=self.stream, leave=False, mininterval=0.1,
                            dynamic_ncols=True)
        return self._bar

    def set_total(self, total: int) -> None:
        """The amount of work, when known only once it started (a bucket's state)."""
        self.total = total
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()

    def advance(self, n: int = 1, *, label: str | None = None) -> None:
        self.done += n
        if label is not None:
            self.label = label
        if not self.active:
            return
        bar = self._drawn()
        if label is not None:
            bar.set_description_str(label, refresh=False)
        if bar.total != self.total:
            bar.total = self.total
        bar.update(n)

    def on_bytes(self, n: int, total: int) -> None:
        """The callback the engine's long walks take (``progress(n, total)``: n more
        bytes of ``total`` done)."""
        if self.total != total:
            self.set_total(total)
        self.advance(n)

    def clear(self) -> None:
        """Erase the bar before the command prints a line; the next advance redraws."""
        if self._bar is not None:
            self._bar.clear()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

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
