"""The Storage contract (logstore/storage/storage.py's docstring), clause by clause, over every
backend: posix, memory and S3 (moto)."""

from __future__ import annotations

import threading

import pytest

from seglog.logstore.errors import KafkaStorageError
from seglog.logstore.storage.storage import RangeReader, Storage


def test_every_backend_is_a_storage(storage):
    assert isinstance(storage.storage, Storage)
    assert storage.storage.uri.rstrip("/") == storage.location.rstrip("/")


# Clause: read/read_range/open_range_reader return bytes as last written.
def test_reads_return_the_bytes_last_written(storage):
    st, d = storage.storage, storage.makedirs("t-0")
    path = f"{d}/00000000000000000000.log"
    st.write_atomic(path, b"first version")
    data = bytes(range(256)) * 40
    st.write_atomic(path, data)
    assert st.read(path) == data
    assert st.size(path) == len(data)
    assert st.exists(path)
    assert st.read_range(path, 1000, 300) == data[1000:1300]
    assert st.read_range(path, len(data) - 5, 100) == data[-5:]  # fewer only at the end
    assert st.read_range(path, len(data), 10) == b""
    assert st.read_range(path, len(data) + 10, 10) == b""
    assert st.read_range(path, 0, 0) == b""
    view = st.read_range_view(path, 1000, 300)
    assert isinstance(view, memoryview) and view.readonly and view == data[1000:1300]
    assert st.read_range_view(path, len(data) - 5, 100) == data[-5:]
    assert st.read_range_view(path, len(data), 10) == b""
    reader = st.open_range_reader(path)
    try:
        assert isinstance(reader, RangeReader)
        assert reader.size == len(data)
        assert reader.pread(0, 16) == data[:16]
        assert reader.pread(len(data) - 3, 16) == data[-3:]
        assert reader.pread(len(data), 16) == b""
    finally:
        reader.close()


def test_an_empty_object_reads_as_empty(storage):
    st = storage.storage
    path = storage.path("empty")
    st.write_atomic(path, b"")
    assert st.read(path) == b""
    assert st.size(path) == 0
    assert st.read_range(path, 0, 10) == b""


# Clause: a RangeReader reads the one version that existed when it was opened. After a
# replace or a delete a file's open fd keeps the old bytes; an object reader raises, never
# returns wrong bytes (engines delete data objects only file.delete.delay.ms after they
# left the log, so readers finish first).
@pytest.mark.parametrize(("change", "error", "message"), [
    ("replace", KafkaStorageError, "replaced"), ("delete", FileNotFoundError, "seg.log")])
def test_a_range_reader_keeps_the_version_it_opened(storage, change, error, message):
    st = storage.storage
    path = storage.path("seg.log")
    st.write_atomic(path, b"A" * 1000)
    reader = st.open_range_reader(path)
    try:
        assert reader.pread(0, 10) == b"A" * 10
        if change == "replace":
            st.write_atomic(path, b"B" * 1000)
        else:
            st.delete(path)
        if storage.kind == "posix":
            assert reader.pread(500, 10) == b"A" * 10
        else:
            with pytest.raises(error, match=message):
                reader.pread(500, 10)
    finally:
        reader.close()
    if change == "replace":
        assert st.read(path) == b"B" * 1000
    else:
        assert not st.exists(path)


# Clause: write_atomic makes the whole new content visible at once, or leaves the old.
def test_write_atomic_is_never_seen_in_part(storage):
    st = storage.storage
    path = storage.path("checkpoint")
    versions = [b"a" * 70_000, b"b" * 10, b"c" * 300_000]
    st.write_atomic(path, versions[0])
    seen: list[bytes] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            seen.append(st.read(path))

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(30):
            st.write_atomic(path, versions[i % 3])
    finally:
        done.set()
        t.join()
    assert seen
    assert all(s in versions for s in seen), {len(s) for s in seen}


# Clause: create is write_atomic only if nothing exists (the race: test_conditional_writes).
def test_create_only_if_absent(storage):
    st = storage.storage
    path = storage.path("_commit-1.json")
    assert st.create(path, b'{"v": 1}')
    assert not st.create(path, b'{"v": 2}')
    assert st.read(path) == b'{"v": 1}'


