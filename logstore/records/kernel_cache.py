"""Compile each numba kernel once per machine, and start early when a query is planned.

numba compiles a ``cache=True`` kernel in the first process that calls it and stores the
result in its disk cache; every later process loads it in milliseconds. Without
``python -m seglog.warmup`` that first process is a Spark task, and when several tasks
of a node start together each one compiles the same kernel (seconds of CPU each, on
cores the tasks need). Two things here shorten it:

- ``first_call``: a process's first call of a kernel runs under a per-kernel file lock
  shared by every process of this user on this machine, so one compiles and the others
  wait, then load from the cache. Each kernel gets its own lock, so different kernels
  still compile in parallel. A process that did the first call leaves a marker.
- ``prewarm``: the driver's planning (``reader()``, ``writer()``) starts a detached
  ``python -m seglog.warmup --kernels read|write`` when a kernel the query's tasks call
  has no marker yet, so that the compile runs while Spark schedules the tasks and
  starts their Python workers; a task then waits on the lock for the rest of it.

Markers live in ``$TMPDIR/seglog-<uid>/``, keyed by the kernel modules' files, the
Python version and ``NUMBA_CACHE_DIR``: a changed kernel or cache location gets a new key.
A marker says "loaded or compiled once here": it is a hint for ``prewarm`` only, never a
reason to skip numba's own cache check. ``SEGLOG_PREWARM=0`` turns ``prewarm`` off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from ..storage.storage import LOCAL

logger = logging.getLogger(__name__)

__all__ = ["PREWARM_ENV", "QUERY_KERNELS", "first_call", "is_marked", "prewarm"]

PREWARM_ENV = "SEGLOG_PREWARM"

# The kernels a query's tasks call from Python, by the role of the query: a batch or
# streaming read decodes v2 batches (headers only when asked); a write encodes them and
# routes each row by murmur2. Names are "module.function", as in the markers.
QUERY_KERNELS: dict[str, tuple[str, ...]] = {
    "read": ("codec_kernels.decode_v2",),
    "write": ("codec_kernels.plan_v2", "codec_kernels.fill_v2", "partitioner._murmur2_kernel"),
}

_HERE = LOCAL.resolve(__file__).parent
# The sources numba's cache index checks (a kernel's module and the modules whose
# functions and globals it compiles in): a change to any of them makes a new key.
_SOURCES = (
    _HERE / "codec_kernels.py",
    _HERE / "record_format_kernels.py",
    _HERE / "record_format.py",
    _HERE.parents[1] / "streaming" / "partitioner.py",  # logstore/records -> the root
)
# How long a started warm-up keeps others from starting one: far longer than a compile
# takes, short enough that one killed early is started again on a later query.
_STARTED_FOR_S = 300.0
_key: str | None = None
_called: set[str] = set()
# Started warm-ups, kept so that finished ones are reaped (``poll``) rather than left as
# zombies of a long-lived planning process.
_children: list[subprocess.Popen[bytes]] = []


def _state_dir() -> Path:
    d = LOCAL.temp_root() / f"seglog-{os.getuid()}"
    LOCAL.makedirs(d)
    return d


def _cache_key() -> str:
    global _key
    if _key is None:
        h = hashlib.sha256(sys.version.encode())
        h.update(os.environ.get("NUMBA_CACHE_DIR", "").encode())
        for path in _SOURCES:
            st = LOCAL.stat(path)
            h.update(f"{path}:{st.st_mtime_ns}:{st.st_size}".encode())
        _key = h.hexdigest()[:16]
    return _key


def _marker(name: str) -> Path:
    return _state_dir() / f"{name}.{_cache_key()}.warm"


def is_marked(name: str) -> bool:
    """Whether a process on this machine has loaded or compiled kernel ``name``
    (``"module.function"``) of the current sources into numba's cache."""
    return LOCAL.exists(_marker(name))


@contextmanager
def _kernel_lock(name: str) -> Iterator[None]:
    with ExitStack() as stack:
        try:
            f = stack.enter_context(LOCAL.open_file(_state_dir() / f"{name}.lock", "append"))
            f.wait_for_exclusive_lock()  # released by closing the file
        except OSError as e:
            # An unwritable temp dir costs only the sharing: the kernel still runs.
            logger.warning("no compile lock for %s (%s): this process compiles it alone", name, e)
        yield


def first_call(name: str, kernel: Callable[..., Any], *args: Any) -> Any:
    """``kernel(*args)``; the first time in this process under ``name``'s machine-wide
    lock, so that only one process compiles it and the rest load it from the cache."""
    if name in _called:
        return kernel(*args)
    with _kernel_lock(name):
        result = kernel(*args)
        _called.add(name)
        try:
            LOCAL.touch(_marker(name))
        except OSError as e:
            logger.warning("could not mark %s as compiled (%s)", name, e)
    return result


def prewarm(role: str) -> bool:
    """Start compiling the kernels a ``role`` (``"read"``/``"write"``) query's tasks
    call, in a detached process, unless every one is marked or ``SEGLOG_PREWARM=0``.
    Returns whether a process was started. Never raises: a failure to start only logs."""
    if os.environ.get(PREWARM_ENV, "1").strip() == "0":
        return False
    try:
        _children[:] = [c for c in _children if c.poll() is None]
        if _children or all(is_marked(name) for name in QUERY_KERNELS[role]):
            return False
        # Spark plans a query in several short-lived processes (schema, then reader):
        # the first starts the warm-up, the next ones see it started.
        started = _state_dir() / f"{role}.{_cache_key()}.started"
        if LOCAL.exists(started) and time.time() - LOCAL.stat(started).st_mtime < _STARTED_FOR_S:
            return False
        LOCAL.touch(started)
        command = [sys.executable, "-m", "seglog.warmup", "--kernels", role]
        _children.append(
            subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    except OSError as e:
        logger.warning(
            "could not start the numba kernel warm-up (%s); the first task "
            "compiles the kernels itself",
            e,
        )
        return False
    logger.info("compiling numba kernels for the first %s in the background", role)
    return True
