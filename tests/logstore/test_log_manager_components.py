"""The writer ``LogManager`` is a composition (issue 24): one base, the
``PartitionTable`` it shares with the reader, and components handed what they need
(``log_manager_maintenance``, ``log_manager_topics``, ``log_manager_check``,
``log_manager_pause``). Real log dirs, real files."""

from __future__ import annotations

from pathlib import Path
from typing import Generic

import pyarrow as pa
import pytest

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.errors import ReadOnlyError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.manager.log_manager_check import CheckHooks
from seglog.logstore.manager.log_manager_maintenance import ManagerMaintenance
from seglog.logstore.manager.log_manager_topics import TopicAdmin
from seglog.logstore.manager.partition_table import PartitionTable
from seglog.logstore.records.record_codec import encode_batches


def test_the_managers_have_one_base_at_most() -> None:
    assert LogManager.__mro__ == (LogManager, PartitionTable, Generic, object)
    assert BucketLogManager.__mro__ == (BucketLogManager, object)


def test_a_component_works_with_what_it_is_handed(tmp_path: Path) -> None:
    """Components built over a manager's table, with a writability check of their own:
    the check is theirs to call (a refusing one stops them before any write), and what
    they do goes through the table (a topic made by one is seen by the manager)."""

    def refuse() -> None:
        raise ReadOnlyError("refused by the test")

    with LogManager([tmp_path]) as mgr:
        maintenance = ManagerMaintenance(mgr, mgr.check_writable)
        TopicAdmin(mgr, maintenance, mgr.check_writable).create_topic("t", 2)
        assert mgr.partitions("t") == [0, 1]
        for value in (b"a", b"b", b"c"):  # three batches: a cut lands between two
            mgr.append("t", 0, encode_batches(pa.array([value])))
        hooks = CheckHooks(mgr, maintenance, refuse)
        with pytest.raises(ReadOnlyError, match="refused by the test"):
            hooks.truncate_log("t", 0, 1)
        assert mgr.get_log("t", 0).log_end_offset == 3
        CheckHooks(mgr, maintenance, mgr.check_writable).truncate_log("t", 0, 1)
        assert mgr.get_log("t", 0).log_end_offset == 1
