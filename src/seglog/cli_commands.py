"""The ``seglog`` subcommands: each name, its one-line help and the module that runs it.

This table is all ``seglog`` reads to start: ``seglog --help`` lists it and ``--version``
needs nothing more. Only the module of the command being run is imported (``load``), so
``seglog topics`` never loads the record codec's numba kernels, Arrow's compute
functions or the object-store client that other commands use (``docs/internals.md``,
"The ``seglog`` command"). Each module exports ``COMMANDS``: name → ``Command``; a new
command is a line here and an entry in its module's ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import NamedTuple, TextIO

Run = Callable[[argparse.Namespace, TextIO], int]


class Command(NamedTuple):
    """What a command module gives for one command."""

    add_args: Callable[[argparse.ArgumentParser], None]
    run: Run
    # Raises ConfigError for a usage error argparse cannot see (reported with the
    # command's usage, status 2) before anything runs.
    check_usage: Callable[[argparse.Namespace], object] | None = None
    # False: the command reports its own errors as problems found (status 1: dump-log,
    # check); True: ``cli_common.guarded`` turns them into one line and status 2.
    guarded: bool = True


class Entry(NamedTuple):
    help: str
    module: str


REGISTRY: dict[str, Entry] = {
    "dump-log": Entry(
        "print the batches and index entries of segment files (like kafka-dump-log.sh)",
        "seglog.cli_dump_log",
    ),
    "check": Entry(
        "check partition directories (batches, offsets, indexes) and log dirs "
        "(checkpoints, state files); --fix repairs",
        "seglog.cli_check",
    ),
    "topics": Entry("list the topics of the log dirs", "seglog.cli_topics"),
    "describe": Entry(
        "partitions, offsets, sizes, segments and configs of topics", "seglog.cli_topics"
    ),
    "create": Entry("create a topic (like kafka-topics.sh --create)", "seglog.cli_topics"),
    "delete": Entry("delete a topic (like kafka-topics.sh --delete)", "seglog.cli_topics"),
    "alter-config": Entry(
        "set or remove a topic's config overrides (like kafka-configs.sh --alter)",
        "seglog.cli_topics",
    ),
    "alter": Entry(
        "add partitions to a topic (like kafka-topics.sh --alter --partitions)", "seglog.cli_admin"
    ),
    "get-offsets": Entry(
        "offsets for a time: latest, earliest, or the first at or after a "
        "timestamp (like kafka-get-offsets.sh)",
        "seglog.cli_admin",
    ),
    "delete-records": Entry(
        "raise log start offsets (like kafka-delete-records.sh)", "seglog.cli_admin"
    ),
    "produce": Entry(
        "append lines from stdin or a file as records (like "
        "kafka-console-producer.sh), published all at once",
        "seglog.cli_produce",
    ),
    "consume": Entry(
        "print a topic's records (like kafka-console-consumer.sh)", "seglog.cli_consume"
    ),
    "maintain": Entry(
        "run retention, compaction, flushes, checkpoints and delayed "
        "deletions now, or on their schedule with --loop",
        "seglog.cli_maintain",
    ),
    "lag": Entry(
        "a streaming query's committed offsets against the topics' ends", "seglog.cli_lag"
    ),
    "export": Entry("write a bucket log dir out as a plain Kafka log dir", "seglog.cli_export"),
    "import": Entry(
        "copy a local Kafka or seglog log dir into a bucket log dir", "seglog.cli_import"
    ),
    "repair": Entry(
        "end a bucket log dir's commit log before a damaged or missing commit "
        "(dry run unless --execute)",
        "seglog.cli_repair",
    ),
    "upgrade": Entry(
        "move a bucket log dir's legacy topics (in its catalog log) into their own "
        "commit logs (--dry-run lists them)",
        "seglog.cli_upgrade",
    ),
    "probe-store": Entry(
        "check that an object store enforces the conditional writes seglog's "
        "commits need (exit 0 safe, 1 unsafe)",
        "seglog.cli_probe",
    ),
}


def load(name: str) -> Command:
    """The command ``name``, importing its module now; its ``run`` guarded unless the
    command reports its own errors."""
    module = importlib.import_module(REGISTRY[name].module)
    command: Command = module.COMMANDS[name]
    if not command.guarded:
        return command
    from .cli_common import guarded  # the log engine's entry points: only to run one

    return command._replace(run=guarded(name, command.run))
