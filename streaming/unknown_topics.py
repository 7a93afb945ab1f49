"""Subscribed topics that do not exist, named with the existing topics closest to them.

A misspelt ``subscribe`` would otherwise read nothing in silence: Kafka's consumer waits
for a topic to appear (a broker may create it on first use), and so does a stream here,
with one warning per query run; a batch read refuses it (see ``docs/kafka.md``). Only
``subscribe`` names topics outright: ``subscribePattern`` matching none is a normal
pattern, and ``assign`` already refuses partitions that do not exist.

>>> unknown_topics_message(("evnets",), ["events", "orders"], ("/data",))
"option 'subscribe' names topic 'evnets' (closest: 'events'), which does not exist in /data"
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable

from seglog.logstore.storage.object_store_config import redact_uris

from .source_options import SourceOptions

__all__ = ["unknown_topics", "unknown_topics_message"]

_CLOSEST = 3


def unknown_topics(options: SourceOptions, existing: Collection[str]) -> tuple[str, ...]:
    """The topics ``subscribe`` names that are not among ``existing``."""
    sub = options.subscription
    if sub.kind != "subscribe":
        return ()
    return tuple(t for t in sub.topics if t not in existing)


def unknown_topics_message(
    missing: Iterable[str], existing: Collection[str], log_dirs: Iterable[str]
) -> str:
    """One line naming each missing topic and the existing topics closest to it."""
    named = []
    for topic in missing:
        close = difflib.get_close_matches(topic, list(existing), n=_CLOSEST)
        hint = f" (closest: {', '.join(repr(c) for c in close)})" if close else ""
        named.append(f"{topic!r}{hint}")
    if len(named) == 1:
        what = f"topic {named[0]}, which does not exist"
    else:
        what = f"topics {', '.join(named)}, which do not exist"
    return f"option 'subscribe' names {what} in {redact_uris(log_dirs)}"
