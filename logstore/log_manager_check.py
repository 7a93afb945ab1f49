"""What ``log_check`` uses of a writer ``LogManager`` beyond its everyday API: the writes
its repairs make (offset checkpoints from the logs' state, a log cut after a bad batch,
the shared maintenance checkpoint, an emptied cleaner checkpoint).

``log_check`` works through the manager's public methods only; the ones only a check
needs are here, so the checker's reach into the writer is one short list. ``CheckHooks``
is a base of ``log_manager.LogManager``. Thread-safety: as ``LogManager``.
"""

from __future__ import annotations

from collections.abc import Iterable

from .checkpoint_file import OffsetCheckpointFile
from .file_names import CLEANER_OFFSET_CHECKPOINT
from .log_dirs import LogDir
from .log_manager_maintenance import ManagerMaintenance
from .offset_checkpoints import OFFSET_CHECKPOINTS
from .scheduler import write_shared_last_runs


class CheckHooks(ManagerMaintenance):
    """The writer operations ``log_check`` repairs with; a base of ``LogManager``."""

    def write_checkpoints(self, log_dir: LogDir,
                          names: Iterable[str] = OFFSET_CHECKPOINTS) -> None:
        """Write ``log_dir``'s offset checkpoints from the logs' state (writer only)."""
        self.check_writable()
        for name in names:
            self._write_checkpoint(log_dir, name)

    def truncate_log(self, topic: str, partition: int, offset: int) -> None:
        """Cut the partition's log at ``offset`` (``check --fix`` after a bad batch)."""
        self.check_writable()
        log = self.get_log(topic, partition)
        with self._partition(topic, partition).lock:
            log.truncate_to(offset)

    def rewrite_last_runs(self, log_dir: LogDir) -> None:
        """Write ``log_dir``'s ``seglog-maintenance-checkpoint`` from this writer's
        scheduler (writer only)."""
        self.check_writable()
        write_shared_last_runs([log_dir.path], self.scheduler.last_runs())

    def reset_cleaner_checkpoint(self, log_dir: LogDir) -> None:
        """Empty ``log_dir``'s ``cleaner-offset-checkpoint`` (the cleaner re-cleans its
        partitions from their log start) and make the cleaner forget what it read."""
        self.check_writable()
        with self._maintenance_lock:
            OffsetCheckpointFile(log_dir.path / CLEANER_OFFSET_CHECKPOINT).write({})
            if self._cleaner is not None:
                self._cleaner.reload_checkpoints(log_dir.path)
