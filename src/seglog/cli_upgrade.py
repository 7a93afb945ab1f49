"""``seglog upgrade URI``: move the legacy topics of a bucket log dir (held in its catalog
commit log, written before per-topic commit logs) into their own commit logs, without
copying data (``logstore.bucket.bucket_upgrade``). ``--dry-run`` lists what would move;
``--topic`` limits it to named topics. Once one topic has moved, seglog versions before
per-topic logs refuse the bucket: the command says so before it moves anything."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, TextIO

from seglog.logstore.errors import ConfigError
from seglog.logstore.storage.object_store_config import is_object_uri

from . import cli_common
from .cli_commands import Command
from .cli_common import EXIT_OK, add_json_arg, add_storage_args
from .cli_output import write_json

if TYPE_CHECKING:
    from seglog.logstore.bucket.bucket_upgrade import TopicMove, UpgradeReport

OLDER_VERSIONS_WARNING = (
    "once a topic has its own commit log, seglog versions before per-topic commit logs "
    "refuse this bucket ('unknown commit format 2'): stop or upgrade every older reader "
    "and writer of it (Spark drivers and workers, seglog CLIs) first"
)


def _upgrade(args: argparse.Namespace, out: TextIO) -> int:
    if not is_object_uri(args.uri):
        raise ConfigError(
            f"upgrade moves the topics of a bucket log dir (s3://, gs://, az://, memory://) "
            f"into their own commit logs, got {args.uri!r}; a local log dir has no commit "
            f"log and needs no upgrade"
        )
    from seglog.logstore.bucket.bucket_manager import BucketLogManager  # obstore: when used

    options = cli_common.storage_options(args)
    with BucketLogManager(args.uri, storage_options=options, read_only=args.dry_run) as mgr:
        if not mgr.exists:
            raise ConfigError(
                f"no bucket log dir at {args.uri} (no commit under _seglog/log/): nothing "
                f"to upgrade"
            )
        report = mgr.upgrade_topic_logs(args.topic or None, dry_run=args.dry_run, before_move=_warn)
    if args.json:
        write_json(out, _json(report))
    else:
        for line in _lines(report):
            out.write(line + "\n")
    return EXIT_OK


def _warn(topics: list[str]) -> None:
    sys.stderr.write(f"seglog upgrade: moving {', '.join(topics)}; {OLDER_VERSIONS_WARNING}\n")


def _lines(report: UpgradeReport) -> list[str]:
    verb = "Would move" if report.dry_run else "Moved"
    lines = [
        f"{verb} topic {m.topic} ({_what(m)}) to its own commit log"
        + (f" _seglog/topics/{m.log_id}/" if m.log_id else "")
        for m in report.moved
    ]
    if report.already:
        lines.append(f"In their own commit logs already (untouched): {', '.join(report.already)}")
    if not report.moved:
        lines.append(f"Nothing to move: no topic of {report.uri} is held in its catalog log")
    elif report.dry_run:
        lines.append(
            "Dry run: nothing was changed. Run again without --dry-run to move them "
            f"({OLDER_VERSIONS_WARNING})"
        )
    else:
        lines.append(f"Catalog version {report.catalog_version}: check with seglog check")
    if report.stale_logs:
        lines.append(
            f"{report.stale_logs} log(s) prepared while another writer changed their topic "
            "were left unnamed: seglog maintain collects them after the orphan grace"
        )
    return lines


def _what(move: TopicMove) -> str:
    return f"{move.partitions} partition(s), {move.segments} segment(s), {move.size_bytes} bytes"


def _json(report: UpgradeReport) -> dict[str, object]:
    return {
        "uri": report.uri,
        "dryRun": report.dry_run,
        "moved": [
            {
                "topic": m.topic,
                "log": m.log_id,
                "partitions": m.partitions,
                "segments": m.segments,
                "sizeBytes": m.size_bytes,
            }
            for m in report.moved
        ],
        "alreadyOwnLog": list(report.already),
        "staleLogs": report.stale_logs,
        "catalogVersion": report.catalog_version if report.moved and not report.dry_run else None,
    }


def _upgrade_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("uri", metavar="URI", help="the bucket log dir, e.g. s3://bucket/logs")
    p.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="TOPIC",
        help="move only this topic (repeatable; default: every legacy topic)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="list the topics that would move, with their sizes; change nothing",
    )
    add_json_arg(p)
    add_storage_args(p)


COMMANDS = {"upgrade": Command(_upgrade_args, _upgrade)}
