"""The LogManager's periodic maintenance: due-task bookkeeping and a background thread.

Kafka's LogManager schedules retention (``log.retention.check.interval.ms``), flushing
(``log.flush.scheduler.interval.ms``, each log then honouring its ``flush.ms``), the
recovery-point and log-start-offset checkpoints, and the removal of ``-delete``
directories and ``.deleted`` files; its ReplicaManager adds the high-watermark checkpoint.
seglog runs the same tasks in two ways:

- ``Scheduler.start()``: a daemon thread, for long-lived processes;
- ``Scheduler.run_due()``: one call that runs whatever is due, for short-lived processes
  (a Spark driver committing a micro-batch opens the log dir, appends, runs what is due,
  closes).

A task's failure is logged and reported; it neither stops the other tasks nor the thread,
and the task is tried again after its interval. Time comes from the injected clock
(``monotonic_ms`` for intervals). The last runs are shared by every process using the
same log dirs through each dir's ``seglog-maintenance-checkpoint``
(``read_shared_last_runs`` / ``write_shared_last_runs``).

>>> s = Scheduler(MockClock()); _ = s.add("hello", 1000, lambda now: None)
>>> [r.name for r in s.run_due()]
['hello']
>>> s.run_due()
[]
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..config.config import ManagerConfig
from ..errors import CorruptCheckpointError, KafkaStorageError
from ..log_dirs_api import TaskRun
from ..storage.checkpoint_file import CheckpointFile, CheckpointFormat
from ..storage.file_names import MAINTENANCE_CHECKPOINT
from ..util.clock import SYSTEM_CLOCK, Clock, MockClock  # noqa: F401  (MockClock: doctest)

logger = logging.getLogger(__name__)

RETENTION = "log-retention"
FLUSH = "log-flusher"
RECOVERY_POINT_CHECKPOINT = "recovery-point-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "high-watermark-checkpoint"
DELETE_LOGS = "delete-logs"

# Deletion has no Kafka interval setting (Kafka reschedules it on demand); seglog checks
# for due `-delete` directories and `.deleted` files this often.
DELETE_CHECK_INTERVAL_MS = 5_000
_MAX_WAIT_S = 3600.0  # threading waits overflow on Kafka's "never" (Long.MAX_VALUE)


@dataclass(slots=True)
class MaintenanceTask:
    """A named periodic task. ``run(now_ms)`` gets the wall-clock time in milliseconds."""

    name: str
    interval_ms: int
    run: Callable[[int], object]
    next_due_ms: int = 0  # on the clock's monotonic scale
    last_run_ms: int | None = None  # wall clock, of the last run in any process


class Scheduler:
    """Runs ``MaintenanceTask``s when due. Thread-safe: ``_run_lock`` makes the background
    thread and explicit ``run_due`` calls take turns, so a task never runs twice at once.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK, tasks: Iterable[MaintenanceTask] = ()):
        self.clock = clock
        self._tasks: dict[str, MaintenanceTask] = {}
        self._run_lock = threading.RLock()  # guards _tasks and task execution
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        for t in tasks:
            self.add_task(t)

    @property
    def tasks(self) -> tuple[MaintenanceTask, ...]:
        with self._run_lock:
            return tuple(self._tasks.values())

    def add(
        self,
        name: str,
        interval_ms: int,
        run: Callable[[int], object],
        *,
        initial_delay_ms: int = 0,
    ) -> MaintenanceTask:
        """Schedule ``run`` every ``interval_ms``, first after ``initial_delay_ms``."""
        task = MaintenanceTask(name, interval_ms, run, self.clock.monotonic_ms() + initial_delay_ms)
        self.add_task(task)
        return task

    def add_task(self, task: MaintenanceTask) -> None:
        if task.interval_ms <= 0:
            raise ValueError(
                f"task {task.name!r}: interval must be positive, got {task.interval_ms}"
            )
        with self._run_lock:
            if task.name in self._tasks:
                raise ValueError(f"a task named {task.name!r} is already scheduled")
            self._tasks[task.name] = task
        self._wake.set()

    def remove(self, name: str) -> None:
        with self._run_lock:
            self._tasks.pop(name, None)

    def run_due(
        self,
        now_ms: int | None = None,
        *,
        before_task: Callable[[str, int, int], None] | None = None,
    ) -> list[TaskRun]:
        """Run every task due at ``now_ms`` (monotonic; default: the clock's now), in the
        order they were added. Returns what each did; failures are logged, not raised.
        ``before_task(name, index, count)`` is called before each (progress display)."""
        with self._run_lock:
            now = self.clock.monotonic_ms() if now_ms is None else now_ms
            due = [t for t in self._tasks.values() if t.next_due_ms <= now]
            return self._run_each(due, now, before_task)

    def run_all(
        self, *, before_task: Callable[[str, int, int], None] | None = None
    ) -> list[TaskRun]:
        """Run every task now, due or not (e.g. before a clean shutdown)."""
        with self._run_lock:
            now = self.clock.monotonic_ms()
            return self._run_each(list(self._tasks.values()), now, before_task)

    def _run_each(
        self,
        tasks: list[MaintenanceTask],
        now: int,
        before_task: Callable[[str, int, int], None] | None,
    ) -> list[TaskRun]:
        runs = []
        for i, t in enumerate(tasks):
            if before_task is not None:
                before_task(t.name, i, len(tasks))
            runs.append(self._run(t, now))
        return runs

    def next_due_ms(self) -> int | None:
        with self._run_lock:
            return min((t.next_due_ms for t in self._tasks.values()), default=None)

    def last_runs(self) -> dict[str, int]:
        """Wall-clock time of each task's last run (what ``restore`` takes back)."""
        with self._run_lock:
            return {
                t.name: t.last_run_ms for t in self._tasks.values() if t.last_run_ms is not None
            }

    def restore(self, last_runs: Mapping[str, int]) -> None:
        """Reschedule tasks from the wall-clock times they last ran, possibly in another
        process: a short-lived process then runs a task only when its interval has
        passed since anyone ran it, not every time it starts."""
        now_wall, now = self.clock.milliseconds(), self.clock.monotonic_ms()
        with self._run_lock:
            for name, last in last_runs.items():
                task = self._tasks.get(name)
                if task is None:
                    continue
                task.last_run_ms = last
                # a clock that went backwards must not postpone a task beyond one interval
                wait = min(max(last + task.interval_ms - now_wall, 0), task.interval_ms)
                task.next_due_ms = max(task.next_due_ms, now + wait)
        self._wake.set()

    def _run(self, task: MaintenanceTask, now: int) -> TaskRun:
        task.last_run_ms = self.clock.milliseconds()
        try:
            result = task.run(task.last_run_ms)
            run = TaskRun(task.name, result)
        except Exception as e:  # one task's failure must not stop the others
            logger.exception(
                "maintenance task %r failed; it will be retried in %d ms",
                task.name,
                task.interval_ms,
            )
            run = TaskRun(task.name, error=e)
        task.next_due_ms = now + task.interval_ms
        return run

    # -- background thread ---------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, name: str = "seglog-scheduler") -> None:
        """Run due tasks on a daemon thread until ``stop()``."""
        if self.running:
            return
        self._stopping = False
        self._wake.clear()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Make the thread look at the clock again (after a task was added, or after a
        test moved a MockClock)."""
        self._wake.set()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the thread after the task it is running, if any (idempotent)."""
        thread = self._thread
        if thread is None:
            return
        self._stopping = True
        self._wake.set()
        thread.join(timeout_s)
        if thread.is_alive():
            logger.warning("scheduler thread %s did not stop within %.0f s", thread.name, timeout_s)
        else:
            self._thread = None

    def _loop(self) -> None:
        while not self._stopping:
            try:
                self.run_due()
                nxt = self.next_due_ms()
                wait_ms = _MAX_WAIT_S * 1000 if nxt is None else nxt - self.clock.monotonic_ms()
            except Exception:  # the thread must survive anything a task's bookkeeping does
                logger.exception("scheduler loop error")
                wait_ms = 1000
            if wait_ms > 0:
                self._wake.wait(min(wait_ms / 1000, _MAX_WAIT_S))
            self._wake.clear()


