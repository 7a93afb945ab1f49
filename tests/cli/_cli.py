"""Running the ``seglog`` command in tests: in-process (fast, stdout captured, an injected
clock) or as the installed console script in a subprocess (the real entry point)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from seglog.cli import main

SEGLOG = Path(sys.executable).parent / "seglog"


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)

    def json_lines(self) -> list:
        return [json.loads(line) for line in self.out.splitlines()]


def run(capsys, *argv: str) -> Result:
    """``seglog argv`` in this process; stderr through pytest's capsys."""
    capsys.readouterr()
    out = io.StringIO()
    code = main([str(a) for a in argv], out)
    return Result(code, out.getvalue(), capsys.readouterr().err)


def run_process(*argv: str, stdin: bytes | None = None, env: dict | None = None) -> Result:
    """The installed ``seglog`` console script in a subprocess."""
    proc = subprocess.run([str(SEGLOG), *map(str, argv)], input=stdin, capture_output=True,
                          timeout=120, env={**os.environ, **(env or {})})
    return Result(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def one_line_error(result: Result, *words: str) -> None:
    """Exit status 2 and exactly one stderr line, naming each of ``words``."""
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    for w in words:
        assert w in lines[0], (w, lines[0])
