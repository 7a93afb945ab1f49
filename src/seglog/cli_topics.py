"""``seglog topics | describe | create | delete | alter-config``: what ``kafka-topics.sh``
and ``kafka-configs.sh`` do for a Kafka user, on log dirs.

``topics`` and ``describe`` open the dirs read-only (no lock, nothing written); the
others take the dirs' writer ``.lock`` (``--lock-timeout``). Config keys are Kafka's topic
config names, validated by ``LogConfig``: a bad key or value is an error naming the key.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, TextIO

from seglog.logstore.config.config import LogConfig
from seglog.logstore.errors import (
    ConfigError,
    CorruptPartitionMetadataError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)

from .cli_commands import Command
from .cli_common import (
    EXIT_OK,
    add_json_arg,
    add_path_args,
    add_topic_arg,
    add_writer_args,
    open_reader,
    parse_key_values,
    writing,
)
from .cli_output import write_json, write_table

if TYPE_CHECKING:
    from seglog.logstore.log_dirs_api import LogDirsView


def _config_value(config: LogConfig, field: str) -> str:
    value = getattr(config, field)
    if isinstance(value, frozenset):
        return ",".join(sorted(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def describe_topic(mgr: LogDirsView, topic: str) -> dict[str, Any]:
    """What ``describe`` prints, as the JSON document it prints with ``--json``."""
    numbers = mgr.partitions(topic)
    hws = mgr.high_watermarks()
    starts = mgr.log_start_offsets()
    parts = []
    for n in numbers:
        log = mgr.get_log(topic, n)
        start = starts.get((topic, n), 0)
        parts.append({"partition": n, "logDir": str(log.dir.parent),
                      "startOffset": start, "endOffset": max(hws.get((topic, n), 0), start),
                      "sizeBytes": log.size_in_bytes, "segments": log.num_segments})
    config = mgr.topic_config(topic)
    overrides = mgr.topic_overrides(topic)
    configs = {k.name: {"value": _config_value(config, k.field), "override": k.name in overrides}
               for k in LogConfig.KEYS}
    # Kafka's TopicId (KIP-516); None for a topic written before seglog kept ids. A
    # damaged or conflicting partition.metadata is shown, not raised: one bad file must
    # not hide every other topic from the tool that diagnoses it.
    try:
        topic_id, problem = mgr.topic_ids([topic]).get(topic), None
    except CorruptPartitionMetadataError as e:
        topic_id, problem = None, str(e)
    return {"topic": topic, "topicId": topic_id, "topicIdProblem": problem,
            "partitions": parts, "configs": configs}


def _topics(args: argparse.Namespace, out: TextIO) -> int:
    with open_reader(args) as mgr:
        names = mgr.topics()
        if args.json:
            write_json(out, {"topics": [{"topic": t, "partitions": len(mgr.partitions(t))}
                                        for t in names]})
        else:
            out.writelines(t + "\n" for t in names)
    return EXIT_OK


def _describe(args: argparse.Namespace, out: TextIO) -> int:
    with open_reader(args) as mgr:
        names = [*args.topics, *args.topic_flags] or mgr.topics()
        docs = [describe_topic(mgr, t) for t in names]
    if args.json:
        write_json(out, {"topics": docs})
        return EXIT_OK
    for d in docs:
        overrides = ",".join(f"{k}={v['value']}" for k, v in d["configs"].items()
                             if v["override"])
        shown = d["topicId"] or ("unreadable (see seglog check)" if d["topicIdProblem"]
                                 else "none")
        out.write(f"Topic: {d['topic']}\tTopicId: {shown}\t"
                  f"PartitionCount: {len(d['partitions'])}\t"
                  f"Configs: {overrides}\n")
        write_table(out, ["PARTITION", "START-OFFSET", "END-OFFSET", "SIZE-BYTES", "SEGMENTS",
                          "LOG-DIR"],
                    [[p["partition"], p["startOffset"], p["endOffset"], p["sizeBytes"],
                      p["segments"], p["logDir"]] for p in d["partitions"]])
        out.write("Configs in force (* = topic override):\n")
        out.writelines(f"  {'*' if v['override'] else ' '} {k}={v['value']}\n"
                       for k, v in d["configs"].items())
    return EXIT_OK


def _create(args: argparse.Namespace, out: TextIO) -> int:
    config = parse_key_values(args.config, "--config")
    if args.partitions < 1:
        raise ConfigError(f"--partitions must be at least 1, got {args.partitions}")
    if args.replication_factor not in (None, 1):
        raise ConfigError(f"--replication-factor {args.replication_factor}: seglog keeps one "
                          "copy of each partition (no brokers to replicate to); only 1 is "
                          "accepted (copy a log dir with seglog export/import for a backup)")
    with writing(args, create_dirs=True) as mgr:
        try:
            mgr.create_topic(args.topic, args.partitions, config)
        except TopicExistsError:
            if not args.if_not_exists:
                raise
            created = False
        else:
            created = True
    if args.json:
        write_json(out, {"topic": args.topic, "created": created,
                         "partitions": args.partitions if created else None})
    elif created:
        out.write(f"Created topic {args.topic} with {args.partitions} partition(s).\n")
    return EXIT_OK


def _delete(args: argparse.Namespace, out: TextIO) -> int:
    with writing(args) as mgr:
        try:
            partitions = len(mgr.partitions(args.topic))
            mgr.delete_topic(args.topic)
        except UnknownTopicOrPartitionError:
            if not args.if_exists:
                raise
            partitions = 0
    if args.json:
        write_json(out, {"topic": args.topic, "deleted": bool(partitions),
                         "partitions": partitions})
    elif partitions:
        # What happens, not file.delete.delay.ms: that delay applies only inside a writer
        # that stays open (this one closes now); the next writer removes them on open.
        out.write(f"Deleted topic {args.topic} ({partitions} partition(s)): readers no "
                  "longer see it; its directories, renamed <topic>-<p>.<id>-delete, are "
                  "removed by the next writer that opens the log dir (e.g. seglog "
                  "maintain).\n")
    return EXIT_OK


def split_config_list(text: str) -> list[str]:
    """kafka-configs.sh's ``--add-config`` syntax: ``k1=v1,k2=[a,b]`` → ``["k1=v1",
    "k2=a,b"]`` (commas inside brackets belong to the value).

    >>> split_config_list("retention.ms=1000,cleanup.policy=[compact,delete]")
    ['retention.ms=1000', 'cleanup.policy=compact,delete']
    """
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"--add-config: unbalanced ']' in {text!r}")
        elif ch == "," and depth == 0:
            items.append("".join(current))
            current = []
            continue
        if ch not in "[]":
            current.append(ch)
    if depth:
        raise ConfigError(f"--add-config: unbalanced '[' in {text!r}")
    items.append("".join(current))
    return [i for i in items if i.strip()]


def _alter_config(args: argparse.Namespace, out: TextIO) -> int:
    add = parse_key_values([i for text in args.add_config for i in split_config_list(text)],
                           "--add-config")
    delete = [k.strip() for text in args.delete_config for k in text.split(",") if k.strip()]
    if not add and not delete:
        raise ConfigError("alter-config needs --add-config k=v or --delete-config k")
    with writing(args) as mgr:
        overrides = mgr.alter_topic_config(args.topic, add, delete)
    if args.json:
        write_json(out, {"topic": args.topic, "overrides": overrides})
    else:
        out.write(f"Altered the config of topic {args.topic}; overrides now: "
                  f"{','.join(f'{k}={v}' for k, v in overrides.items()) or '(none)'}\n")
    return EXIT_OK


def _topics_args(p: argparse.ArgumentParser) -> None:
    add_path_args(p)
    add_json_arg(p)


def _describe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("topics", nargs="*", metavar="TOPIC", help="topics (default: all)")
    p.add_argument("--topic", action="append", default=[], dest="topic_flags",
                   metavar="TOPIC", help="the same as TOPIC (Kafka's tools' spelling; "
                                         "repeatable)")
    add_path_args(p)
    add_json_arg(p)


def _create_args(p: argparse.ArgumentParser) -> None:
    add_topic_arg(p)
    p.add_argument("--partitions", type=int, default=1, metavar="N")
    p.add_argument("--replication-factor", type=int, metavar="1",
                   help="accepted as 1 (kafka-topics.sh's option): seglog keeps one copy of "
                        "each partition, in its log dir")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a Kafka topic config override (repeatable), e.g. retention.ms=86400000")
    p.add_argument("--if-not-exists", action="store_true",
                   help="succeed without change when the topic exists")
    add_writer_args(p)
    add_json_arg(p)


def _delete_args(p: argparse.ArgumentParser) -> None:
    add_topic_arg(p)
    p.add_argument("--if-exists", action="store_true",
                   help="succeed without change when the topic does not exist")
    add_writer_args(p)
    add_json_arg(p)


def _alter_config_args(p: argparse.ArgumentParser) -> None:
    add_topic_arg(p)
    p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]",
                   help="set overrides; a value holding commas goes in brackets: "
                        "cleanup.policy=[compact,delete]")
    p.add_argument("--delete-config", action="append", default=[], metavar="K[,K]",
                   help="remove overrides (the default applies again)")
    add_writer_args(p)
    add_json_arg(p)


COMMANDS = {
    "topics": Command(_topics_args, _topics),
    "describe": Command(_describe_args, _describe),
    "create": Command(_create_args, _create),
    "delete": Command(_delete_args, _delete),
    "alter-config": Command(_alter_config_args, _alter_config),
}