# Clause: list_dir shows every path written before the call, direct children, in order.
def test_list_dir_sees_every_completed_write_in_name_order(storage):
    st = storage.storage
    d = storage.makedirs("t-0")
    storage.makedirs("t-0", "nested")
    names = [f"{i:020d}.log" for i in (30, 2, 11)]
    for n in names:
        st.write_atomic(f"{d}/{n}", b"x" * len(n))
    st.create(f"{d}/nested/inner", b"y")
    listed = st.list_dir(d)
    assert [e.name for e in listed] == sorted([*names, "nested"])
    files = [e for e in listed if not e.is_dir]
    assert all(e.size == 24 and e.mtime_ms > 0 for e in files)
    assert [e.name for e in listed if e.is_dir] == ["nested"]
    assert st.list_dir(storage.path("nothing-here")) == []


def test_list_dir_of_the_root(storage):
    st = storage.storage
    storage.makedirs("t-1")
    st.write_atomic(storage.path("t-1", "a"), b"1")
    st.write_atomic(storage.path("recovery-point-offset-checkpoint"), b"0\n0\n")
    root = storage.location if storage.kind == "posix" else ""
    assert [(e.name, e.is_dir) for e in st.list_dir(root)] == [
        ("recovery-point-offset-checkpoint", False), ("t-1", True)]


# Clause: list_after is list_dir's files after a name.
def test_list_after_lists_files_after_a_name(storage):
    st = storage.storage
    d = storage.makedirs("_seglog", "commits")
    storage.makedirs("_seglog", "commits", "sub")
    for v in range(5):
        st.create(f"{d}/{v:020d}.json", b"{}")
    st.create(f"{d}/sub/{9:020d}.json", b"{}")
    after = st.list_after(d, f"{2:020d}.json")
    assert [e.name for e in after] == [f"{3:020d}.json", f"{4:020d}.json"]
    assert all(e.size == 2 and not e.is_dir for e in after)
    assert [e.name for e in st.list_after(d, "")] == [f"{v:020d}.json" for v in range(5)]
    assert st.list_after(d, f"{4:020d}.json") == []
    assert st.list_after(storage.path("nothing-here"), "") == []


# Clause: list_tree is every file below a path, flat, by relative name.
def test_list_tree_lists_every_file_below_a_path(storage):
    st = storage.storage
    d = storage.makedirs("_seglog", "staging")
    storage.makedirs("_seglog", "staging", "q", "00000000000000000001", "u")
    storage.makedirs("_seglog", "staging", "q", "00000000000000000002", "u")
    storage.makedirs("_seglog", "staging-other")
    for name in ("q/00000000000000000001/u/t-0.1.log", "q/00000000000000000002/u/t-0.1.log",
                 "q/00000000000000000002/u/t-0.1.index", "top"):
        st.write_atomic(f"{d}/{name}", b"abc")
    st.write_atomic(storage.path("_seglog", "staging-other", "x"), b"1")  # a sibling prefix
    listed = st.list_tree(d)
    assert [e.name for e in listed] == [
        "q/00000000000000000001/u/t-0.1.log", "q/00000000000000000002/u/t-0.1.index",
        "q/00000000000000000002/u/t-0.1.log", "top"]
    assert all(e.size == 3 and not e.is_dir and e.mtime_ms > 0 for e in listed)
    assert st.list_tree(storage.path("nothing-here")) == []


# Clause: delete of a missing path is not an error.
def test_delete_of_a_missing_path(storage):
    st = storage.storage
    path = storage.path("gone")
    st.delete(path)
    st.write_atomic(path, b"x")
    st.delete(path)
    st.delete(path)
    assert not st.exists(path)
    assert st.list_dir(storage.location if storage.kind == "posix" else "") == []


# Clause: a missing path raises FileNotFoundError.
def test_a_missing_path_is_file_not_found(storage):
    st = storage.storage
    path = storage.path("missing.log")
    assert not st.exists(path)
    for call in (lambda: st.read(path), lambda: st.read_range(path, 0, 1),
                 lambda: st.size(path), lambda: st.open_range_reader(path)):
        with pytest.raises(FileNotFoundError, match="missing.log"):
            call()
