"""``probe_store``: whether an object store keeps the conditional-write promises seglog's
bucket commits stand on, checked on a scratch prefix of a log dir's URI
(``_seglog/probe-<random>/``) and cleaned up afterwards, whatever happened.

A bucket log dir makes each commit visible by creating ``_seglog/log/<version>.json``
with ``If-None-Match: *``; of several writers racing for a version exactly one may be
told it succeeded. Stores that claim S3 compatibility differ here: some ignore the header
(every create "succeeds", the later replacing the earlier), some check it without making
the check and the write one step (two winners under load). Either forks the log: a writer
is told its append landed and the log says it did not. The checks:

1. a create of an existing key is refused and leaves the object as it was;
2. of ``writers`` threads racing creates of one new key, exactly one is told it won, and
   the object holds its bytes (``rounds`` times, a fresh key each);
3. a PUT with ``If-Match`` of a stale ETag is refused (one with the current ETag is not);
4. of ``writers`` threads racing ``If-Match`` PUTs with one ETag, exactly one wins.

A request that fails outright (access denied, unreachable) raises, as everywhere.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import KafkaStorageError
from .object_storage import ObjectStorage

logger = logging.getLogger(__name__)

PROBE_DIR = "_seglog"
DEFAULT_WRITERS = 8
DEFAULT_ROUNDS = 10


@dataclass(frozen=True, slots=True)
class ProbeCheck:
    """One check: its name, whether the store passed it, and what was seen."""

    name: str
    passed: bool
    detail: str


@dataclass(slots=True)
class ProbeResult:
    """Every check made, the scratch prefix, and whether it was removed again."""

    uri: str
    prefix: str
    checks: list[ProbeCheck] = field(default_factory=list)
    cleaned_up: bool = False
    leftover: list[str] = field(default_factory=list)

    @property
    def safe(self) -> bool:
        """Whether seglog can commit safely on this store: every check passed."""
        return bool(self.checks) and all(c.passed for c in self.checks)


def probe_store(
    storage: ObjectStorage, *, writers: int = DEFAULT_WRITERS, rounds: int = DEFAULT_ROUNDS
) -> ProbeResult:
    """Runs the checks of the module docstring on a scratch prefix of ``storage`` and
    deletes what they wrote (also when a request fails; what could not be deleted is
    listed in ``leftover``)."""
    if writers < 2 or rounds < 1:
        raise ValueError(
            f"probe_store needs writers >= 2 and rounds >= 1, got {writers} and {rounds}"
        )
    prefix = f"{PROBE_DIR}/probe-{uuid.uuid4().hex[:12]}"
    result = ProbeResult(storage.uri, prefix + "/")
    try:
        result.checks.append(_create_existing(storage, prefix))
        result.checks.append(_create_race(storage, prefix, writers, rounds))
        result.checks.append(_stale_if_match(storage, prefix))
        result.checks.append(_if_match_race(storage, prefix, writers, rounds))
    finally:
        _clean_up(storage, prefix, result)
    return result


def _create_existing(storage: ObjectStorage, prefix: str) -> ProbeCheck:
    name = "create on an existing key"
    key = f"{prefix}/existing"
    if not storage.create(key, b"first"):
        return ProbeCheck(name, False, "the create of a new key was refused")
    if storage.create(key, b"second"):
        found = storage.read(key)
        what = "replaced the object" if found == b"second" else "left the object"
        return ProbeCheck(name, False, f"answered success (If-None-Match: * ignored) and {what}")
    if storage.read(key) != b"first":
        return ProbeCheck(name, False, "refused, yet the object changed")
    return ProbeCheck(name, True, "refused; the object is unchanged")


def race(writers: int, put: Callable[[int], bool]) -> list[int]:
    """``put(i)`` in ``writers`` threads released together; the ``i`` told they won (the
    probe's, and the suite's conditional-write tests'). A thread's exception is raised."""
    barrier = threading.Barrier(writers)
    won = [False] * writers
    failures: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            barrier.wait()
            won[i] = put(i)
        except BaseException as e:  # re-raised below in the caller's thread
            failures.append(e)

    threads = [
        threading.Thread(target=writer, args=(i,), name=f"seglog-probe-{i}") for i in range(writers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    return [i for i, w in enumerate(won) if w]


def _body(round_: int, i: int) -> bytes:
    # Distinct and sizeable: uploads overlap, and the object shows whose bytes it holds.
    tag = f"round-{round_}-writer-{i};".encode()
    return tag * (65536 // len(tag))


def _create(storage: ObjectStorage, key: str, round_: int, i: int) -> bool:
    return storage.create(key, _body(round_, i))


def _replace(storage: ObjectStorage, key: str, round_: int, etag: str, i: int) -> bool:
    return storage.replace_if_match(key, _body(round_, i), etag)


def _one_winner(storage: ObjectStorage, key: str, round_: int, winners: list[int]) -> str | None:
    """What is wrong with a round's outcome, or None."""
    if len(winners) != 1:
        return (
            f"round {round_ + 1}: {len(winners)} writers were told they won "
            f"({', '.join(map(str, winners)) or 'none'})"
        )
    if storage.read(key) != _body(round_, winners[0]):
        return f"round {round_ + 1}: the object does not hold the winner's bytes"
    return None


def _create_race(storage: ObjectStorage, prefix: str, writers: int, rounds: int) -> ProbeCheck:
    name = f"{writers} concurrent creates of one key"
    for r in range(rounds):
        key = f"{prefix}/race-{r:04d}"
        winners = race(writers, functools.partial(_create, storage, key, r))
        wrong = _one_winner(storage, key, r, winners)
        if wrong:
            return ProbeCheck(name, False, wrong)
    return ProbeCheck(name, True, f"one winner in each of {rounds} rounds")


def _stale_if_match(storage: ObjectStorage, prefix: str) -> ProbeCheck:
    name = "if-match put with a stale ETag"
    key = f"{prefix}/if-match"
    storage.write_atomic(key, b"one")
    stale = storage.etag(key)
    if not stale:
        return ProbeCheck(name, False, "the store gives no ETag")
    if not storage.replace_if_match(key, b"two", stale):
        return ProbeCheck(name, False, "a put with the current ETag was refused")
    if storage.replace_if_match(key, b"three", stale):
        return ProbeCheck(
            name, False, "a put with a stale ETag answered success (If-Match ignored)"
        )
    if storage.read(key) != b"two":
        return ProbeCheck(name, False, "refused, yet the object changed")
    return ProbeCheck(name, True, "refused; the current ETag is accepted")


def _if_match_race(storage: ObjectStorage, prefix: str, writers: int, rounds: int) -> ProbeCheck:
    name = f"{writers} concurrent if-match puts of one key"
    key = f"{prefix}/if-match-race"
    storage.write_atomic(key, b"start")
    for r in range(rounds):
        etag = storage.etag(key)
        if not etag:
            return ProbeCheck(name, False, "the store gives no ETag")
        winners = race(writers, functools.partial(_replace, storage, key, r, etag))
        wrong = _one_winner(storage, key, r, winners)
        if wrong:
            return ProbeCheck(name, False, wrong)
    return ProbeCheck(name, True, f"one winner in each of {rounds} rounds")


def _clean_up(storage: ObjectStorage, prefix: str, result: ProbeResult) -> None:
    """Deletes every object under ``prefix``; what remains is listed in the result (and
    logged), never silently left."""
    try:
        for entry in storage.list_tree(prefix):
            storage.delete(f"{prefix}/{entry.name}")
        result.leftover = [f"{prefix}/{e.name}" for e in storage.list_tree(prefix)]
    except KafkaStorageError as e:
        logger.warning(
            "%s: could not remove the probe's objects under %s/: %s", storage.uri, prefix, e
        )
        result.leftover = [f"{prefix}/ (not listable: {e})"]
    result.cleaned_up = not result.leftover
