"""The names of files and directories in a log dir: Kafka's, in one place.

A segment's files are named by its base offset, zero-padded to 20 digits; temporary
states add a suffix after the extension (``00000000000000000000.log.deleted``).

Name length: a file name has at most ``MAX_FILE_NAME_BYTES`` (255) bytes on every common
filesystem. Kafka allows topic names of up to 249 characters so that ``<topic>-<p>`` fits
for partitions up to 99999; every other name seglog derives from a topic (the ``-delete``
rename, the sink's staging files) is cut to fit, keeping a hash of what it cut
(``fitted_name``) or, for the ``-delete`` rename, keeping the unique id as Kafka does.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from pathlib import Path

from ..errors import InvalidTopicError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
MAINTENANCE_CHECKPOINT = "seglog-maintenance-checkpoint"
"""When each maintenance task last ran (``name wall-clock-ms`` lines), so that
short-lived processes run a task only when its interval has passed since any process did."""
PARTITION_METADATA_FILE = "partition.metadata"
"""Kafka's per-partition file holding the topic id (KIP-516): ``partition_metadata``."""
TOPIC_CONFIG_FILE = "seglog-topic.properties"
"""Per-partition copy of the topic's config overrides (Kafka keeps them in the controller)."""
SINK_STATE_DIR = ".seglog-sink"
"""The exactly-once sink's staging files and ledgers (same filesystem as the logs, so a
publish is a rename away; no reader looks inside)."""

META_PROPERTIES_FILE = "meta.properties"
KRAFT_BOOTSTRAP_FILE = "bootstrap.checkpoint"
"""KRaft's bootstrap metadata snapshot, written by ``kafka-storage format`` in the log dir."""
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
"""KRaft's metadata log: Kafka never lists it as a topic nor serves it to consumers."""
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
"""Kafka's internal topics (``Topic.INTERNAL_TOPICS``): left out of pattern subscriptions."""
MAX_FILE_NAME_BYTES = 255

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
_DELETE_DIR_RE = re.compile(r"^(?P<tp>.+)\.(?P<id>[0-9a-f]{32})-delete$")
_SEGMENT_RE = re.compile(r"^(?P<base>\d{20})(?P<ext>\.[a-z]+)(?P<tmp>\.(deleted|cleaned|swap))?$")


def offset_file_name(base_offset: int, suffix: str) -> str:
    """``offset_file_name(42, ".log") == "00000000000000000042.log"``."""
    return f"{base_offset:020d}{suffix}"


def log_file(dir_: Path, base_offset: int, tmp_suffix: str = "") -> Path:
    return dir_ / (offset_file_name(base_offset, LOG_SUFFIX) + tmp_suffix)


def index_file(dir_: Path, base_offset: int, tmp_suffix: str = "") -> Path:
    return dir_ / (offset_file_name(base_offset, INDEX_SUFFIX) + tmp_suffix)


def time_index_file(dir_: Path, base_offset: int, tmp_suffix: str = "") -> Path:
    return dir_ / (offset_file_name(base_offset, TIME_INDEX_SUFFIX) + tmp_suffix)


def txn_index_file(dir_: Path, base_offset: int, tmp_suffix: str = "") -> Path:
    return dir_ / (offset_file_name(base_offset, TXN_INDEX_SUFFIX) + tmp_suffix)


def parse_segment_file_name(name: str) -> tuple[int, str, str] | None:
    """``"00000000000000000042.log.swap"`` → ``(42, ".log", ".swap")``; None otherwise."""
    m = _SEGMENT_RE.match(name)
    if m is None:
        return None
    return int(m["base"]), m["ext"], m["tmp"] or ""


def partition_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>``; InvalidTopicError when that exceeds a file name's 255
    bytes (a 249-character topic fits partitions up to 99999)."""
    name = f"{topic}-{partition}"
    if len(name.encode()) > MAX_FILE_NAME_BYTES:
        raise InvalidTopicError(
            f"partition {partition} of topic {topic[:40]!r}... (a {len(topic)}-character "
            f"name) needs a directory name of {len(name.encode())} bytes, above the "
            f"{MAX_FILE_NAME_BYTES} a file name may have: use fewer partitions or a "
            "shorter topic name")
    return name


def fitted_name(name: str, suffix: str = "") -> str:
    """``name + suffix`` when it fits in a file name; otherwise ``name`` is cut and a
    hash of the whole of it keeps names of different topics apart.

    >>> fitted_name("t-0", ".stage")
    't-0.stage'
    >>> len(fitted_name("x" * 300, ".stage"))
    255
    """
    full = name + suffix
    if len(full.encode()) <= MAX_FILE_NAME_BYTES:
        return full
    digest = "~" + hashlib.sha256(name.encode()).hexdigest()[:16]
    keep = MAX_FILE_NAME_BYTES - len(suffix.encode()) - len(digest)
    return name.encode()[:keep].decode(errors="ignore") + digest + suffix


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """``"my-topic.v2-3"`` → ``("my-topic.v2", 3)``: the partition follows the last ``-``.

    Returns None for names that are not partition directories (including ``-delete``,
    ``-future`` and ``-stray`` directories, which callers look for separately).
    """
    if name.endswith((DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
        return None
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit() or (len(part) > 1 and part[0] == "0"):
        return None
    return topic, int(part)


def delete_dir_name(topic: str, partition: int) -> str:
    """A unique name for a partition directory awaiting asynchronous deletion:
    ``<topic>-<p>.<32 hex>-delete``, the topic cut as Kafka cuts it so that the name
    fits in 255 bytes (only the unique id matters to whoever removes it)."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return topic[:MAX_FILE_NAME_BYTES - len(suffix)] + suffix


def is_delete_dir_name(name: str) -> bool:
    return _DELETE_DIR_RE.match(name) is not None
