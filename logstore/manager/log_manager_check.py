"""What ``log_check`` uses of a writer ``LogManager`` beyond its everyday API: the writes
its repairs make (offset checkpoints from the logs' state, a log cut after a bad batch,
the shared maintenance checkpoint, an emptied cleaner checkpoint).

``log_check`` works through the manager's public methods only; the ones only a check
needs are here, so the checker's reach into the writer is one short list. ``CheckHooks``
is a component of ``log_manager.LogManager`` (which delegates these methods to it),
handed the manager's partition table, its maintenance and its writability check.
Thread-safety: as ``LogManager``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..log.offset_checkpoints import OFFSET_CHECKPOINTS
from ..storage.checkpoint_file import OffsetCheckpointFile
from ..storage.file_names import CLEANER_OFFSET_CHECKPOINT
from .log_dirs import LogDir
from .log_manager_maintenance import ManagerMaintenance
from .partition_table import PartitionTable
from .scheduler import write_shared_last_runs

if TYPE_CHECKING:
    from ..log.log import Log


class CheckHooks:
    """The writer operations ``log_check`` repairs with; a component of ``LogManager``."""

    def __init__(self, table: PartitionTable[Log], maintenance: ManagerMaintenance,
                 check_writable: Callable[[], None]) -> None:
        self._table = table
        self._maintenance = maintenance
        self._check_writable = check_writable

    def write_checkpoints(self, log_dir: LogDir,
                          names: Iterable[str] = OFFSET_CHECKPOINTS) -> None:
        """Write ``log_dir``'s offset checkpoints from the logs' state (writer only)."""
        self._check_writable()
        for name in names:
            self._maintenance.write_checkpoint(log_dir, name)

    def truncate_log(self, topic: str, partition: int, offset: int) -> None:
        """Cut the partition's log at ``offset`` (``check --fix`` after a bad batch)."""
        self._check_writable()
        log = self._table.get_log(topic, partition)
        with self._table.partition(topic, partition).lock:
            log.truncate_to(offset)

    def rewrite_last_runs(self, log_dir: LogDir) -> None:
        """Write ``log_dir``'s ``seglog-maintenance-checkpoint`` from this writer's
        scheduler (writer only)."""
        self._check_writable()
        write_shared_last_runs([log_dir.path], self._maintenance.scheduler.last_runs())

    def reset_cleaner_checkpoint(self, log_dir: LogDir) -> None:
        """Empty ``log_dir``'s ``cleaner-offset-checkpoint`` (the cleaner re-cleans its
        partitions from their log start) and make the cleaner forget what it read."""
        self._check_writable()
        with self._maintenance.lock:
            OffsetCheckpointFile(log_dir.path / CLEANER_OFFSET_CHECKPOINT).write({})
            self._maintenance.reload_cleaner_checkpoints(log_dir.path)
