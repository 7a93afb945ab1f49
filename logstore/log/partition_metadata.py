"""``partition.metadata``: a partition directory's topic id (Kafka's KIP-516).

Every topic gets a random id at creation; each of its partition directories holds it,
so a topic deleted and re-created under the same name is told apart from the old one
by a reader that cached the old one (a Spark worker's shared reader). Byte layout,
exactly Kafka's (``PartitionMetadataFileFormatter``; no trailing newline)::

    version: 0
    topic_id: <22 characters: the UUID's 16 bytes in base64url, no padding>

Crash policy: written once, atomically (``<file>.tmp``, fsync, rename, fsync of the
directory), inside the staging directory a new partition is prepared in, so a partition
directory never exists without it (when it was created by this seglog). It moves with
its directory (a rename for deletion keeps it) and is never rewritten.

Directories without the file (an older seglog, Kafka before 2.8) have no topic id: every
check that compares ids skips them. A file that exists but does not parse is
``CorruptPartitionMetadataError`` naming it, never "no id".

Thread-safety: pure functions over the filesystem.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from pathlib import Path

from ..errors import CorruptPartitionMetadataError
from ..storage.checkpoint_file import write_atomically
from ..storage.file_names import PARTITION_METADATA_FILE
from ..storage.storage import read_small_file

VERSION = 0
_LINE = re.compile(r"^([a-z_]+):\s+(\S+)\s*$")  # Kafka splits on ":\s+"
_RESERVED = frozenset({bytes(16), bytes(15) + b"\x01"})
"""Kafka's ZERO_UUID and METADATA_TOPIC_ID: never a topic's id."""


def new_topic_id() -> str:
    """A fresh topic id as Kafka makes one (``Uuid.randomUuid``: a random UUID, never a
    reserved one, never one whose text starts with "-", which a command line would take
    for an option)."""
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
        if raw not in _RESERVED and not text.startswith("-"):
            return text


def partition_metadata_path(partition_dir: Path) -> Path:
    return Path(partition_dir) / PARTITION_METADATA_FILE


def format_partition_metadata(topic_id: str) -> bytes:
    """The file's bytes for ``topic_id`` (Kafka's exactly)."""
    return f"version: {VERSION}\ntopic_id: {topic_id}".encode("ascii")


def write_partition_metadata(partition_dir: Path, topic_id: str) -> None:
    """Write ``topic_id`` into ``partition_dir`` atomically (see the crash policy)."""
    write_atomically(partition_metadata_path(partition_dir),
                     format_partition_metadata(topic_id))


def read_topic_id(partition_dir: Path) -> str | None:
    """The topic id stored in ``partition_dir``; None when it has no
    ``partition.metadata``. Raises CorruptPartitionMetadataError naming the file when it
    does not parse (wrong version, missing line, an id that is not 16 bytes of
    base64url), KafkaStorageError when it cannot be read."""
    path = partition_metadata_path(partition_dir)
    raw = read_small_file(path, "")
    return None if raw is None else parse_partition_metadata(raw, str(path))


def parse_partition_metadata(raw: bytes, where: str) -> str:
    """The topic id in the bytes of a ``partition.metadata`` file read from ``where``."""
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise CorruptPartitionMetadataError(f"{where} is not UTF-8 text") from None
    fields: dict[str, str] = {}
    for i, line in enumerate(lines, start=1):
        m = _LINE.match(line)
        if m is None or m.group(1) in fields:
            raise CorruptPartitionMetadataError(
                f"{where}, line {i}: expected 'version: 0' then 'topic_id: <id>', got "
                f"{line!r}")
        fields[m.group(1)] = m.group(2)
    if list(fields) != ["version", "topic_id"]:
        raise CorruptPartitionMetadataError(
            f"{where}: expected the lines 'version: 0' and 'topic_id: <id>', got "
            f"{sorted(fields)}")
    if fields["version"] != str(VERSION):
        raise CorruptPartitionMetadataError(
            f"{where}: unsupported version {fields['version']!r} (this seglog reads "
            f"version {VERSION})")
    topic_id = fields["topic_id"]
    if not valid_topic_id(topic_id):
        raise CorruptPartitionMetadataError(
            f"{where}: topic_id {topic_id!r} is not a topic id (16 bytes in base64url "
            "without padding)")
    return topic_id


def topic_ids_differ(topic: str, ids: dict[str, list[int]]) -> str:
    """Why partitions of ``topic`` holding ``ids`` (id -> its partitions, more than one
    id) cannot be read as one topic."""
    found = "; ".join(f"{tid} in partition(s) {', '.join(map(str, ns))}"
                      for tid, ns in sorted(ids.items()))
    return (f"the partitions of topic {topic!r} hold different topic ids ({found}): a "
            "partition directory of another topic was moved in, or a partition.metadata "
            "was damaged or edited")


def valid_topic_id(text: object) -> bool:
    """Whether ``text`` is a topic id as Kafka writes one (22 characters of base64url
    decoding to 16 bytes, not a reserved id)."""
    if not isinstance(text, str) or len(text) != 22:
        return False
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError):
        return False
    if len(raw) != 16 or raw in _RESERVED:
        return False
    # The re-encoding must match: the last character carries 4 padding bits, which must
    # be zero (Kafka's decoder is strict about its own output only, but a value that does
    # not round-trip is no id Kafka wrote).
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=") == text
