"""Named crash steps: a test hook that kills the process (SIGKILL, no cleanup) at a step,
so a test can see what a crash there leaves on disk or in a bucket. One syntax for every
step, the engine's (``bucket_commit_log.CRASH_STEPS``, ``bucket_maintenance``'s) and the
sink's (``streaming.sink_commit.CRASH_STEPS``, ``BUCKET_CRASH_STEPS``):

``SEGLOG_CRASH_AT=<step>`` or ``<step>@<batch id>``: ``@<batch id>`` limits it to the
sink's commit of that batch (steps outside a sink batch, the engine's, ignore it).
``SEGLOG_CRASH_ONCE=<file>``: crash only if ``<file>`` does not exist yet, creating it
(for processes that inherit the variable for their whole life, as Spark's workers do).

Unset (production), ``crash_point`` reads one environment variable and returns.
"""

from __future__ import annotations

import logging
import os
import signal

from ..storage.storage import LOCAL

__all__ = ["CRASH_ENV", "CRASH_ONCE_ENV", "crash_point"]

logger = logging.getLogger(__name__)

CRASH_ENV = "SEGLOG_CRASH_AT"
CRASH_ONCE_ENV = "SEGLOG_CRASH_ONCE"


def crash_point(step: str, batch_id: int | None = None) -> None:
    """Kill this process at ``step`` (of the sink's batch ``batch_id``) if
    ``SEGLOG_CRASH_AT`` names it (module docstring)."""
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    name, _, at = wanted.partition("@")
    if name != step:
        return
    if at and not at.isdigit():
        raise ValueError(f"{CRASH_ENV}={wanted}: the batch id after @ must be a number")
    if at and batch_id is not None and int(at) != batch_id:
        return
    once = os.environ.get(CRASH_ONCE_ENV)
    if once:
        try:
            LOCAL.open_file(once, "create_new").close()
        except FileExistsError:
            return
    logger.warning("%s=%s: killing process %d at step %s", CRASH_ENV, wanted, os.getpid(), step)
    os.kill(os.getpid(), signal.SIGKILL)
