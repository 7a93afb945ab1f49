"""What ``log_check`` needs of the manager it checks: a Protocol both a writer
``log_manager.LogManager`` and a ``log_dirs_reader.LogDirsReader`` satisfy.

Both managers call ``log_check`` (their ``check``), so ``log_check`` cannot import them
without closing an import cycle; it is typed on this leaf module instead. A reader
answers the writer-only calls (the repairs ``check --fix`` makes) with ``ReadOnlyError``;
``log_check`` makes them only when fixing, after ``check_writable``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from ..config.config import LogConfig
from ..records.record_format import TopicPartition
from ..util.clock import Clock
from .log_dirs import LogDir, Partition


class CheckedLog(Protocol):
    """What a check reads of one partition's log (a ``Log`` or a ``LogReader``)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def offsets_contiguous(self) -> bool: ...

    @property
    def config(self) -> LogConfig: ...


class CheckTarget(Protocol):
    """A manager of local log dirs as ``log_check.check_manager`` uses it."""

    @property
    def log_dirs(self) -> list[LogDir]: ...

    @property
    def clock(self) -> Clock: ...

    def check_writable(self) -> None: ...

    def topics(self) -> list[str]: ...

    def partitions(self, topic: str) -> list[int]: ...

    def partitions_in(self, log_dir: LogDir) -> list[Partition[Any]]: ...

    def partition(self, topic: str, partition: int) -> Partition[Any]: ...

    def get_log(self, topic: str, partition: int) -> CheckedLog: ...

    def high_watermarks(self) -> dict[TopicPartition, int]: ...

    def forget_topic_config(self, topic: str) -> None: ...

    # The repairs (writer only)
    def write_checkpoints(self, log_dir: LogDir, names: Iterable[str] = ...) -> None: ...

    def truncate_log(self, topic: str, partition: int, offset: int) -> None: ...

    def rewrite_last_runs(self, log_dir: LogDir) -> None: ...

    def reset_cleaner_checkpoint(self, log_dir: LogDir) -> None: ...
