"""``seglog repair URI``: a bucket log dir whose commit log no longer folds (a damaged,
missing or out-of-place commit), or whose newest commits were deleted, ended at its last
good version (``logstore.bucket_repair``). A dry run by default: it names the first bad
commit and what ending the log before it loses; ``--execute`` does it, copying every
commit, snapshot and segment object it takes out of the log under
``_seglog/repaired/<run>/`` first."""

from __future__ import annotations

import argparse
from typing import TextIO

from seglog.logstore.errors import ConfigError
from seglog.logstore.storage.object_store_config import is_object_uri

from . import cli_common
from .cli_commands import Command
from .cli_common import EXIT_OK, add_json_arg, add_storage_args
from .cli_output import write_json

EXIT_DAMAGED = 1
"""A dry run that found something to repair (like ``seglog check``'s problems)."""


def _repair(args: argparse.Namespace, out: TextIO) -> int:
    if not is_object_uri(args.uri):
        raise ConfigError(
            f"repair works on a bucket log dir (s3://, gs://, az://, memory://), "
            f"got {args.uri!r}; a local log dir is recovered by its writer, and "
            f"its files checked with seglog check"
        )
    from seglog.logstore.bucket.bucket_repair import describe, diagnose, repair
    from seglog.logstore.storage.object_storage import ObjectStorage  # obstore: only when used

    storage = ObjectStorage(args.uri, cli_common.storage_options(args))
    diagnosis = diagnose(storage)
    moved_to = None
    if args.execute and not diagnosis.healthy:
        moved_to = f"{storage.uri}/{repair(storage, diagnosis)}"
    if args.json:
        doc = diagnosis.to_json()
        doc["executed"] = moved_to is not None
        doc["moved_to"] = moved_to
        write_json(out, doc)
    else:
        for line in describe(diagnosis):
            out.write(line + "\n")
        if moved_to is not None:
            out.write(
                f"Repaired: the log now ends at version {diagnosis.cut}; everything "
                f"taken out of it was copied to {moved_to}/ first\n"
            )
        elif not diagnosis.healthy:
            out.write(
                "Dry run: nothing was changed. Run again with --execute to end the log there\n"
            )
    return EXIT_OK if diagnosis.healthy or moved_to is not None else EXIT_DAMAGED


def _repair_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("uri", metavar="URI", help="the bucket log dir, e.g. s3://bucket/logs")
    p.add_argument(
        "--execute",
        action="store_true",
        help="end the log at its last good version (default: a dry run that only reports)",
    )
    add_json_arg(p)
    add_storage_args(p)


COMMANDS = {"repair": Command(_repair_args, _repair)}
