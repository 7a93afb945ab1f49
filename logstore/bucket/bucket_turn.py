"""Fairness between the writers of one bucket log dir: ``_seglog/turn``.

Optimistic commits alone let a writer that commits in a tight loop (an appender) starve
any other: each time the other has caught up with the log, the loop has committed the
next version already. A rebase, however cheap, is one round trip behind. So a writer that
lost ``TURN_AFTER_LOSSES`` races in one commit asks for the turn: it PUTs
``_seglog/turn`` (``{"writer": <id>, "token": <unique>}``), waits ``REQUEST_WAIT_MS``
(every busy writer looks within ``CHECK_EVERY_MS``), and commits; then it deletes the
marker if it is still its own.

A writer committing in a loop (``BUSY_STREAK`` commits in a row, each started within
``BUSY_GAP_MS`` of the end of the one before) looks at the marker before a commit, at
most once per ``CHECK_EVERY_MS`` (one GET, normally answered "not found"); a writer that
commits now and then never looks, and costs nothing more (it starves nobody). The look
runs alongside the commit's own work (``Look``: the upload), and is waited for just
before the create, so it costs no round trip (``REQUEST_WAIT_MS`` covers the upload it
overlaps). Another writer's marker it has not given way to yet makes it wait until the
marker is gone, at most ``MAX_YIELD_MS``. Each marker (token) is given way to once per
writer, so a marker left by a waiter that died costs every other writer one wait of at
most ``MAX_YIELD_MS``, never more. Only a hint: the marker never decides what commits
(the create-if-absent of the commit does), and a request that fails is logged and the
commit goes on without it.

Thread-safety: thread-safe (``_lock`` guards the times of the last look and commit, the
streak and the token given way to; the waits and the looks' GETs run outside it).
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable

from ..errors import KafkaStorageError
from ..storage.storage import Storage
from ..util.clock import Clock
from .bucket_state import META_DIR

logger = logging.getLogger(__name__)

TURN_KEY = f"{META_DIR}/turn"
TURN_AFTER_LOSSES = 2
"""Lost races in one commit after which a writer asks for the turn (an append, whose lost
races cost one round trip each: ``bucket_commit_log.TURN_AFTER_CHAINS`` blind chains)."""
BUSY_STREAK = 4
"""Commits in a row, each soon after the one before, that make a writer busy."""
BUSY_GAP_MS = 50
"""The longest pause between two commits of a busy writer."""
CHECK_EVERY_MS = 200
"""How often a committing writer looks for another writer's request (a GET)."""
REQUEST_WAIT_MS = 350
"""How long a requester waits before it commits: every writer committing in a loop has
looked (``CHECK_EVERY_MS``, plus the commit it was in the middle of) and is waiting."""
MAX_YIELD_MS = 1_000
"""The longest a writer waits for one request to be withdrawn."""
POLL_MS = 20
"""How often a waiting writer looks whether the request is gone."""


