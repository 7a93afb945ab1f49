"""The ``seglog`` command line: the entry point (``seglog.cli:main``).

Subcommands are listed in ``cli_commands.REGISTRY`` (name, help, module); ``seglog
<command> --help`` for each. Only the module of the command being run is imported, and
only its parser gets its arguments: the others are names and help lines for ``seglog
--help``. A metadata command (``topics``, ``describe``, ``get-offsets``, ``lag``) thus
starts without the record codec's numba kernels, Arrow's compute functions or the
object-store client (``tests/test_startup_imports.py``, ``benchmarks/bench_cli_startup.py``).

Exit status: 0 when done (for ``check`` and ``dump-log``: everything read is valid, or
was fixed), 1 when problems were found, 2 on bad usage or input (docs/cli.md).
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from seglog import __version__
from seglog.logstore.errors import ConfigError, SeglogError

from .cli_commands import REGISTRY, Command, load


def _chosen(argv: list[str]) -> str | None:
    """The subcommand named in ``argv``: the top-level options take no value, so it is
    the first word that is not an option (None: none, or not a command)."""
    name = next((a for a in argv if not a.startswith("-")), None)
    return name if name in REGISTRY else None


def _build(
    argv: list[str],
) -> tuple[argparse.ArgumentParser, tuple[argparse.ArgumentParser, Command] | None]:
    """The parser, with the arguments of the command ``argv`` names (if any) and that
    command."""
    parser = argparse.ArgumentParser(prog="seglog", description="seglog tools")
    parser.add_argument("--version", action="version", version=f"seglog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = _chosen(argv)
    found = None
    for name, entry in REGISTRY.items():
        p = sub.add_parser(name, help=entry.help, description=entry.help)
        if name == chosen:
            from .cli_common import add_kafka_compat_args  # the engine: only to run one

            command = load(name)
            command.add_args(p)
            add_kafka_compat_args(p)
            p.set_defaults(run=command.run)
            found = (p, command)
    return parser, found


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv`` (every command's arguments only once it is named)."""
    return _build(argv or [])[0]


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser, found = _build(argv)
    args, unknown = parser.parse_known_args(argv)
    assert found is not None  # argparse exits on a missing or unknown command
    command, spec = found
    if unknown:
        # the subcommand's usage, not the top-level one (argparse's default here)
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    from .cli_common import resolve_kafka_compat_args

    try:
        resolve_kafka_compat_args(args)
        if spec.check_usage is not None:
            spec.check_usage(args)  # e.g. dump-log without files: dump-log's usage
    except ConfigError as e:
        command.error(str(e))
    stream = out or sys.stdout
    try:
        code: int = args.run(args, stream)
        # what is still buffered goes out here, where a closed pipe is handled below,
        # not in the interpreter's exit (status 120 and a warning)
        stream.flush()
        return code
    except BrokenPipeError:
        from .cli_common import reader_gone

        return reader_gone(stream)
    except (SeglogError, OSError) as e:
        sys.stderr.write(f"seglog {args.command}: {e}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
