#!/usr/bin/env python3
"""One entry point for a fresh machine: builds ``.venv`` when needed, then runs.

    python3 run.py example   # the example pipeline on an embedded local log dir
    python3 run.py test      # the test suite (extra arguments go to pytest)

Dependencies are installed again only when ``pyproject.toml`` changes, and seglog
itself when a source file is added or removed (both are stamped into ``.venv``), so
repeated runs start at once.

seglog is installed in setuptools' *strict* editable mode: a tree of links on
``sys.path`` rather than an import hook, because PySpark finds ``pyspark_seglog`` (and so
``format("seglog")`` with no register call) by listing modules on ``sys.path``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / ".seglog-stamp"
PYTHON = VENV / "bin" / "python"


PACKAGE_DIRS = ("src", "logstore", "streaming", "datasource", "pyspark_seglog")


def _deps_stamp() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()


def _files_stamp() -> str:
    files = sorted(str(p.relative_to(ROOT)) for d in PACKAGE_DIRS for p in (ROOT / d).rglob("*.py"))
    return hashlib.sha256("\n".join(files).encode()).hexdigest()


def _install_seglog(deps: bool) -> None:
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    extra = [] if deps else ["--no-deps"]
    subprocess.run([*pip, *extra, "--config-settings", "editable_mode=strict",
                    "-e", f"{ROOT}[test]"], check=True, cwd=ROOT)


def ensure_env() -> None:
    if sys.version_info < (3, 10):  # noqa: UP036 (run.py may be started by an older python3)
        sys.exit("seglog needs Python 3.10 or newer")
    wanted = f"{_deps_stamp()} {_files_stamp()}"
    have = STAMP.read_text().split() if PYTHON.exists() and STAMP.exists() else []
    if have == wanted.split():
        return
    if len(have) == 2 and have[0] == wanted.split()[0]:
        _install_seglog(deps=False)  # only the set of source files changed
    else:
        print("setting up .venv (first run, or pyproject.toml changed)...", flush=True)
        if not PYTHON.exists():
            venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
        pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
        subprocess.run([*pip, "--upgrade", "pip", "setuptools>=68", "wheel"], check=True)
        _install_seglog(deps=True)
    STAMP.write_text(wanted)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("example", "test"):
        print(__doc__)
        return 2
    ensure_env()
    env = dict(os.environ, PYSPARK_PYTHON=str(PYTHON), PYSPARK_DRIVER_PYTHON=str(PYTHON))
    if argv[0] == "example":
        cmd = [str(PYTHON), str(ROOT / "examples" / "pipeline.py"), *argv[1:]]
    else:
        cmd = [str(PYTHON), "-m", "pytest", *argv[1:]]
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