class Look:
    """One GET of the marker running alongside a commit's own requests; ``token`` waits
    for its answer (the token of another writer's standing request, or None)."""

    def __init__(self, read: Callable[[], str | None]) -> None:
        self._read = read
        self._token: str | None = None
        self._thread = threading.Thread(target=self._run, name="seglog-turn-look", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._token = self._read()

    def token(self) -> str | None:
        self._thread.join()
        return self._token


class Turns:
    """Requests for the turn and giving way to them; see the module docstring."""

    def __init__(
        self,
        storage: Storage,
        writer_id: str,
        clock: Clock,
        sleep: Callable[[float], None],
        key: str = TURN_KEY,
    ) -> None:
        self.storage = storage
        self.key = key  # the marker of the commit log these turns are of
        self.writer_id = writer_id
        self.clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()  # guards _checked_ms, _given_way
        # The first look is one interval after open: a short-lived writer (a CLI call)
        # pays nothing.
        self._checked_ms = clock.monotonic_ms()
        self._given_way: str | None = None  # the token of the last request given way to
        self._ended_ms: int | None = None  # when this writer's last commit ended
        self._streak = 0  # commits in a row, each soon after the one before
        self.waits = 0
        """How many requests this writer gave way to (for tests and reports)."""

    def request(self) -> str | None:
        """Ask the other writers to let this one commit; the token to ``withdraw``, or
        None if the marker could not be written (the commit goes on regardless)."""
        token = uuid.uuid4().hex
        body = json.dumps({"writer": self.writer_id, "token": token}).encode()
        try:
            self.storage.write_atomic(self.key, body)
        except KafkaStorageError as e:
            logger.warning(
                "%s: could not ask the other writers for the turn (%s); committing without it",
                self.storage.uri,
                e,
            )
            return None
        logger.info(
            "%s: writer %s lost %d races in a row; asked for the turn",
            self.storage.uri,
            self.writer_id,
            TURN_AFTER_LOSSES,
        )
        self._sleep(REQUEST_WAIT_MS / 1000)
        return token

    def withdraw(self, token: str) -> None:
        """Delete the request of ``token`` if the marker is still it (another
        requester's newer one stays)."""
        try:
            if self._token() == token:
                self.storage.delete(self.key)
        except KafkaStorageError as e:
            # Others give way to it once each, at most MAX_YIELD_MS: harmless.
            logger.warning(
                "%s: could not withdraw the request for the turn (%s)", self.storage.uri, e
            )

    def give_way(self) -> None:
        """``wait_for(begin())`` at once, for a caller with nothing to overlap it with."""
        self.wait_for(self.begin())

    def begin(self) -> Look | None:
        """At the start of a commit of a busy writer: a look at the marker, running; one
        per ``CHECK_EVERY_MS`` at most, None for a writer that is not busy."""
        now = self.clock.monotonic_ms()
        with self._lock:
            soon = self._ended_ms is not None and now - self._ended_ms <= BUSY_GAP_MS
            self._streak = self._streak + 1 if soon else 0
            if self._streak < BUSY_STREAK or now - self._checked_ms < CHECK_EVERY_MS:
                return None
            self._checked_ms = now
        return Look(self._foreign_token)

    def wait_for(self, look: Look | None) -> bool:
        """Just before the create: wait while the request ``look`` found (another
        writer's, not given way to yet) stands, at most ``MAX_YIELD_MS``; whether it
        waited."""
        if look is None:
            return False
        token = look.token()
        now = self.clock.monotonic_ms()
        with self._lock:
            if token is None or token == self._given_way:
                return False
            self._given_way = token
            self.waits += 1
        logger.info(
            "%s: another writer asked for the turn; waiting for its commit", self.storage.uri
        )
        deadline = now + MAX_YIELD_MS
        while self.clock.monotonic_ms() < deadline:
            self._sleep(POLL_MS / 1000)
            if self._foreign_token() != token:
                break
        with self._lock:
            self._checked_ms = self.clock.monotonic_ms()
        return True

    def ended(self) -> None:
        """A commit of this writer ended (won, lost or failed)."""
        with self._lock:
            self._ended_ms = self.clock.monotonic_ms()

    def _foreign_token(self) -> str | None:
        """The token of the standing request of another writer, or None."""
        try:
            raw = self.storage.read(self.key)
        except FileNotFoundError:
            return None
        except KafkaStorageError as e:
            logger.debug("%s: could not read %s: %s", self.storage.uri, self.key, e)
            return None
        writer, token = _parse(raw)
        return token if writer != self.writer_id else None

    def _token(self) -> str | None:
        try:
            return _parse(self.storage.read(self.key))[1]
        except FileNotFoundError:
            return None


def _parse(raw: bytes) -> tuple[str | None, str | None]:
    """(writer, token) of a marker; (None, None) for a damaged one (only a hint: a
    damaged marker is ignored, and the next request overwrites it)."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None, None
    if not isinstance(doc, dict):
        return None, None
    writer, token = doc.get("writer"), doc.get("token")
    return (writer if isinstance(writer, str) else None, token if isinstance(token, str) else None)