def standard_tasks(
    config: ManagerConfig,
    *,
    retention: Callable[[int], object],
    flush: Callable[[int], object],
    checkpoint_recovery_points: Callable[[int], object],
    checkpoint_log_start_offsets: Callable[[int], object],
    checkpoint_high_watermarks: Callable[[int], object],
    delete_logs: Callable[[int], object],
    initial_delay_ms: int = 0,
    now_ms: int = 0,
) -> list[MaintenanceTask]:
    """Kafka's LogManager tasks (plus ReplicaManager's high-watermark checkpoint) with
    their intervals from ``config``. Order matters within one ``run_due``: retention
    before the checkpoints (they then record the new start offsets), flush before the
    high-watermark checkpoint (which publishes only flushed data anyway)."""
    due = now_ms + initial_delay_ms
    return [
        MaintenanceTask(RETENTION, config.log_retention_check_interval_ms, retention, due),
        MaintenanceTask(FLUSH, config.log_flush_scheduler_interval_ms, flush, due),
        MaintenanceTask(
            HIGH_WATERMARK_CHECKPOINT,
            config.replica_high_watermark_checkpoint_interval_ms,
            checkpoint_high_watermarks,
            due,
        ),
        MaintenanceTask(
            RECOVERY_POINT_CHECKPOINT,
            config.log_flush_offset_checkpoint_interval_ms,
            checkpoint_recovery_points,
            due,
        ),
        MaintenanceTask(
            LOG_START_OFFSET_CHECKPOINT,
            config.log_flush_start_offset_checkpoint_interval_ms,
            checkpoint_log_start_offsets,
            due,
        ),
        MaintenanceTask(DELETE_LOGS, DELETE_CHECK_INTERVAL_MS, delete_logs, due),
    ]


