"""``seglog repair URI``: a way back from a commit log that no longer folds, and evidence
of a newest commit that was deleted.

**Diagnose** (read-only, ``diagnose``): fold the log as an open does, from the newest
snapshot that decodes (or from version 0), and stop at the first commit that is missing,
cannot be parsed or does not follow its state (``BucketState.apply``'s checks). That
version is the **cut**: the log would end just before it. What ending it there loses is
listed: the later commits (every listed version from the bad one on), and per partition
the offsets their appends added, per topic the changes they made (as far as they parse).
When every commit folds, the diagnosis still looks for evidence that the newest commits
were deleted (``rollback_evidence``): the hint ``_seglog/last-snapshot`` or a snapshot
naming a version beyond the newest commit (both are written only after their commit).

**Repair** (``repair``, only when told): nothing is deleted that is not copied first.
Under ``_seglog/repaired/<run>/`` it writes ``report.json`` (the diagnosis), copies of
the void commits and of the segment objects only they name, and of the snapshots and
hint ahead of the cut; then it rewrites the hint to the newest snapshot at or before the
cut (or deletes it), deletes the snapshots ahead of the cut, and deletes the void commits
from the newest down, so that a reader listing meanwhile always sees a log that ends at
a bad commit (an error), never a different history. Concurrent writers: none can commit
on top of a commit it cannot fold, so while the bad commit is there nobody builds on it;
a writer that held a state from before the damage and commits meanwhile is found by the
LIST after the deletes, and its commit is moved aside the same way (at most
``ROUNDS`` times, else the repair stops with an error naming the versions). Once the
void commits are gone, the next writer commits the cut's version anew. The collector
never touches ``_seglog/repaired/``; delete it by hand once the data there is judged.

Every commit log of the log dir is diagnosed alike (``diagnose_all``): the catalog and
each topic log under ``_seglog/topics/`` (``bucket_logs``); a repair ends each damaged
log at its own cut, the others are left as they are.

What cannot be detected (docs/troubleshooting.md): a deleted newest commit that left no
snapshot or hint beyond it and whose segments were collected, or a commit replaced by
another valid commit.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..errors import CorruptMetadataError, KafkaStorageError
from ..storage.storage import Storage
from .bucket_segment import object_keys
from .bucket_state import (
    CATALOG,
    META_DIR,
    TOPIC_LOGS_DIR,
    BucketState,
    Commit,
    LogLayout,
    parse_version_name,
    topic_layout,
    version_name,
)

logger = logging.getLogger(__name__)

REPAIRED_DIR = f"{META_DIR}/repaired"
ROUNDS = 3
"""LISTs after the deletes looking for commits made meanwhile, before giving up."""


@dataclass(frozen=True, slots=True)
class LostCommit:
    """A commit beyond the cut: its version, and what it says where it parses."""

    version: int
    operation: str | None
    partitions: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per partition, the offsets ``[first, end)`` its new segments hold."""
    topics: list[str] = field(default_factory=list)
    """The topics it creates, alters or deletes."""


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """What ``diagnose`` found. ``cut``: the version the log would end at (the last good
    one); ``bad``: the first commit that does not follow (None: every commit folds)."""

    uri: str
    state: BucketState
    bad: int | None
    reason: str | None
    lost: tuple[LostCommit, ...]
    ahead: tuple[str, ...]
    """Keys of the hint and snapshots that name versions beyond the cut."""
    evidence: tuple[str, ...]
    """Why the newest commits look deleted (hint/snapshot ahead of the newest commit)."""
    layout: LogLayout = CATALOG
    """Which commit log of the log dir (the catalog, or a topic's own)."""

    @property
    def cut(self) -> int:
        return self.state.version

    @property
    def healthy(self) -> bool:
        return self.bad is None and not self.ahead

    def lost_offsets(self) -> dict[str, tuple[int, int]]:
        """Per partition, the offsets the lost commits would have added."""
        out: dict[str, tuple[int, int]] = {}
        for c in self.lost:
            for key, (lo, hi) in c.partitions.items():
                old = out.get(key)
                out[key] = (min(lo, old[0]), max(hi, old[1])) if old else (lo, hi)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "cut": self.cut,
            "bad_version": self.bad,
            "reason": self.reason,
            "healthy": self.healthy,
            "lost_commits": [
                {
                    "version": c.version,
                    "operation": c.operation,
                    "partitions": {k: list(v) for k, v in c.partitions.items()},
                    "topics": c.topics,
                }
                for c in self.lost
            ],
            "lost_offsets": {k: list(v) for k, v in sorted(self.lost_offsets().items())},
            "ahead": list(self.ahead),
            "evidence": list(self.evidence),
        }


def _listed(storage: Storage, prefix: str) -> list[int]:
    return sorted(
        v for v in (parse_version_name(e.name) for e in storage.list_dir(prefix)) if v is not None
    )


