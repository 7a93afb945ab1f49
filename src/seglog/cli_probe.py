"""``seglog probe-store URI``: whether a bucket (any S3-compatible server, GCS, Azure)
keeps the conditional-write promises seglog's commits need (``logstore.store_probe``),
checked on a scratch prefix ``_seglog/probe-<random>/`` under URI and removed afterwards.

Exit status: 0 when every check passed (seglog can commit safely there), 1 when one
failed (do not run more than one writer on that store), 2 when the probe could not run
(bad usage, access denied, unreachable)."""

from __future__ import annotations

import argparse
from typing import TextIO

from seglog.logstore.errors import ConfigError
from seglog.logstore.storage.object_store_config import is_object_uri, redact_uri

from . import cli_common
from .cli_commands import Command
from .cli_common import EXIT_OK, EXIT_PROBLEMS, add_json_arg, add_storage_args
from .cli_output import write_json


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count >= 1")
    return value


def _probe(args: argparse.Namespace, out: TextIO) -> int:
    if not is_object_uri(args.uri):
        raise ConfigError(
            f"probe-store checks an object store (s3://, gs://, az://, "
            f"memory://), got {redact_uri(args.uri)!r}; a local log dir "
            f"needs no probe (its creates are the file system's O_EXCL)"
        )
    if args.writers < 2:
        raise ConfigError(f"--writers {args.writers}: a race needs at least 2 writers")
    # obstore is imported only when a bucket is used
    from seglog.logstore.storage.object_storage import ObjectStorage
    from seglog.logstore.storage.store_probe import probe_store

    storage = ObjectStorage(args.uri, cli_common.storage_options(args))
    result = probe_store(storage, writers=args.writers, rounds=args.rounds)
    if args.json:
        write_json(
            out,
            {
                "uri": result.uri,
                "prefix": result.prefix,
                "safe": result.safe,
                "checks": [
                    {"name": c.name, "passed": c.passed, "detail": c.detail} for c in result.checks
                ],
                "cleaned_up": result.cleaned_up,
                "leftover": result.leftover,
            },
        )
    else:
        out.write(f"Probing {result.uri} on the scratch prefix {result.prefix}\n")
        for c in result.checks:
            out.write(f"  {'ok  ' if c.passed else 'FAIL'}  {c.name}: {c.detail}\n")
        if result.cleaned_up:
            out.write(f"Removed everything the probe wrote under {result.prefix}\n")
        else:
            out.write(f"Could not remove: {', '.join(result.leftover)}\n")
        if result.safe:
            out.write(
                "Verdict: SAFE: the store enforces create-if-absent and If-Match, "
                "also under concurrent requests; seglog can commit here\n"
            )
        else:
            out.write(
                "Verdict: UNSAFE: the store does not keep its conditional writes; "
                "concurrent seglog writers on it can fork the log (an append "
                "acknowledged and lost). Run at most one writer on it, or use "
                "another store\n"
            )
    return EXIT_OK if result.safe else EXIT_PROBLEMS


def _probe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "uri", metavar="URI", help="a bucket log dir (or where one will be), e.g. s3://bucket/logs"
    )
    p.add_argument(
        "--writers",
        type=_positive,
        default=8,
        metavar="N",
        help="threads racing in each round (default 8)",
    )
    p.add_argument(
        "--rounds", type=_positive, default=10, metavar="N", help="rounds of each race (default 10)"
    )
    add_json_arg(p)
    add_storage_args(p)


COMMANDS = {"probe-store": Command(_probe_args, _probe)}
