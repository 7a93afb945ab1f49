"""Options of Spark's Kafka connector that seglog ignores, maps or refuses.

seglog is a drop-in for ``format("kafka")``: a job that switches to ``format("seglog")``
and adds a ``path`` keeps working. Options that configure a broker connection
(``kafka.bootstrap.servers``, ``kafka.group.id``, ``groupIdPrefix``, security, timeouts,
``fetchOffset.*``...) mean nothing without a broker: they are accepted and named in one
warning. Options that would change what is read or written are never ignored: seglog
honours them under its own name (``kafka.compression.type`` → ``compression.type``) or
refuses them with an error, following the rules of Spark's ``KafkaSourceProvider``
(``kafka.auto.offset.reset``, (de)serializers, ``enable.auto.commit``, interceptors).

A rule names an option exactly as documented; ``kafka.*`` is the catch-all for the other
Kafka client settings. Lookup is case-insensitive, as Spark's options are.

>>> rule_for("kafka.bootstrap.servers", SOURCE_RULES).action
'ignore'
>>> rule_for("kafka.compression.type", SINK_RULES).target
'compression.type'
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

logger = logging.getLogger(__name__)

__all__ = ["CompatRule", "SOURCE_RULES", "SINK_RULES", "rule_for", "ignored_message",
           "documented_name"]

CLIENT_PREFIX = "kafka."


@dataclass(frozen=True, slots=True)
class CompatRule:
    """What seglog does with one Kafka connector option.

    ``ignore``: broker-only, accepted with a warning; ``refuse``: an error saying
    ``why``; ``map``: honoured as the seglog option ``target``.
    """

    name: str
    action: Literal["ignore", "refuse", "map"]
    why: str
    target: str | None = None


_DESERIALIZED = ("are always returned as binary, as Spark's Kafka source returns them; "
                 "decode them with DataFrame operations (e.g. cast(value AS string))")

_CONSUMER_ONLY = (
    CompatRule("groupIdPrefix", "ignore", "seglog has no consumer groups"),
    CompatRule("fetchOffset.numRetries", "ignore", "offsets are read from local files"),
    CompatRule("fetchOffset.retryIntervalMs", "ignore", "offsets are read from local files"),
    CompatRule("kafkaConsumer.pollTimeoutMs", "ignore", "records are read from local files"),
)

SOURCE_RULES: tuple[CompatRule, ...] = (
    CompatRule("kafka.auto.offset.reset", "refuse",
               "set the option 'startingOffsets' to earliest or latest instead (the "
               "query's checkpoint, not a consumer, decides where reading resumes)"),
    CompatRule("kafka.key.deserializer", "refuse", f"keys {_DESERIALIZED}"),
    CompatRule("kafka.value.deserializer", "refuse", f"values {_DESERIALIZED}"),
    CompatRule("kafka.enable.auto.commit", "refuse",
               "offsets live in the query's checkpoint and are never committed to the log"),
    CompatRule("kafka.interceptor.classes", "refuse",
               "interceptors could change the records read, and seglog runs no consumer"),
    *_CONSUMER_ONLY,
    CompatRule("kafka.*", "ignore",
               "Kafka consumer settings for a broker connection (bootstrap.servers, "
               "group.id, security, timeouts, fetch sizes) have nothing to connect to"),
)

SINK_RULES: tuple[CompatRule, ...] = (
    CompatRule("kafka.key.serializer", "refuse",
               "keys are written as the bytes of the 'key' column (binary or string)"),
    CompatRule("kafka.value.serializer", "refuse",
               "values are written as the bytes of the 'value' column (binary or string)"),
    CompatRule("kafka.partitioner.class", "refuse",
               "rows go where Kafka's default partitioner puts them (murmur2 of the key), "
               "or to the 'partition' column"),
    CompatRule("kafka.partitioner.ignore.keys", "refuse",
               "keyed rows always go where Kafka's default partitioner puts them"),
    CompatRule("kafka.interceptor.classes", "refuse",
               "interceptors could change the records written, and seglog runs no producer"),
    CompatRule("kafka.compression.type", "map", "the producer's codec", "compression.type"),
    CompatRule("kafka.batch.size", "map", "the producer's batch size", "maxBatchBytes"),
    # A job often hands one dict of Kafka options to its reader and its writer; Spark's
    # Kafka sink ignores the consumer's, and so does seglog's (with the warning).
    *_CONSUMER_ONLY,
    CompatRule("kafka.*", "ignore",
               "Kafka producer settings for a broker connection (bootstrap.servers, acks, "
               "retries, linger.ms, security, timeouts) have nothing to connect to; the "
               "sink is exactly-once and fsyncs on every commit"),
)

TRIGGER_OPTIONS_IN_BATCH = CompatRule(
    "maxOffsetsPerTrigger, minOffsetsPerTrigger, maxTriggerDelay, maxBytesPerTrigger",
    "ignore", "a batch query reads its whole range at once (Spark's Kafka source also "
    "ignores them in batch queries)")


def rule_for(key: str, rules: Sequence[CompatRule]) -> CompatRule | None:
    """The rule for option ``key`` (any case), or None when the option is not Kafka's."""
    lowered = key.lower()
    for rule in rules:
        if rule.name.lower() == lowered:
            return rule
    if lowered.startswith(CLIENT_PREFIX):
        return rules[-1] if rules[-1].name == "kafka.*" else None
    return None


def documented_name(key: str, rule: CompatRule) -> str:
    """``key`` spelled as Kafka's connector documents it: Spark lowercases option names
    before seglog sees them (``groupidprefix``), and Kafka client configs are lowercase."""
    return key.lower() if rule.name == "kafka.*" else rule.name


def refusal(key: str, rule: CompatRule, what: str) -> str:
    """The error message for a refused option, naming it as Kafka documents it."""
    return (f"option {documented_name(key, rule)!r} of Spark's Kafka connector is not "
            f"supported by the seglog {what}: {rule.why}")


def ignored_message(names: Iterable[str], what: str) -> str:
    """One warning naming every option accepted without effect."""
    listed = ", ".join(repr(n) for n in names)
    return (f"the seglog {what} ignores these Kafka connector options, which only configure "
            f"a broker connection or do not apply here: {listed}")


def warn_ignored(names: tuple[str, ...], what: str) -> None:
    """One warning naming Kafka options that have no effect here (``what``: source or
    sink)."""
    if names:
        logger.warning(ignored_message(names, what))
