"""What a caller of the commit loop hands the engine: ``Change`` (the body of the next
commit) and ``Attempt`` (the caller's side of ``CommitLog.commit_steps``, a loop the
caller drives, so the engine never calls back into the caller's module)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .bucket_state import BucketState, PartitionChange, TopicSpec, index_of


@dataclass(frozen=True, slots=True)
class Change:
    """What ``build`` returns: the body of the next commit."""

    topics: Mapping[str, TopicSpec | None] = field(default_factory=dict)
    partitions: Mapping[str, PartitionChange] = field(default_factory=dict)
    sinks: Mapping[str, Any] = field(default_factory=dict)
    topic_logs: Mapping[str, str | None] = field(default_factory=dict)
    """Catalog commits only (``bucket_logs``): names given to (or taken from) topic logs."""
    at_end: bool = False
    """An append (only ``partitions``' adds) valid at whatever log end the fold finds:
    after a lost race it is created blind as the next version, without reading the
    winner's commit first (``CommitLog._create_at_end``)."""


class _Attempts(threading.local):
    """The calling thread's last ``commit``: its values before that thread's first."""

    count = 0  # creates tried
    shifts: Mapping[str, int] = {}  # how far the fold moved a blind append, per key
    blind = False  # whether the last attempt was a blind chain


class Attempt:
    """What the caller of a commit loop (``CommitLog.commit_steps``,
    ``BucketLogs.commit_steps``) hands back for the state it was given, and what the loop
    hands back at its end. The caller drives the loop itself, so the engine never calls
    back into the caller's module::

        attempt = Attempt()
        for state in log.commit_steps("append", attempt):
            with attempt:
                attempt.change = build(state)
        new_state = attempt.result

    ``with attempt`` records an ``Exception`` the build raised instead of the change; the
    loop, resumed, applies its rule to it (refresh and yield a fresh state, or raise it
    to the caller). Nothing else belongs in the loop's body."""

    __slots__ = ("change", "error", "result")

    def __init__(self) -> None:
        self.change: Change | None = None
        self.error: Exception | None = None
        self.result: BucketState | None = None
        """The loop's outcome once it ended: the new state, or None (nothing to do)."""

    def __enter__(self) -> Attempt:
        self.change = None
        self.error = None
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: object
    ) -> bool:
        if isinstance(error, Exception):
            self.error = error
            return True  # handed to the loop, which raises it or builds again
        return False

    def outcome(self) -> Change | None:
        """The change built for the last state yielded, or the build's error raised."""
        error, self.error = self.error, None
        if error is not None:
            raise error
        change, self.change = self.change, None
        return change


def placed_shifts(change: Change, state: BucketState) -> dict[str, int] | None:
    """Per partition, how far above ``change``'s offsets the fold put its first entry in
    ``state`` (a blind append's, ``Change.at_end``); None when it is not there (folded
    as nothing)."""
    shifts: dict[str, int] = {}
    for key, pc in change.partitions.items():
        first = min(pc.add, key=lambda e: e.base_offset)
        ps = state.partitions.get(key)
        i = None if ps is None else index_of(ps.segments, first.key)
        if ps is None or i is None:
            return None
        shifts[key] = ps.segments[i].base_offset - first.base_offset
    return shifts
