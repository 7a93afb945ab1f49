"""Which objects of a bucket are a log dir's own, and the refusal of nested log dirs.

A bucket is shared: other log dirs, other applications' files, an operator's notes. The
collector (``bucket_collect``) deletes only what it can prove is its log dir's:

- under ``<topic>-<p>/``, a partition prefix that the state or a commit still present
  names (a topic deleted by a commit still in the log keeps its prefix named, so its
  objects are collected), only objects directly under it whose names are the segment
  objects a writer makes: ``<20-digit base offset>-<16 hex id>`` plus ``.log``,
  ``.index`` or ``.timeindex``;
- everything under the log dir's own ``_seglog/staging/`` (the sink's uploads).

Anything else (a top-level prefix no commit names, ``notes.txt`` in a partition prefix,
an object deeper than a partition prefix) is never deleted.

**Nesting.** A log dir inside another's prefix, or holding one, would let one's objects
be mistaken for the other's, and their listings overlap. ``check_nesting`` refuses both
at open: the ``_seglog/`` marker of every enclosing prefix (one LIST each), and of each
top-level prefix of the log dir that is not named like a partition (one LIST each, at
most ``NESTED_CHECK_LIMIT``). A log dir nested deeper, or under a partition-like name,
is found by its own open (the enclosing check sees every ancestor), and the name rule
above keeps the collector off its objects in any case. An enclosing prefix the
credentials may not list (a policy scoped to the log dir's prefix) is skipped.

Thread-safe: functions only.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor

from ..errors import LogDirError, StorageAccessDeniedError
from ..storage.file_names import parse_partition_dir_name
from ..storage.object_storage import ObjectStorage
from ..storage.object_store_config import parse_object_uri
from ..storage.storage import Entry, Storage
from .bucket_state import META_DIR, STAGING_DIR

logger = logging.getLogger(__name__)

__all__ = ["SEGMENT_OBJECT_NAME", "NESTED_CHECK_LIMIT", "owned_objects", "check_nesting"]

SEGMENT_OBJECT_NAME = re.compile(r"\d{20}-[0-9a-f]{16}\.(?:log|index|timeindex)")
"""The name of a segment object directly under a partition prefix (``segment_key``)."""
NESTED_CHECK_LIMIT = 100
"""At most this many top-level prefixes are probed for a nested log dir at open (one LIST
each): the cost of opening a bucket root that holds many other folders stays bounded."""
NESTING_THREADS = 8
"""The nesting probes in flight at once."""


def owned_objects(storage: Storage, partitions: Collection[str]) -> list[tuple[str, Entry]]:
    """The log dir's own data objects, as (key, entry): the segment objects directly
    under each partition prefix of ``partitions`` (``<topic>-<p>`` names its state or
    commits give) that exists, and every object under ``_seglog/staging/``. One listing
    of the top level, then one flat listing per prefix."""
    top = {e.name for e in storage.list_dir("") if e.is_dir}
    out: list[tuple[str, Entry]] = []
    for prefix in sorted(top.intersection(partitions)):
        out += [
            (f"{prefix}/{e.name}", e)
            for e in storage.list_tree(prefix)
            if SEGMENT_OBJECT_NAME.fullmatch(e.name)
        ]
    if META_DIR in top:
        out += [(f"{STAGING_DIR}/{e.name}", e) for e in storage.list_tree(STAGING_DIR)]
    return out


def check_nesting(storage: ObjectStorage) -> None:
    """Refuse a log dir inside another's prefix, or holding one (``LogDirError`` naming
    both URIs); see the module docstring for what is probed and its cost. The probes are
    independent LISTs, made at once: two round trips at most (the top-level prefixes
    are known only from the log dir's own listing), one when it has none."""
    target = parse_object_uri(storage.uri)
    if target.scheme == "memory":
        return  # a memory store is one log dir: its URI's path is not a key prefix
    parts = target.prefix.split("/") if target.prefix else []
    root = f"{target.scheme}://{target.bucket}"
    bucket = ObjectStorage(root, storage.options) if parts else None
    ancestors = ["/".join(parts[:depth]) for depth in range(len(parts))]
    with ThreadPoolExecutor(NESTING_THREADS, thread_name_prefix="seglog-nesting") as pool:
        enclosing = [
            pool.submit(_enclosing_marker, bucket, a, storage.uri)
            for a in ancestors
            if bucket is not None
        ]
        # The log dir's own listing first: a store that cannot be reached is reported
        # under the log dir's URI, not an ancestor's.
        candidates = [
            e.name
            for e in storage.list_dir("")
            if e.is_dir and e.name != META_DIR and parse_partition_dir_name(e.name) is None
        ]
        if len(candidates) > NESTED_CHECK_LIMIT:
            logger.debug(
                "%s: %d top-level prefixes; probing the first %d for a nested log dir",
                storage.uri,
                len(candidates),
                NESTED_CHECK_LIMIT,
            )
        names = candidates[:NESTED_CHECK_LIMIT]
        nested = [pool.submit(storage.list_dir, f"{name}/{META_DIR}") for name in names]
        for depth, found in enumerate(enclosing):
            if found.result():
                ancestor = ancestors[depth]
                outer = f"{root}/{ancestor}" if ancestor else root
                raise LogDirError(_nested_message(storage.uri, outer, parts[depth:]))
        for name, probe in zip(names, nested, strict=True):
            if probe.result():
                raise LogDirError(
                    f"{storage.uri} holds another log dir, {storage.uri}/{name} (its "
                    f"{META_DIR}/ exists): log dirs must not be nested; open each at its "
                    f"own prefix, side by side (e.g. {root}/<name>)"
                )


def _enclosing_marker(bucket: ObjectStorage, ancestor: str, uri: str) -> bool:
    """Whether the prefix ``ancestor`` of the bucket holds a log dir's ``_seglog/``."""
    try:
        return bool(bucket.list_dir(f"{ancestor}/{META_DIR}" if ancestor else META_DIR))
    except StorageAccessDeniedError as e:
        # Credentials scoped to this prefix (an IAM policy's s3:prefix) may not list
        # above it; the collector's rule protects the other log dir anyway.
        logger.info("%s: cannot look for a log dir enclosing it: %s", uri, e)
        return False


def _nested_message(uri: str, outer: str, below: list[str]) -> str:
    if len(below) == 1 and parse_partition_dir_name(below[0]) is not None:
        return (
            f"{uri} is the prefix of partition {below[0]} of the log dir {outer}, not a "
            f"log dir: name the log dir ({outer})"
        )
    return (
        f"{uri} is inside the log dir {outer} (its {META_DIR}/ exists): log dirs must "
        f"not be nested; open each at its own prefix, side by side"
    )
