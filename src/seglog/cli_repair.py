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
    from seglog.logstore.bucket.bucket_repair import describe, diagnose_all, repair
    from seglog.logstore.storage.object_storage import ObjectStorage  # obstore: only when used

    storage = ObjectStorage(args.uri, cli_common.storage_options(args))
    # Every commit log: the catalog's and each topic's own; each damaged one is ended at
    # its own cut.
    diagnoses = diagnose_all(storage)
    damaged = [d for d in diagnoses if not d.healthy]
    shown = damaged or diagnoses[:1]
    moved: dict[str, str] = {}
    if args.execute:
        for d in damaged:
            moved[d.uri] = f"{storage.uri}/{repair(storage, d)}"
    if args.json:
        docs = []
        for d in diagnoses:
            doc = d.to_json()
            doc["executed"] = d.uri in moved
            doc["moved_to"] = moved.get(d.uri)
            docs.append(doc)
        # The first damaged log's report at the top (the catalog's when none is), every
        # log's under "logs".
        top = dict(docs[diagnoses.index(shown[0])])
        top["logs"] = docs
        write_json(out, top)
    else:
        for d in shown:
            for line in describe(d):
                out.write(line + "\n")
            if d.uri in moved:
                out.write(
                    f"Repaired: the log now ends at version {d.cut}; everything "
                    f"taken out of it was copied to {moved[d.uri]}/ first\n"
                )
        if damaged and not moved:
            out.write(
                "Dry run: nothing was changed. Run again with --execute to end the log there\n"
            )
    return EXIT_OK if not damaged or len(moved) == len(damaged) else EXIT_DAMAGED


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
