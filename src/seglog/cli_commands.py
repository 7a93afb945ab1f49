"""The operations commands of ``seglog`` (topics, configs, consume/produce, maintenance,
lag, export, probe-store), registered into ``seglog.cli`` by ``register``. Each lives in
its own small ``cli_*`` module exporting ``COMMANDS``: name → (help, add-arguments, run)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TextIO

from . import (
    cli_admin,
    cli_consume,
    cli_export,
    cli_import,
    cli_lag,
    cli_maintain,
    cli_probe,
    cli_produce,
    cli_repair,
    cli_topics,
)
from .cli_common import guarded

Command = tuple[str, Callable[[argparse.ArgumentParser], None],
                Callable[[argparse.Namespace, TextIO], int]]


def register(commands: dict[str, Command]) -> None:
    """Add every operations command to ``commands`` (``seglog.cli._COMMANDS``)."""
    for module in (cli_topics, cli_admin, cli_produce, cli_consume, cli_maintain, cli_lag,
                   cli_export, cli_import, cli_repair, cli_probe):
        for name, (help_text, add_args, run) in module.COMMANDS.items():
            if name in commands:
                raise ValueError(f"seglog command {name!r} registered twice")
            commands[name] = (help_text, add_args, guarded(name, run))