def _hint(storage: Storage, layout: LogLayout) -> int | None:
    try:
        version = json.loads(storage.read(layout.hint_key))["version"]
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return None  # a damaged hint is only a hint: opens probe the snapshots instead
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def _base(
    storage: Storage, layout: LogLayout, commits: list[int], snapshots: list[int]
) -> BucketState:
    """Where an open starts: the newest snapshot that decodes and is followed by the
    listed commits (none missing in between), else the empty state (from version 0)."""
    newest = commits[-1] if commits else -1
    listed = set(commits)
    for version in reversed([s for s in snapshots if s <= newest]):
        if not all(v in listed for v in range(version + 1, newest + 1)):
            continue
        key = layout.snapshot_key(version)
        try:
            return BucketState.decode(storage.read(key), f"{storage.uri}/{key}", version)
        except (FileNotFoundError, CorruptMetadataError) as e:
            logger.info("repair: snapshot %s not usable (%s)", key, e)
    return BucketState()


def _lost_commit(storage: Storage, layout: LogLayout, version: int) -> LostCommit:
    key = layout.commit_key(version)
    try:
        commit = Commit.decode(storage.read(key), f"{storage.uri}/{key}", version)
    except (FileNotFoundError, CorruptMetadataError):
        return LostCommit(version, None)
    parts = {
        k: (min(e.base_offset for e in c.add), max(e.next_offset for e in c.add))
        for k, c in commit.partitions.items()
        if c.add
    }
    return LostCommit(version, commit.operation, parts, sorted(commit.topics))


def diagnose_all(storage: Storage) -> list[Diagnosis]:
    """``diagnose`` of every commit log of the log dir: the catalog's first, then each
    topic log listed under ``_seglog/topics/``. Read-only."""
    layouts = [CATALOG] + [
        topic_layout(e.name) for e in storage.list_dir(TOPIC_LOGS_DIR) if e.is_dir
    ]
    return [diagnose(storage, layout) for layout in layouts]


def diagnose(storage: Storage, layout: LogLayout = CATALOG) -> Diagnosis:
    """Fold the log as an open does and name the first commit that does not follow; see
    the module docstring. Read-only."""
    commits = _listed(storage, layout.commit_dir)
    snapshots = _listed(storage, layout.snapshot_dir)
    state = _base(storage, layout, commits, snapshots)
    bad: int | None = None
    reason: str | None = None
    for version in (v for v in commits if v > state.version):
        key = layout.commit_key(version)
        where = f"{storage.uri}/{key}"
        if version != state.version + 1:
            bad, reason = (
                state.version + 1,
                (
                    f"{storage.uri}/{layout.commit_key(state.version + 1)}"
                    f" is missing (the log lists {version} next)"
                ),
            )
            break
        try:
            state = state.apply(Commit.decode(storage.read(key), where, version), where)
        except FileNotFoundError:
            bad, reason = version, f"{where} was listed but cannot be read"
            break
        except CorruptMetadataError as e:
            bad, reason = version, str(e)
            break
    lost = tuple(_lost_commit(storage, layout, v) for v in commits if v > state.version)
    newest = commits[-1] if commits else -1
    hint = _hint(storage, layout)
    ahead = [layout.snapshot_key(s) for s in snapshots if s > state.version]
    if hint is not None and hint > state.version:
        ahead.insert(0, layout.hint_key)
    evidence = [
        f"{storage.uri}/{layout.snapshot_key(s)} is of version {s}, beyond the newest "
        f"commit {newest}"
        for s in snapshots
        if s > newest
    ]
    if hint is not None and hint > newest:
        evidence.insert(
            0,
            f"{storage.uri}/{layout.hint_key} names version {hint}, beyond the newest "
            f"commit {newest}",
        )
    uri = storage.uri if layout == CATALOG else f"{storage.uri}/{layout.prefix}"
    return Diagnosis(uri, state, bad, reason, lost, tuple(ahead), tuple(evidence), layout)


def rollback_evidence(
    storage: Storage, state: BucketState, layout: LogLayout = CATALOG
) -> list[str]:
    """Evidence that commits after ``state`` (the newest that folds) were deleted: the
    hint or a snapshot naming a later version (one GET, one LIST). Segment objects beyond
    a partition's log end are judged by ``bucket_check``, which lists them anyway."""
    hint = _hint(storage, layout)
    out = [
        f"{storage.uri}/{layout.snapshot_key(s)} is of version {s}, beyond the newest "
        f"commit {state.version}"
        for s in _listed(storage, layout.snapshot_dir)
        if s > state.version
    ]
    if hint is not None and hint > state.version:
        out.insert(
            0,
            f"{storage.uri}/{layout.hint_key} names version {hint}, beyond the newest "
            f"commit {state.version}",
        )
    return out


