"""``seglog export URI DIR``: a bucket log dir written out as a plain Kafka log dir
(``logstore.bucket_export``: ``<base>.log``/``.index``/``.timeindex`` with real offsets,
the offset checkpoints, the clean-shutdown marker), for Kafka's tools, a local seglog or
a backup. The bucket is only read."""

from __future__ import annotations

import argparse
from typing import TextIO

from seglog.logstore.errors import ConfigError
from seglog.logstore.storage.object_store_config import is_object_uri

from . import cli_common
from .cli_commands import Command
from .cli_common import EXIT_OK, add_json_arg, add_storage_args
from .cli_output import Progress, write_json


def _export(args: argparse.Namespace, out: TextIO) -> int:
    if not is_object_uri(args.uri):
        raise ConfigError(f"export reads a bucket log dir (s3://, gs://, az://, memory://), "
                          f"got {args.uri!r}; a local log dir is already a Kafka log dir")
    from seglog.logstore.bucket.bucket_manager import BucketLogManager  # obstore: only when used

    with (BucketLogManager(args.uri, read_only=True, clock=cli_common.CLOCK,
                           storage_options=cli_common.storage_options(args)) as mgr,
          Progress(f"export {args.uri}", in_bytes=True, enabled=not args.json) as bar):
        cli_common.require_bucket_commits(mgr, "URI")
        stats = mgr.export(args.dir, progress=bar.on_bytes)
        version = mgr.state.version
    if args.json:
        write_json(out, {"uri": args.uri, "dir": args.dir, "version": version,
                         "partitions": stats.partitions, "segments": stats.segments,
                         "bytes": stats.bytes})
    else:
        out.write(f"Exported version {version} of {args.uri} to {args.dir}: "
                  f"{stats.partitions} partition(s), {stats.segments} segment(s), "
                  f"{stats.bytes} bytes\n")
    return EXIT_OK


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("uri", metavar="URI", help="the bucket log dir, e.g. s3://bucket/logs")
    p.add_argument("dir", metavar="DIR", help="a new (or empty) local directory")
    add_json_arg(p)
    add_storage_args(p)


COMMANDS = {"export": Command(_export_args, _export)}
