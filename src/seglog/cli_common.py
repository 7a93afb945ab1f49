"""What every ``seglog`` operations command shares: naming the log dirs, opening a
LogManager (readers without a lock, writers waiting for the ``.lock``), ``key=value``
arguments, and turning expected errors into one line and exit status 2.

Log dirs are named as the Spark source and sink name them (``path`` / ``logDirs``):
``--path DIR``, repeatable and/or comma-separated, defaulting to the ``SEGLOG_PATH``
environment variable (comma-separated too). Writers wait up to ``--lock-timeout`` ms for
another writer (a Spark sink commit, another ``seglog`` command) to release a log dir's
``.lock``, as the sink waits ``lockTimeoutMs``. A bucket URI's endpoint and credentials
come from the environment, or from ``--storage-option KEY=VALUE`` (repeatable; obstore's
names, as the Spark options ``storage.<name>``), which overrides it; options with local
dirs are refused.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, TextIO, TypeVar

from seglog.logstore.errors import (
    ConfigError,
    InvalidTopicError,
    LogDirLockedError,
    SeglogError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.storage.object_store_config import is_object_uri
from seglog.logstore.util.clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:  # the backends are imported where a command opens one
    from seglog.logstore.log_dirs_api import LogDirs, LogDirsView

PATH_ENV = "SEGLOG_PATH"
DEFAULT_LOCK_TIMEOUT_MS = 30_000

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# The clock handed to every LogManager a command opens; tests replace it (in-process
# runs) to make retention due without sleeping.
CLOCK: Clock = SYSTEM_CLOCK

Run = Callable[[argparse.Namespace, TextIO], int]


def add_path_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--path", action="append", default=[], metavar="DIR",
                   help=f"a log dir (repeatable, or comma-separated; default: ${PATH_ENV})")
    add_storage_args(p)


def add_topic_arg(p: argparse.ArgumentParser) -> None:
    """The topic, as seglog spells it (``TOPIC``) or as Kafka's tools do (``--topic``);
    ``resolve_kafka_compat_args`` requires exactly one."""
    p.add_argument("topic", nargs="?", metavar="TOPIC")
    p.add_argument("--topic", dest="topic_flag", metavar="TOPIC",
                   help="the same as TOPIC (Kafka's tools' spelling)")


def add_kafka_compat_args(p: argparse.ArgumentParser) -> None:
    """Options every subcommand accepts so a Kafka tool's command line runs as it is."""
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="accepted for Kafka tools' command lines and ignored: seglog reads "
                        "the log dirs of --path, with no broker")


def resolve_kafka_compat_args(args: argparse.Namespace) -> None:
    """Fold the Kafka spellings into seglog's (``--topic`` into ``topic``); note the
    ignored ``--bootstrap-server`` on stderr. Raises ConfigError for a usage error."""
    values = vars(args)
    if values.get("bootstrap_server"):
        sys.stderr.write(f"seglog {args.command}: --bootstrap-server {args.bootstrap_server} "
                         "ignored: seglog reads the log dirs of --path (or $SEGLOG_PATH), "
                         "with no broker\n")
    if "topic_flag" in values:
        flag, positional = values["topic_flag"], values["topic"]
        if flag is not None and positional is not None and flag != positional:
            raise ConfigError(f"the topic is given twice: {positional!r} and --topic {flag!r}")
        args.topic = positional if positional is not None else flag
        if args.topic is None and values.get("topic_required", True):
            raise ConfigError("a topic is needed: TOPIC or --topic TOPIC")


def add_storage_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   dest="storage_option",
                   help="an object-store option of a bucket URI, e.g. aws_endpoint=URL, "
                        "aws_region=R (repeatable; overrides the AWS_*/GOOGLE_*/AZURE_* "
                        "environment; keep secrets in the environment: a command line is "
                        "visible to other users)")