def describe(d: Diagnosis) -> list[str]:
    """The diagnosis as lines for people."""
    if d.healthy and d.cut < 0:
        return [f"{d.uri}: no commits here (no log dir, or an empty one); nothing to repair"]
    if d.healthy:
        return [f"{d.uri}: every commit up to version {d.cut} follows its state; nothing to repair"]
    lines = []
    if d.bad is not None:
        lines.append(f"{d.uri}: commit {d.bad} does not follow its state: {d.reason}")
    lines += [f"{d.uri}: evidence of deleted commits: {e}" for e in d.evidence]
    lines.append(f"ending the log at version {d.cut} (the last that folds) loses:")
    if not d.lost:
        lines.append("  no commit")
    for c in d.lost:
        what = c.operation or "unreadable"
        parts = ", ".join(f"{k} offsets [{lo}, {hi})" for k, (lo, hi) in c.partitions.items())
        topics = ", ".join(c.topics)
        lines.append(
            f"  commit {c.version} ({what})"
            + (f": {parts}" if parts else "")
            + (f"; topics {topics}" if topics else "")
        )
    for key, (lo, hi) in sorted(d.lost_offsets().items()):
        lines.append(f"  partition {key}: offsets [{lo}, {hi}) ({hi - lo} records)")
    if d.ahead:
        lines.append(f"  set aside, not to resurrect them: {', '.join(d.ahead)}")
    return lines


def repair(storage: Storage, diagnosis: Diagnosis) -> str:
    """End the log at ``diagnosis.cut``, copying everything it takes out of the log to
    ``_seglog/repaired/<run>/`` first; returns that prefix. See the module docstring."""
    run = f"{REPAIRED_DIR}/{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"
    storage.write_atomic(f"{run}/report.json", json.dumps(diagnosis.to_json(), indent=2).encode())
    cut = diagnosis.cut
    layout = diagnosis.layout
    _set_aside_metadata(storage, layout, run, cut)
    for round_ in range(ROUNDS):
        void = [v for v in _listed(storage, layout.commit_dir) if v > cut]
        if not void:
            logger.warning(
                "%s: repaired: the log ends at version %d; what was taken out is under %s/%s",
                storage.uri,
                cut,
                storage.uri,
                run,
            )
            return run
        if round_:
            # A writer holding a state from before the damage committed meanwhile: its
            # commit was acknowledged to it, and is only in the copies now.
            logger.warning(
                "%s: commits %s were made during the repair on a state past "
                "the cut; moved aside too (copies under %s/%s)",
                storage.uri,
                void,
                storage.uri,
                run,
            )
        _set_aside_commits(storage, layout, run, diagnosis.state, void)
    raise CorruptMetadataError(
        f"{storage.uri}: commits after version {cut} keep appearing while repairing "
        f"(a writer is still committing on a state it cannot have read from this log); "
        f"stop the writers and run seglog repair again (what was taken out so far is under "
        f"{storage.uri}/{run})"
    )


def _copy(storage: Storage, key: str, run: str) -> bool:
    try:
        data = storage.read(key)
    except FileNotFoundError:
        return False
    storage.write_atomic(f"{run}/{key}", data)
    return True


def _set_aside_metadata(storage: Storage, layout: LogLayout, run: str, cut: int) -> None:
    """The hint and snapshots ahead of ``cut``: copied, then the hint rewritten (to the
    newest snapshot at or before the cut) or deleted, then the snapshots deleted; an open
    never starts beyond the cut again."""
    snapshots = _listed(storage, layout.snapshot_dir)
    hint = _hint(storage, layout)
    if hint is not None and hint > cut:
        _copy(storage, layout.hint_key, run)
        kept = [s for s in snapshots if s <= cut]
        if kept:
            storage.write_atomic(layout.hint_key, json.dumps({"version": kept[-1]}).encode())
        else:
            storage.delete(layout.hint_key)
    for s in (s for s in snapshots if s > cut):
        if _copy(storage, layout.snapshot_key(s), run):
            storage.delete(layout.snapshot_key(s))


def _set_aside_commits(
    storage: Storage, layout: LogLayout, run: str, state: BucketState, void: list[int]
) -> None:
    """Copy the ``void`` commits and the segment objects only they name, then delete the
    commits, newest first."""
    kept = {k for ps in state.partitions.values() for s in ps.segments for k in object_keys(s)}
    copied: list[str] = []
    for version in void:
        key = layout.commit_key(version)
        try:
            data = storage.read(key)
        except FileNotFoundError:
            # listed as void but gone since (a collector, a repair run before): nothing
            # to copy aside, and nothing of it can be deleted by this run
            logger.info("%s/%s: gone before it could be copied aside", storage.uri, key)
            continue
        storage.write_atomic(f"{run}/{key}", data)
        try:
            commit = Commit.decode(data, f"{storage.uri}/{key}", version)
        except CorruptMetadataError:
            continue  # unreadable: no segment names to keep
        for change in commit.partitions.values():
            for entry in change.add:
                for obj in object_keys(entry):
                    if obj not in kept:
                        try:
                            if _copy(storage, obj, run):
                                copied.append(obj)
                        except KafkaStorageError as e:
                            raise KafkaStorageError(
                                f"{storage.uri}/{obj}: could not copy it aside ({e}); no "
                                f"commit was deleted"
                            ) from e
    for version in reversed(void):
        storage.delete(layout.commit_key(version))
        logger.info("%s: moved commit %s aside to %s", storage.uri, version_name(version), run)
    for obj in copied:
        # Copied above; left in place, they would look like the segments of a deleted
        # commit to seglog check (and a reader of the copy finds every byte there).
        storage.delete(obj)
