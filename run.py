#!/usr/bin/env python3
"""One entry point for a fresh machine: builds ``.venv`` when needed, then runs.

    python3 run.py example   # the example pipeline on an embedded local log dir
    python3 run.py test      # the test suite (extra arguments go to pytest)

Dependencies are installed again only when ``pyproject.toml`` changes (its hash is
stamped into ``.venv``), so repeated runs start at once. Each set-up ends with
``python -m seglog.warmup`` (numba's kernels compiled into its disk cache, so that no
Spark task compiles them).

seglog is installed editable as one ``.pth`` entry for ``src/`` (see README, "Layout"):
a new module works at once, and PySpark finds ``pyspark_seglog`` (so ``format("seglog")``
with no register call) by listing the modules on ``sys.path``.
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


def _deps_stamp() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()


def ensure_env() -> None:
    if sys.version_info < (3, 10):  # noqa: UP036 (run.py may be started by an older python3)
        sys.exit("seglog needs Python 3.10 or newer")
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text().strip() == _deps_stamp():
        return
    print("setting up .venv (first run, or pyproject.toml changed)...", flush=True)
    if not PYTHON.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "--upgrade", "pip", "setuptools>=77", "wheel"], check=True)
    subprocess.run([*pip, "-e", f"{ROOT}[test]"], check=True, cwd=ROOT)
    # Compile the numba kernels now, once, rather than in the first Spark task that needs
    # them (seconds): see src/seglog/warmup.py.
    subprocess.run([str(PYTHON), "-m", "seglog.warmup"], check=True, cwd=ROOT)
    STAMP.write_text(_deps_stamp())


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
