"""Parsing of the option values the source and the sink share.

Spark hands options over as strings (case-insensitively keyed); these turn them into
typed values once, at the edge, and every error names the option and its value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, overload

from seglog.logstore.errors import ConfigError


def parse_log_dirs(opts: Mapping[str, str]) -> tuple[str, ...]:
    """``path`` or ``logDirs`` (comma-separated), exactly one of them, no repeats."""
    if "path" in opts and "logDirs" in opts:
        raise ConfigError("options 'path' and 'logDirs' conflict: give the log dirs once")
    name = "logDirs" if "logDirs" in opts else "path"
    dirs = tuple(d.strip() for d in opts.get(name, "").split(",") if d.strip())
    if not dirs:
        raise ConfigError("option 'path' (or 'logDirs') is required: the seglog log dir(s)")
    if len(set(dirs)) != len(dirs):
        raise ConfigError(f"option {name!r} lists a log dir twice: {opts[name]!r}")
    return dirs


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
