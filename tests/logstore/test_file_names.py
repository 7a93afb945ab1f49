from __future__ import annotations

from seglog.logstore.storage import file_names as fn


def test_offset_file_names_are_20_digits():
    assert fn.offset_file_name(42, fn.LOG_SUFFIX) == "00000000000000000042.log"
    assert fn.parse_segment_file_name("00000000000000000042.log") == (42, ".log", "")
    assert fn.parse_segment_file_name("00000000000000000042.index.swap") == (42, ".index", ".swap")
    assert fn.parse_segment_file_name("42.log") is None
    assert fn.parse_segment_file_name("leader-epoch-checkpoint") is None


def test_partition_dir_parses_from_the_last_dash():
    assert fn.parse_partition_dir_name("my-topic.v2-3") == ("my-topic.v2", 3)
    assert fn.parse_partition_dir_name("t-0") == ("t", 0)
    assert fn.parse_partition_dir_name("t-01") is None
    assert fn.parse_partition_dir_name("t-") is None
    assert fn.parse_partition_dir_name("-3") is None
    assert fn.parse_partition_dir_name("notapartition") is None


def test_delete_dirs_are_unique_and_recognised():
    a, b = fn.delete_dir_name("t-x", 1), fn.delete_dir_name("t-x", 1)
    assert a != b and fn.is_delete_dir_name(a)
    assert fn.parse_partition_dir_name(a) is None
    assert not fn.is_delete_dir_name("t-x-1")