def _parse_last_run(line: str) -> tuple[str, int]:
    name, sep, ms = line.partition(" ")
    if not sep or not name:
        raise ValueError("expected 'task milliseconds'")
    return name, int(ms)


_LAST_RUNS_FORMAT: CheckpointFormat[tuple[str, int]] = CheckpointFormat(
    lambda e: f"{e[0]} {e[1]}", _parse_last_run
)


def last_runs_file(log_dir: Path) -> CheckpointFile[tuple[str, int]]:
    """The ``seglog-maintenance-checkpoint`` of ``log_dir`` (``task milliseconds`` lines)."""
    return CheckpointFile(log_dir / MAINTENANCE_CHECKPOINT, _LAST_RUNS_FORMAT)


def read_shared_last_runs(dirs: Iterable[Path]) -> dict[str, int]:
    """Per task, its oldest last run over ``dirs`` (wall-clock ms; a task unknown to one
    dir is due, and so is every task when one dir's file is unreadable)."""
    per_dir = []
    for d in dirs:
        try:
            per_dir.append(dict(last_runs_file(d).read()))
        except (CorruptCheckpointError, KafkaStorageError) as e:
            logger.warning("%s; every maintenance task is due", e)
            return {}
    names = set.intersection(*(set(d) for d in per_dir)) if per_dir else set()
    return {n: min(d[n] for d in per_dir) for n in names}


def write_shared_last_runs(dirs: Iterable[Path], runs: Mapping[str, int]) -> bool:
    """Record ``runs`` in every dir; a failure is logged (it only costs an early rerun).
    True when every dir's file was written."""
    entries = sorted(runs.items())
    written = True
    for d in dirs:
        try:
            last_runs_file(d).write(entries)
        except KafkaStorageError as e:
            logger.warning("%s", e)
            written = False
    return written
