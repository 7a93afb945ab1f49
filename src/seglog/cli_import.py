"""``seglog import DIR URI``: a local log dir (a Kafka broker's or a seglog one) copied
into a bucket log dir (``logstore.bucket_import``), the reverse of ``seglog export``.
The local dir is only read; Kafka's batches are copied byte for byte."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from seglog.logstore.errors import ConfigError
from seglog.logstore.storage.object_store_config import is_object_uri

from . import cli_common
from .cli_commands import Command
from .cli_common import EXIT_OK, add_json_arg, add_storage_args
from .cli_output import Progress, write_json

# A broker's own state, meaningless without its broker (group offsets, transaction
# coordinator state, KRaft metadata): left out unless named with --topic.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__cluster_metadata"})


def _import(args: argparse.Namespace, out: TextIO) -> int:
    if is_object_uri(args.dir):
        raise ConfigError(
            f"import reads a local log dir, got the URI {args.dir!r} (a bucket "
            "is copied out with seglog export)"
        )
    if not is_object_uri(args.uri):
        raise ConfigError(
            f"import writes into a bucket log dir (s3://, gs://, az://, "
            f"memory://), got {args.uri!r}"
        )
    if not os.path.isdir(args.dir):
        raise ConfigError(f"log dir {args.dir} does not exist")
    # obstore and the bucket engine: only when this command runs
    from seglog.logstore.bucket.bucket_import import import_log_dir
    from seglog.logstore.bucket.bucket_manager import BucketLogManager
    from seglog.logstore.manager.log_dirs_reader import LogDirsReader

    with (
        LogDirsReader([args.dir], clock=cli_common.CLOCK) as source,
        BucketLogManager(
            args.uri, clock=cli_common.CLOCK, storage_options=cli_common.storage_options(args)
        ) as target,
        Progress(f"import {args.dir}", in_bytes=True, enabled=not args.json) as bar,
    ):
        topics = args.topic or [t for t in source.topics() if t not in INTERNAL_TOPICS]
        stats = import_log_dir(target.committer, source, topics, progress=bar.on_bytes)
        version = target.state.version
    if args.json:
        write_json(
            out,
            {
                "dir": args.dir,
                "uri": args.uri,
                "version": version,
                "topics": stats.topics,
                "partitions": stats.partitions,
                "segments": stats.segments,
                "bytes": stats.bytes,
                "records": stats.records,
            },
        )
    else:
        out.write(
            f"Imported {args.dir} into {args.uri} (version {version}): "
            f"{stats.topics} topic(s), {stats.partitions} partition(s), "
            f"{stats.segments} segment(s), {stats.records} record(s), "
            f"{stats.bytes} bytes\n"
        )
    return EXIT_OK


def _import_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="a local log dir (a Kafka broker's or seglog's)")
    p.add_argument("uri", metavar="URI", help="the bucket log dir, e.g. s3://bucket/logs")
    p.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="TOPIC",
        help="import only this topic (repeatable; default: every topic but "
        "Kafka's internal ones, __consumer_offsets and __transaction_state)",
    )
    add_json_arg(p)
    add_storage_args(p)


COMMANDS = {"import": Command(_import_args, _import)}
