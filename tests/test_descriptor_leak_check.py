"""The suite's descriptor-leak check (``_no_descriptor_leak`` in ``conftest.py``), run on
planted modules in a child pytest (one run: each costs a process and the suite's
imports): a leak fails its module, garbage that a collection closes does not, and a
previous module's garbage closed meanwhile hides no leak."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")

# Descriptors a module keeps open: reachable (a leak) or only from a reference cycle
# (garbage that a collection closes). gc is off so only the check's collection runs.
_PLANT = """
import gc
import os

gc.disable()


class Cycle:
    def __init__(self, fd):
        self.fd = fd
        self.me = self

    def __del__(self):
        os.close(self.fd)


KEPT = []


def opened(n):
    return [os.open(os.devnull, os.O_RDONLY) for _ in range(n)]
"""


def _run(tmp_path: Path, modules: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text())
    (tmp_path / "plant.py").write_text(_PLANT)
    for name, body in modules.items():
        (tmp_path / f"{name}.py").write_text(f"from plant import *\n\n{body}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            *sorted(f"{n}.py" for n in modules),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="the check reads /proc")
def test_leaks_fail_their_module_and_garbage_does_not(tmp_path: Path) -> None:
    """Four modules in order: ``a`` leaks 20 descriptors; ``b`` leaves 20 to a cycle (its
    collection closes them); ``c`` leaves 10 to a cycle (under the limit: no collection
    at its end); ``d`` leaks 17 and collects, closing c's 10 (a net growth of 7) and still
    fails, with its 17."""
    done = _run(
        tmp_path,
        {
            "test_a_leaks": "def test_leak():\n    KEPT.extend(opened(20))\n",
            "test_b_garbage": "def test_garbage():\n    for fd in opened(20):\n        Cycle(fd)\n",
            "test_c_garbage": "def test_garbage():\n    for fd in opened(10):\n        Cycle(fd)\n",
            "test_d_leaks": "def test_leak():\n    KEPT.extend(opened(17))\n    gc.collect()\n",
        },
    )
    out = done.stdout
    assert "test_a_leaks left 20 more file descriptors open" in out, out
    assert os.devnull in out, out
    assert "test_d_leaks left 17 more file descriptors open" in out, out
    assert "test_b_garbage left" not in out and "test_c_garbage left" not in out, out
    assert done.returncode == 1, out