def storage_options(args: argparse.Namespace, names: Iterable[str] = ()) -> dict[str, str]:
    """The ``--storage-option`` pairs (names lowercased, as obstore spells them); refused
    when one of ``names`` (a command's positional files or dirs) is local, as a manager
    refuses them for local log dirs."""
    pairs = parse_key_values(getattr(args, "storage_option", None) or [], "--storage-option")
    local = [n for n in names if not is_object_uri(n)]
    if pairs and local:
        raise ConfigError(f"--storage-option ({', '.join(pairs)}) is for bucket URIs "
                          f"(s3://, gs://, az://...), not the local {', '.join(local)}")
    return {k.lower(): v for k, v in pairs.items()}


def add_writer_args(p: argparse.ArgumentParser) -> None:
    add_path_args(p)
    p.add_argument("--lock-timeout", type=int, default=DEFAULT_LOCK_TIMEOUT_MS, metavar="MS",
                   help="how long to wait for another writer to release a log dir's .lock "
                        f"(default {DEFAULT_LOCK_TIMEOUT_MS})")


def add_json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="print JSON for scripts (keys documented in docs/cli.md)")


def log_dirs(args: argparse.Namespace, extra: Iterable[str] = ()) -> list[str]:
    """The log dirs of ``--path`` (plus ``extra``, e.g. positional dirs), else
    ``$SEGLOG_PATH``; a dir named twice or none at all is a usage error."""
    raw = [*args.path, *extra]
    source = "--path"
    if not raw:
        raw = [os.environ.get(PATH_ENV, "")]
        source = PATH_ENV
    dirs = [d.strip() for item in raw for d in item.split(",") if d.strip()]
    if not dirs:
        raise ConfigError(f"no log dir given: pass --path DIR or set {PATH_ENV}")
    canonical = [d if is_object_uri(d) else os.path.realpath(d) for d in dirs]
    if len(set(canonical)) != len(canonical):
        raise ConfigError(f"{source} names a log dir twice: {', '.join(dirs)}")
    return dirs


def open_reader(args: argparse.Namespace) -> LogDirsView:
    """A reader of the log dirs: takes no lock and writes nothing. The dirs must exist (a
    reader never creates one). A bucket URI gives a read-only bucket manager (the same
    reader API)."""
    dirs = log_dirs(args)
    _require_dirs(dirs)
    from seglog.logstore.manager.log_manager import open_log_dirs

    # (storage options with local dirs are refused there, naming them)
    reader = open_log_dirs(dirs, read_only=True, clock=CLOCK,
                           storage_options=storage_options(args))
    require_bucket_commits(reader)
    return reader


def require_bucket_commits(mgr: LogDirsView, option: str = "--path") -> None:
    """A bucket URI with no commit is no log dir: a mistyped or empty prefix lists
    nothing, which must not pass for an empty log dir (a missing local dir is an error
    too, ``_require_dirs``). ``ConfigError`` naming the URI, ``mgr`` closed first."""
    if not mgr.exists:
        from seglog.logstore.bucket.bucket_state import COMMIT_DIR

        mgr.close()
        raise ConfigError(f"log dir {mgr.location} does not exist: nothing under "
                          f"{mgr.location}/{COMMIT_DIR}/ (a mistyped bucket or prefix? "
                          f"seglog create makes a log dir) ({option})")


def _require_dirs(dirs: list[str]) -> None:
    for d in dirs:
        if not is_object_uri(d) and not os.path.isdir(d):
            raise ConfigError(f"log dir {d} does not exist (--path)")


