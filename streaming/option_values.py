"""Parsing of the option values the source and the sink share.

Spark hands options over as strings (case-insensitively keyed); these turn them into
typed values once, at the edge, and every error names the option and its value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

from seglog.logstore.errors import ConfigError, LogDirError
from seglog.logstore.storage.object_store_config import (
    NO_STORAGE_OPTIONS,
    StorageOptions,
    is_object_uri,
)
from seglog.logstore.storage.storage import LOCAL

STORAGE_PREFIX = "storage."


def parse_log_dirs(opts: Mapping[str, str]) -> tuple[str, ...]:
    """``path`` or ``logDirs`` (comma-separated), or ``paths`` (the JSON array Spark
    passes for ``load(dir1, dir2)``): exactly one of them, no repeats."""
    given = [n for n in ("path", "logDirs", "paths") if n in opts]
    if len(given) > 1:
        raise ConfigError(f"options {' and '.join(repr(g) for g in given)} conflict: give "
                          "the log dirs once")
    name = given[0] if given else "path"
    if name == "paths":
        dirs = _json_paths(opts["paths"])
    else:
        dirs = tuple(d.strip() for d in opts.get(name, "").split(",") if d.strip())
    if not dirs:
        raise ConfigError("option 'path' (or 'logDirs') is required: the seglog log dir(s)")
    if len(set(dirs)) != len(dirs):
        raise ConfigError(f"option {name!r} lists a log dir twice: {opts[name]!r}")
    return dirs


def log_dirs_option(options: Mapping[str, Any]) -> str:
    """Which option named the log dirs (for error messages), given Spark's options."""
    given = {str(k).lower() for k in options}
    return next((n for n in ("logDirs", "paths") if n.lower() in given), "path")


def check_readable_log_dirs(log_dirs: tuple[str, ...], option: str) -> None:
    """The source's check at ``load()``, on the driver: every local log dir is an existing
    directory (a bucket is asked nothing here: its first read says what is wrong).
    Raises LogDirError naming ``option`` and the path."""
    for d in log_dirs:
        if is_object_uri(d):
            continue
        path = Path(d)
        if not LOCAL.exists(path):
            raise LogDirError(f"option {option!r}: log dir {d} does not exist")
        if not LOCAL.is_dir(path):
            raise LogDirError(f"option {option!r}: {d} is a file, not a log directory")


def _json_paths(text: str) -> tuple[str, ...]:
    """Spark's ``paths`` option: ``load("a", "b")`` hands the paths over as a JSON array."""
    try:
        paths = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"malformed JSON for option 'paths' (Spark sets it from "
                          f"load(path, ...)): {e.msg} in {text!r}") from None
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise ConfigError(f"option 'paths' must be a JSON array of log dirs (Spark sets it "
                          f"from load(path, ...)), got {text!r}")
    return tuple(p.strip() for p in paths if p.strip())


def option_bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    if name not in opts:
        return default
    text = opts[name].strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(
            f"invalid value {opts[name]!r} for option {name!r}: expected true or false")
    return text == "true"


def option_int(opts: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    if name not in opts:
        return default
    try:
        return int(opts[name].strip())
    except ValueError:
        raise ConfigError(
            f"invalid value {opts[name]!r} for option {name!r}: expected an integer") from None


@overload
def option_positive_int(opts: Mapping[str, str], name: str, default: int) -> int: ...
@overload
def option_positive_int(opts: Mapping[str, str], name: str,
                        default: None = None) -> int | None: ...
def option_positive_int(opts: Mapping[str, str], name: str,
                        default: int | None = None) -> int | None:
    value = option_int(opts, name, default)
    if name in opts and value is not None and value <= 0:
        raise ConfigError(f"invalid value {opts[name]!r} for option {name!r}: must be positive")
    return value


@overload
def option_non_negative_int(opts: Mapping[str, str], name: str, default: int) -> int: ...
@overload
def option_non_negative_int(opts: Mapping[str, str], name: str,
                            default: None = None) -> int | None: ...
def option_non_negative_int(opts: Mapping[str, str], name: str,
                            default: int | None = None) -> int | None:
    value = option_int(opts, name, default)
    if name in opts and value is not None and value < 0:
        raise ConfigError(
            f"invalid value {opts[name]!r} for option {name!r}: must not be negative")
    return value


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One option as users see it: its name, its default as documented, what it does.

    The parsers match names against these declarations, and ``docs/options.md`` is
    generated from them (``seglog.streaming.option_docs``), so the two cannot drift.
    """

    name: str
    default: str
    doc: str
    mode: Literal["both", "streaming", "batch"] = "both"
    only_because: str = ""
    """Why the option is limited to its ``mode``: what the refusal of it in the other
    kind of query says (each option's own reason, never a generic one)."""


STORAGE_OPTION = OptionSpec(
    "storage.<name>", "", "An object-store option for a bucket `path` (`s3://`, `gs://`, "
    "`az://`): obstore's name, e.g. `storage.aws_endpoint`, `storage.aws_region`, "
    "`storage.aws_access_key_id`, `storage.aws_secret_access_key`, "
    "`storage.aws_allow_http`. It overrides the environment variable of the same meaning "
    "and reaches the driver and every executor with the query, so executors need no "
    "environment. Values are hidden from logs and errors: "
    "[object-storage.md](object-storage.md#options).")


def take_storage_options(key: str, value: object, found: dict[str, str]) -> bool:
    """Collects ``storage.<name>`` into ``found`` (``<name>`` lowercased: Spark lowercases
    option names, and obstore's are lowercase); False for any other option."""
    if not key.lower().startswith(STORAGE_PREFIX):
        return False
    name = key[len(STORAGE_PREFIX):].strip().lower()
    if not name:
        raise ConfigError(f"option {key!r} names no object-store option (storage.<name>, "
                          "e.g. storage.aws_region)")
    if name in found:
        raise ConfigError(f"option {key!r} is given twice")
    found[name] = str(value)
    return True


def storage_options_for(log_dirs: tuple[str, ...], found: dict[str, str],
                        dirs_option: str) -> StorageOptions:
    """The ``storage.*`` options as a value, refused (by name, never by value) unless
    the log dir is a bucket URI: they would be ignored, and a path meant to be a bucket
    would silently be a local directory."""
    if not found:
        return NO_STORAGE_OPTIONS
    if not any(is_object_uri(d) for d in log_dirs):
        names = ", ".join(f"{STORAGE_PREFIX}{n}" for n in sorted(found))
        raise ConfigError(f"options {names} are for an object-store log dir (s3://, gs://, "
                          f"az://...), but option {dirs_option!r} is the local path "
                          f"{', '.join(log_dirs)}")
    return StorageOptions.of(found)
