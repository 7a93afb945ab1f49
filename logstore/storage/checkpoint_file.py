"""Kafka's ``*-checkpoint`` text files, read and written through one class.

Byte layout (UTF-8 text, ``\\n`` line ends)::

    0                      version (always 0)
    <n>                    number of entries
    <entry line> x n       e.g. "my-topic 3 1234" (topic, partition, offset)

The line format is pluggable (``CheckpointFormat``): ``OFFSETS`` is Kafka's
``topic partition offset``; other checkpoint files (``leader-epoch-checkpoint``...) plug in
their own.

Crash policy: a write goes to ``<file>.tmp``, which is fsynced, renamed over the file with
``os.replace`` and followed by an fsync of the directory, so after a crash the file holds
either the old or the new content, never a mix. A reader checks the version, the entry
count, every line and the final line end, and raises ``CorruptCheckpointError`` naming
the file and the line. An empty file (zero bytes) of Kafka's offset checkpoints
(``OffsetCheckpointFile``) holds no entries, as Kafka reads it; an empty file of seglog's
own formats is damage.

>>> f = OffsetCheckpointFile(Path(tmp) / "recovery-point-offset-checkpoint")  # doctest: +SKIP
>>> f.write({("t", 0): 42}); f.read()                                       # doctest: +SKIP
{('t', 0): 42}
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from ..errors import CorruptCheckpointError, KafkaStorageError
from .storage import LOCAL, Storage

logger = logging.getLogger(__name__)

CURRENT_VERSION = 0
TMP_SUFFIX = ".tmp"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CheckpointFormat(Generic[T]):
    """How one entry becomes one line and back. ``parse`` raises ValueError on a bad line."""

    format: Callable[[T], str]
    parse: Callable[[str], T]


def _format_offset(entry: tuple[tuple[str, int], int]) -> str:
    (topic, partition), offset = entry
    return f"{topic} {partition} {offset}"


def _parse_offset(line: str) -> tuple[tuple[str, int], int]:
    parts = line.split(" ")
    if len(parts) != 3 or not parts[0]:
        raise ValueError("expected 'topic partition offset'")
    topic, partition, offset = parts[0], int(parts[1]), int(parts[2])
    if partition < 0 or offset < 0:
        raise ValueError("negative partition or offset")
    return (topic, partition), offset


OFFSETS: CheckpointFormat[tuple[tuple[str, int], int]] = CheckpointFormat(
    _format_offset, _parse_offset)
"""Kafka's ``topic partition offset`` lines (recovery point, log start offset, high watermark)."""


def write_atomically(path: Path, data: bytes, storage: Storage = LOCAL) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content
    (``Storage.write_atomic``: on a filesystem ``<path>.tmp`` is written and fsynced,
    renamed over ``path``, then the directory is fsynced). Raises KafkaStorageError naming
    the file on an I/O failure."""
    storage.write_atomic(path, data)


class CheckpointFile(Generic[T]):
    """One checkpoint file with a given line format. Thread-safe for concurrent readers;
    writers must be serialized by the caller (one writer per log dir holds its lock)."""

    def __init__(self, path: Path | str, fmt: CheckpointFormat[T],
                 version: int = CURRENT_VERSION, *, storage: Storage = LOCAL,
                 empty_is_no_entries: bool = False) -> None:
        self.path = Path(path)
        self.format = fmt
        self.version = version
        self._storage = storage
        # Kafka's own checkpoint files (created empty by a broker) read an empty file as
        # no entries; seglog's own files are never empty, so there it is damage.
        self._empty_is_no_entries = empty_is_no_entries

    def write(self, entries: Iterable[T]) -> None:
        """Atomically replace the file with ``entries`` (see the module's crash policy)."""
        lines = [self.format.format(e) for e in entries]
        text = f"{self.version}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
        write_atomically(self.path, text.encode("utf-8"), self._storage)

    def read(self) -> list[T]:
        """Every entry; ``[]`` if the file does not exist, or is empty where
        ``empty_is_no_entries`` (Kafka's rule). Raises CorruptCheckpointError."""
        try:
            raw = self._storage.read(self.path)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise KafkaStorageError(f"cannot read checkpoint file {self.path}: {e}") from e
        if not raw and self._empty_is_no_entries:
            # Kafka's CheckpointFile creates the file empty (a broker's
            # cleaner-offset-checkpoint until the first cleaning, a replication checkpoint
            # before the first write) and reads an empty file as no entries. A file cut
            # anywhere after its first byte is still damage (below).
            return []
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self._corrupt(None, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the last line's terminator
        if not lines:
            raise self._corrupt(1, "empty file, expected the version line")
        if not text.endswith("\n"):
            # Every line is written with its "\n": a file cut inside its last line could
            # otherwise parse ("t 0 1234" cut to "t 0 12") and move an offset back.
            raise self._corrupt(len(lines), f"truncated: the last line {lines[-1]!r} has "
                                "no line end")
        if lines[0].strip() != str(self.version):
            raise self._corrupt(1, f"unrecognized version {lines[0]!r}, expected {self.version}")
        if len(lines) < 2:
            raise self._corrupt(2, "missing the entry count line")
        try:
            count = int(lines[1])
        except ValueError:
            raise self._corrupt(2, f"malformed entry count {lines[1]!r}") from None
        if count < 0:
            raise self._corrupt(2, f"negative entry count {count}")
        if len(lines) - 2 != count:
            raise self._corrupt(
                None, f"expected {count} entries but found {len(lines) - 2} entry lines")
        entries = []
        for i, line in enumerate(lines[2:], start=3):
            try:
                entries.append(self.format.parse(line))
            except ValueError as e:
                raise self._corrupt(i, f"malformed entry {line!r}: {e}") from None
        return entries

    def _corrupt(self, line: int | None, what: str) -> CorruptCheckpointError:
        where = f"{self.path}" if line is None else f"{self.path}, line {line}"
        return CorruptCheckpointError(f"corrupt checkpoint file {where}: {what}")


class OffsetCheckpointFile:
    """A ``topic partition offset`` checkpoint as a dict: the three offset checkpoints of a
    log dir. Same thread-safety and crash policy as ``CheckpointFile``."""

    def __init__(self, path: Path | str) -> None:
        self._file = CheckpointFile(path, OFFSETS, empty_is_no_entries=True)

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Atomically replace the file; entries sorted by topic then partition."""
        self._file.write(sorted(offsets.items()))

    def read(self) -> dict[tuple[str, int], int]:
        """``{(topic, partition): offset}``; ``{}`` if absent. Raises CorruptCheckpointError
        (a partition listed twice is corrupt too)."""
        out: dict[tuple[str, int], int] = {}
        for tp, offset in self._file.read():
            if tp in out:
                raise CorruptCheckpointError(
                    f"corrupt checkpoint file {self.path}: {tp[0]}-{tp[1]} listed twice")
            out[tp] = offset
        return out