def open_writer(args: argparse.Namespace, dirs: list[str] | None = None,
                config: dict[str, str] | None = None, *,
                create_dirs: bool = False) -> LogDirs:
    """A writer LogManager, waiting up to ``--lock-timeout`` ms for each ``.lock``; the
    error after the wait names the dir and the holder (from the lock file). Only
    ``create_dirs`` (``seglog create``) makes missing log dirs: elsewhere a mistyped path
    is an error, not a new empty log dir."""
    timeout_ms = args.lock_timeout
    if timeout_ms < 0:
        raise ConfigError(f"--lock-timeout must not be negative, got {timeout_ms}")
    dirs = dirs if dirs is not None else log_dirs(args)
    options = storage_options(args)
    if not create_dirs:
        _require_dirs(dirs)
    from seglog.logstore.manager.log_manager import open_log_dirs

    deadline = time.monotonic() + timeout_ms / 1000
    pause = 0.02
    told = False
    while True:
        try:
            writer = open_log_dirs(dirs, clock=CLOCK, config=config,
                                   storage_options=options)
            if not create_dirs:
                require_bucket_commits(writer)
            return writer
        except LogDirLockedError as e:
            if time.monotonic() + pause > deadline:
                raise LogDirLockedError(
                    f"{e}; waited {timeout_ms} ms for it (--lock-timeout)") from None
            if not told:
                sys.stderr.write(f"seglog: waiting up to {timeout_ms} ms: {e}\n")
                told = True
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


# Refusals raised before anything is written: the manager still closes cleanly, so the
# next open need not recover the dirs.
_V = TypeVar("_V")  # a property default's type

_REFUSALS = (ConfigError, InvalidTopicError, TopicExistsError, UnknownTopicOrPartitionError)


@contextlib.contextmanager
def writing(args: argparse.Namespace, dirs: list[str] | None = None,
            config: dict[str, str] | None = None, *,
            create_dirs: bool = False) -> Iterator[LogDirs]:
    """``open_writer`` as a context: closed cleanly on success and on a refusal (bad
    input, nothing written); any other error leaves the dirs to be recovered, as
    ``with LogManager(...)`` does."""
    mgr = open_writer(args, dirs, config, create_dirs=create_dirs)
    with mgr:
        try:
            yield mgr
        except _REFUSALS:
            mgr.close()
            raise


def parse_key_values(items: Iterable[str], option: str) -> dict[str, str]:
    """``key=value`` strings (the value kept verbatim, commas included) → a dict; a
    malformed or repeated item is a usage error naming ``option``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{option} expects key=value, got {item!r}")
        if key in out:
            raise ConfigError(f"{option} sets {key!r} twice")
        out[key] = value.strip()
    return out


def property_values(props: Mapping[str, str], defaults: Mapping[str, _V]) -> dict[str, str | _V]:
    """``--property`` values over their ``defaults`` (a console formatter's or line
    reader's, as Kafka's tools take them); a name not among them is a usage error listing
    the known ones."""
    unknown = sorted(set(props) - set(defaults))
    if unknown:
        raise ConfigError(
            f"unknown --property {unknown[0]!r} (known: {', '.join(sorted(defaults))})"
        )
    return {**defaults, **props}


def property_flag(values: Mapping[str, object], name: str) -> bool:
    """The ``--property`` ``name`` of ``property_values`` as a boolean (true or false)."""
    text = str(values[name]).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"--property {name} must be true or false, got {text!r}")
    return text == "true"


def reader_gone(out: TextIO) -> int:
    """The reader of our output went away (``seglog dump-log ... | head -1``): not an
    error (docs/cli.md), so status 0. stdout is pointed at /dev/null (the recipe of
    Python's ``signal`` docs) so that the interpreter's final flush of what is still
    buffered does not fail again on the closed pipe."""
    if out is sys.stdout:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_OK


def guarded(name: str, run: Run) -> Run:
    """``run`` with seglog's exit statuses: an expected error (``SeglogError``,
    ``OSError``) becomes one line on stderr and status 2, never a traceback."""

    @functools.wraps(run)
    def wrapper(args: argparse.Namespace, out: TextIO) -> int:
        try:
            return run(args, out)
        except BrokenPipeError:
            return reader_gone(out)
        except (SeglogError, OSError) as e:
            sys.stderr.write(f"seglog {name}: {e}\n")
            return EXIT_USAGE
        except KeyboardInterrupt:
            sys.stderr.write(f"seglog {name}: interrupted\n")
            return EXIT_INTERRUPTED

    return wrapper
