"""Topic names (Kafka's rules) and the persisted per-topic config overrides.

Kafka keeps topic configs in its controller; seglog has none, so each partition directory
holds a copy of its topic's overrides in ``seglog-topic.properties`` (Java-properties
style, ``key=value`` per line). Every process that opens the log dir therefore builds the
same ``LogConfig``: its default topic config plus these overrides.

Crash policy: the file is written atomically (temporary file, fsync, rename, directory
fsync). A malformed file raises ``ConfigError`` naming the file: a config cannot be
guessed.

>>> validate_topic_name("orders.v2-eu")
>>> parse_overrides({"retention.ms": 1000})
{'retention.ms': '1000'}
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InvalidTopicError
from ..storage.checkpoint_file import write_atomically
from ..storage.file_names import TOPIC_CONFIG_FILE
from ..storage.storage import read_small_file
from .config import LogConfig

logger = logging.getLogger(__name__)

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``: raises InvalidTopicError saying which rule is broken."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError(f"topic name {name!r} is illegal: it must not be empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is illegal: it cannot be '.' or '..'")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name {name[:20]!r}... is illegal: it is {len(name)} characters long, "
            f"the maximum is {MAX_NAME_LENGTH}")
    if not _LEGAL.match(name):
        bad = sorted({c for c in name if not _LEGAL.match(c)})
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: it contains {''.join(bad)!r}; legal characters "
            "are ASCII letters, digits, '.', '_' and '-'")


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    """Kafka's metric names map '.' to '_', so ``a.b`` and ``a_b`` collide there."""
    return name.replace(".", "_")


def find_collision(name: str, existing: Iterable[str]) -> str | None:
    """An existing topic, other than ``name``, that collides with it once '.' maps to '_'."""
    unified = unify_collision_chars(name)
    for other in existing:
        if other != name and unify_collision_chars(other) == unified:
            return other
    return None


def warn_on_collision(name: str, existing: Iterable[str]) -> None:
    """Kafka refuses such a topic because of its metric names; seglog has no such metrics,
    so it only warns, which keeps the data movable to Kafka in view."""
    other = find_collision(name, existing)
    if other is not None:
        logger.warning("topic %r collides with existing topic %r once '.' and '_' are "
                       "unified; a Kafka cluster would refuse it", name, other)


def _format_value(value: Any) -> str:
    if isinstance(value, frozenset):
        return ",".join(sorted(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_overrides(overrides: Mapping[str, Any] | None,
                    base: LogConfig | None = None) -> dict[str, str]:
    """Validate topic config overrides and normalize them to strings (what is persisted).

    Raises ConfigError naming the key for an unknown key or a bad value.
    """
    if not overrides:
        return {}
    config = LogConfig.from_properties(overrides, base=base)
    by_name = {k.name: k for k in LogConfig.KEYS}
    return {name: _format_value(getattr(config, by_name[name].field))
            for name in sorted(overrides)}


def altered_overrides(current: Mapping[str, str], set_configs: Mapping[str, Any] | None,
                      delete: Iterable[str], base: LogConfig | None = None) -> dict[str, str]:
    """``current`` overrides with ``set_configs`` set and ``delete`` removed (Kafka's
    incremental alter: SET and DELETE), validated and normalized.

    Raises ConfigError naming the key for an unknown key, a bad value, or a key both set
    and deleted. Deleting a known key that is not overridden changes nothing.
    """
    set_configs = dict(set_configs or {})
    delete = list(delete)
    known = {k.name for k in LogConfig.KEYS}
    for key in delete:
        if key not in known:
            raise ConfigError(f"cannot delete unknown config {key!r} "
                              f"(known: {', '.join(sorted(known))})")
        if key in set_configs:
            raise ConfigError(f"config {key!r} is both set and deleted")
    merged = {k: v for k, v in current.items() if k not in delete}
    merged.update(set_configs)
    return parse_overrides(merged, base=base)


def topic_config_path(partition_dir: Path) -> Path:
    return Path(partition_dir) / TOPIC_CONFIG_FILE


def write_topic_config(partition_dir: Path, topic: str, overrides: Mapping[str, str]) -> None:
    """Atomically write ``overrides`` (already normalized) into ``partition_dir``."""
    lines = [f"# seglog config overrides of topic {topic}"]
    lines += [f"{k}={v}" for k, v in sorted(overrides.items())]
    write_atomically(topic_config_path(partition_dir), ("\n".join(lines) + "\n").encode())


def read_topic_config(partition_dir: Path) -> dict[str, str] | None:
    """The overrides stored in ``partition_dir``; None when the file does not exist.

    Raises ConfigError naming the file and line for a malformed file or a bad value.
    """
    path = topic_config_path(partition_dir)
    raw = read_small_file(path, "topic config file ")
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"topic config file {path} is not UTF-8 text") from None
    out: dict[str, str] = {}
    for i, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"topic config file {path}, line {i}: expected key=value, "
                              f"got {line!r}")
        out[key.strip()] = value.strip()
    try:
        LogConfig.from_properties(out)
    except ConfigError as e:
        raise ConfigError(f"topic config file {path}: {e}") from None
    return out


def load_topic_config(partition_dir: Path, default: LogConfig) -> LogConfig:
    """``default`` plus the overrides persisted in ``partition_dir`` (if any)."""
    overrides = read_topic_config(partition_dir) or {}
    return LogConfig.from_properties(overrides, base=default)
