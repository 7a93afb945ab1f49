"""The storage seam: the operations every kind of log dir offers, and the POSIX one (its
open files are ``file_handle.FileHandle``s).

A log dir lives either in a filesystem (``PosixStorage``: local disks, or a shared POSIX
filesystem whose locks and renames hold across nodes) or in an object store
(``object_storage.ObjectStorage``: S3 and S3-compatible servers, GCS, Azure, memory).
``Storage`` is what both offer, and what every reader of log dirs, the bucket engine and
the tools use; the local writer (``Log``, ``LogSegment``, the indexes, the checkpoints,
the dir lock) also uses the filesystem-only operations ``PosixStorage`` adds.

Paths: a ``PosixStorage`` takes filesystem paths; an ``ObjectStorage`` takes keys
relative to its root (``PurePosixPath`` or ``str``, ``/``-separated). Engine code joins
them with ``/`` either way.

The contract (also in docs/internals.md, "Storage contract"):

- ``read``/``read_range``/``open_range_reader`` return bytes as last written. A
  ``RangeReader`` reads the one version that existed when it was opened: a file's open fd
  keeps it readable after an unlink or a replace; an object reader checks its ETag, so a
  replaced object is an error, never mixed bytes (the engines never rewrite a data object,
  and delete one only ``file.delete.delay.ms`` after it left the log).
- ``read_range_view`` is ``read_range`` as a read-only ``memoryview``: an object store
  hands over the buffer its answer arrived in (a segment read copies nothing).
- ``write_atomic`` makes the whole new content visible at once, durably, or leaves the old
  content (or absence): a reader never sees part of it.
- ``create`` is ``write_atomic`` only if nothing exists at the path; of any number of
  concurrent creators exactly one gets ``True``, the others ``False``, and the content is
  the winner's, whole. This is the commit primitive of the bucket engine.
- ``list_dir`` shows every path whose ``write_atomic``/``create`` returned before the call
  started (read-after-write and list-after-write consistency; S3, GCS and Azure give both).
- ``list_after(path, start_after)`` is ``list_dir`` restricted to the files (objects)
  whose names sort after ``start_after``, in name order; an object store starts the
  listing there, so "commits after version v" costs the new names, not the history.
- ``delete`` of a missing path is not an error.
- A missing path raises ``FileNotFoundError``; any other failure raises
  ``KafkaStorageError`` naming the path (or URI) and the cause.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from ..errors import KafkaStorageError
from .file_handle import FileHandle

logger = logging.getLogger(__name__)

StoragePath = str | os.PathLike[str]


@dataclass(frozen=True)
class Entry:
    """One name in a listed directory (or under a key prefix)."""

    name: str
    size: int
    mtime_ms: int
    is_dir: bool = False


@dataclass(frozen=True, slots=True)
class DirItem:
    """One entry of a filesystem directory as ``PosixStorage.scan_dir`` lists it; a
    symlink is neither a directory nor a file here. ``inode``: the entry's inode number,
    from the listing itself (no ``stat``): a directory replaced under the same name has
    another one while the old directory exists."""

    name: str
    path: str
    is_dir: bool
    is_file: bool
    inode: int = 0


@runtime_checkable
class RangeReader(Protocol):
    """One file or object, opened for positioned reads of the version seen at open."""

    @property
    def size(self) -> int: ...

    def pread(self, position: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``position`` (fewer only at the end)."""

    def close(self) -> None: ...


@runtime_checkable
class Storage(Protocol):
    """What every log dir offers; see the module docstring for the contract."""

    @property
    def uri(self) -> str:
        """Where this storage is rooted, for messages (a path or ``s3://bucket/prefix``)."""

    def read(self, path: StoragePath) -> bytes: ...

    def read_range(self, path: StoragePath, position: int, length: int) -> bytes: ...

    def read_range_view(self, path: StoragePath, position: int, length: int) -> memoryview:
        """``read_range``'s bytes, read-only, without a copy where the backend can."""

    def open_range_reader(self, path: StoragePath) -> RangeReader: ...

    def size(self, path: StoragePath) -> int: ...

    def exists(self, path: StoragePath) -> bool: ...

    def list_dir(self, path: StoragePath) -> list[Entry]:
        """Direct children of ``path`` (names, not paths), in name order; ``[]`` when
        nothing is there."""

    def list_after(self, path: StoragePath, start_after: str) -> list[Entry]:
        """Files directly in ``path`` named after ``start_after`` (``""``: all), in name
        order."""

    def list_tree(self, path: StoragePath) -> list[Entry]:
        """Every file under ``path`` at any depth, named by its path below ``path``
        (``a/b/c.log``), in name order: one flat listing (paged requests on a bucket,
        never one per directory)."""

    def write_atomic(self, path: StoragePath, data: bytes | bytearray | memoryview) -> None: ...

    def create(self, path: StoragePath, data: bytes | bytearray | memoryview) -> bool: ...

    def delete(self, path: StoragePath) -> None: ...


FileMode = Literal["read", "read_write", "append_read", "append", "append_existing",
                   "create_new", "exclusive", "truncate"]
"""How ``PosixStorage.open_file`` opens a file: the ``O_`` flags and creation mode each
user of a local log dir has always used.

* ``read``: ``O_RDONLY`` (readers, ``open_range_reader``);
* ``read_write``: ``O_RDWR | O_CREAT``, 0o644 (an index the writer maps; the ``.lock``);
  not ``O_APPEND``: ``pwrite`` and an emulated ``posix_fallocate`` need real offsets;
* ``append_read``: ``O_RDWR | O_CREAT | O_APPEND``, 0o666 (a writer's ``.log``: what
  ``open(path, "a+b")`` asks for);
* ``append``: ``O_WRONLY | O_CREAT | O_APPEND``, 0o644 (a ``.txnindex``);
* ``append_existing``: ``O_WRONLY | O_APPEND`` (the cleaner's ``.cleaned`` segment, which
  must exist);
* ``create_new``: ``O_WRONLY | O_CREAT | O_EXCL``, 0o644 (sink fragments and markers: the
  file must not exist yet);
* ``exclusive``: ``O_WRONLY | O_CREAT | O_EXCL``, 0o666 (a sink's staging file: what
  ``open(path, "xb")`` asks for);
* ``truncate``: ``O_WRONLY | O_CREAT | O_TRUNC``, 0o666 (a rebuilt ``.txnindex`` written
  whole before its rename: what ``open(path, "wb")`` asks for).
"""

_OPEN_FLAGS: dict[str, tuple[int, int]] = {
    "read": (os.O_RDONLY, 0),
    "read_write": (os.O_RDWR | os.O_CREAT, 0o644),
    "append_read": (os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666),
    "append": (os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
    "append_existing": (os.O_WRONLY | os.O_APPEND, 0),
    "create_new": (os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644),
    "exclusive": (os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666),
    "truncate": (os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666),
}


class BytesRangeReader:
    """A ``RangeReader`` over bytes already in memory (an index read whole from an object
    store, or an absent index read as empty)."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes | bytearray | memoryview = b"") -> None:
        self._data = bytes(data)

    @property
    def size(self) -> int:
        return len(self._data)

    def pread(self, position: int, length: int) -> bytes:
        return self._data[position:position + length]

    def close(self) -> None:
        self._data = b""


def fsync_dir(path: StoragePath) -> None:
    """Makes a directory's entries (a create, rename or unlink in it) durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_fsynced(path: str, data: bytes | bytearray | memoryview, flags: int) -> None:
    _write_whole(path, data, flags, fsync=True)


def _write_whole(path: str, data: bytes | bytearray | memoryview, flags: int, *,
                 fsync: bool = False) -> None:
    fd = os.open(path, flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


class PosixStorage:
    """A filesystem: today's behaviour of every local log dir.

    Besides ``Storage`` it offers what only a filesystem has, which the local writer
    (``Log``, ``LogSegment``, the indexes, the dir lock, the cleaner, the sink's staging)
    is built on: open files (``open_file`` -> ``FileHandle``: append, ``pread``, ``fsync``,
    ``ftruncate``, ``posix_fallocate``, memory maps, ``fcntl`` locks), ``rename``,
    directories (``makedirs``, ``rmtree``, ``fsync_dir``, names-only listing) and
    metadata (``stat``). Every call is the one system call it names, so the engine's
    syscalls, flags and fsyncs are what they were before the seam. Stateless and
    thread-safe; ``LOCAL`` is the instance the engine uses.
    """

    def __init__(self, root: StoragePath = "/") -> None:
        self._root = Path(root)

    @property
    def uri(self) -> str:
        return str(self._root)

    # -- Storage ----------------------------------------------------------------------------

    def read(self, path: StoragePath) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def read_range(self, path: StoragePath, position: int, length: int) -> bytes:
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.pread(fd, length, position)
        finally:
            os.close(fd)

    def read_range_view(self, path: StoragePath, position: int, length: int) -> memoryview:
        return memoryview(self.read_range(path, position, length))

    def open_range_reader(self, path: StoragePath) -> FileHandle:
        return self.open_file(path, "read")

    def size(self, path: StoragePath) -> int:
        return os.stat(path).st_size

    def exists(self, path: StoragePath) -> bool:
        return os.path.exists(path)

    def list_dir(self, path: StoragePath) -> list[Entry]:
        try:
            with os.scandir(path) as it:
                entries = []
                for e in it:
                    try:
                        st = e.stat()
                    except FileNotFoundError:  # removed between listing and stat
                        continue
                    entries.append(Entry(e.name, st.st_size, st.st_mtime_ns // 1_000_000,
                                         e.is_dir()))
        except FileNotFoundError:
            return []
        entries.sort(key=lambda e: e.name)
        return entries

    def list_after(self, path: StoragePath, start_after: str) -> list[Entry]:
        return [e for e in self.list_dir(path) if not e.is_dir and e.name > start_after]

    def list_tree(self, path: StoragePath) -> list[Entry]:
        root = os.fspath(path)
        out = []
        for d, _dirs, files in os.walk(root):
            rel = os.path.relpath(d, root)
            for f in files:
                name = f if rel == "." else f"{rel}/{f}".replace(os.sep, "/")
                try:
                    st = os.stat(os.path.join(d, f))
                except FileNotFoundError:  # removed while walking
                    continue
                out.append(Entry(name, st.st_size, st.st_mtime_ns // 1_000_000))
        out.sort(key=lambda e: e.name)
        return out

    def write_atomic(self, path: StoragePath, data: bytes | bytearray | memoryview) -> None:
        """``<path>.tmp`` written and fsynced, renamed over ``path``, the directory fsynced:
        a crash leaves the old content or the new. A failure removes the ``.tmp`` and
        raises ``KafkaStorageError`` naming ``path``."""
        self._replace(path, data, durable=True)

    def write_atomic_unsynced(self, path: StoragePath,
                              data: bytes | bytearray | memoryview) -> None:
        """``write_atomic`` without its two fsyncs: a concurrent reader still sees the old
        content or the new, but after a power cut the file may be missing, the old one,
        or the new name with part of its bytes. Only for a file whose mere existence is
        the message and whose absence costs time, never correctness (the paused writer's
        ``.kafka_cleanshutdown``)."""
        self._replace(path, data, durable=False)

    def _replace(self, path: StoragePath, data: bytes | bytearray | memoryview, *,
                 durable: bool) -> None:
        target = os.fspath(path)
        tmp = f"{target}.tmp"
        try:
            _write_whole(tmp, data, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, fsync=durable)
            os.replace(tmp, target)
            if durable:
                fsync_dir(os.path.dirname(target) or ".")
        except OSError as e:
            try:  # a failed replace (e.g. a directory in the way) must not leave the .tmp
                os.unlink(tmp)
            except FileNotFoundError:
                logger.debug("no %s to remove: never created, or already renamed", tmp)
            except OSError as cleanup:
                logger.warning("cannot remove %s: %s", tmp, cleanup)
            raise KafkaStorageError(f"cannot write {target}: {e}") from e

    def create(self, path: StoragePath, data: bytes | bytearray | memoryview) -> bool:
        # Written whole under a unique name, then hard-linked: link(2) fails with EEXIST
        # atomically, so a reader never sees a partial file and exactly one creator wins.
        target = os.fspath(path)
        tmp = f"{target}.{uuid.uuid4().hex}.tmp"
        _write_fsynced(tmp, data, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
        except OSError as e:
            if e.errno == errno.EEXIST:
                return False
            raise KafkaStorageError(f"cannot create {target}: {e}") from e
        finally:
            os.unlink(tmp)
        fsync_dir(os.path.dirname(target) or ".")
        return True

    def delete(self, path: StoragePath) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return

    # -- files (filesystem only) -------------------------------------------------------------

    def open_file(self, path: StoragePath, mode: FileMode) -> FileHandle:
        """``path`` opened with the flags of ``mode`` (see ``FileMode``); ``OSError`` as
        ``os.open`` raises it."""
        flags, perm = _OPEN_FLAGS[mode]
        target = os.fspath(path)
        return FileHandle(target, os.open(target, flags, perm) if perm else os.open(target, flags))

    def fsync_file(self, path: StoragePath) -> None:
        """fsync a file by name (one it did not write through a handle it kept)."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def fsync_dir(self, path: StoragePath) -> None:
        fsync_dir(path)

    def rename(self, source: StoragePath, target: StoragePath) -> None:
        """``rename(2)``: atomic, replaces a file at ``target``; durable once the
        directory is fsynced. Open handles keep working."""
        os.replace(source, target)

    def unlink(self, path: StoragePath) -> None:
        """``unlink(2)``; unlike ``delete``, a missing file raises ``FileNotFoundError``."""
        os.unlink(path)

    def link(self, source: StoragePath, target: StoragePath) -> None:
        os.link(source, target)

    def stat(self, path: StoragePath) -> os.stat_result:
        return os.stat(path)

    def lstat(self, path: StoragePath) -> os.stat_result:
        return os.lstat(path)

    def is_dir(self, path: StoragePath) -> bool:
        return os.path.isdir(path)

    def is_file(self, path: StoragePath) -> bool:
        return os.path.isfile(path)

    def is_link(self, path: StoragePath) -> bool:
        return os.path.islink(path)

    def lexists(self, path: StoragePath) -> bool:
        """True when a name exists, even a symlink to nothing."""
        return os.path.lexists(path)

    def resolve(self, path: StoragePath) -> Path:
        """The absolute path with symlinks resolved (``realpath``)."""
        return Path(path).resolve()

    def accessible(self, path: StoragePath, *, read: bool = True, write: bool = False) -> bool:
        """A directory this process may search, and read and/or write as asked
        (``access(2)``: it also refuses root on a read-only mount)."""
        return os.access(path, os.X_OK | (os.R_OK if read else 0) | (os.W_OK if write else 0))

    def set_mtime(self, path: StoragePath, mtime_ns: int) -> None:
        os.utime(path, ns=(mtime_ns, mtime_ns))

    # -- directories (filesystem only) -------------------------------------------------------

    def list_names(self, path: StoragePath) -> list[str]:
        """The names in a directory, unsorted (one ``listdir``: no ``stat`` per entry)."""
        return os.listdir(path)

    def scan_dir(self, path: StoragePath) -> list[DirItem]:
        """A directory's entries with their types (one ``scandir``: the types come from
        the listing, no ``stat`` per entry), unsorted."""
        with os.scandir(path) as it:
            return [DirItem(e.name, e.path, e.is_dir(follow_symlinks=False),
                            e.is_file(follow_symlinks=False), e.inode()) for e in it]

    def makedirs(self, path: StoragePath, *, exist_ok: bool = True) -> None:
        os.makedirs(path, exist_ok=exist_ok)

    def mkdir(self, path: StoragePath) -> None:
        """One directory; ``FileExistsError`` if it exists."""
        os.mkdir(path)

    def rmdir(self, path: StoragePath) -> None:
        os.rmdir(path)

    def rmtree(self, path: StoragePath, *, ignore_errors: bool = False) -> None:
        shutil.rmtree(path, ignore_errors=ignore_errors)

    def temp_root(self) -> Path:
        """The system's temp dir (``TMPDIR``...), for state shared by the processes of a
        machine (``kernel_cache``'s compile locks and markers)."""
        return Path(tempfile.gettempdir())

    def touch(self, path: StoragePath) -> None:
        """Create ``path`` empty, or set its mtime to now."""
        Path(path).touch()

    @contextlib.contextmanager
    def temp_dir(self, prefix: str) -> Iterator[Path]:
        """A new private directory (in the system's temp dir), removed with everything in
        it on exit: scratch space, e.g. for a bucket compaction's cleaned segments."""
        with tempfile.TemporaryDirectory(prefix=prefix) as path:
            yield Path(path)

    def walk_files(self, path: StoragePath) -> Iterator[str]:
        """Every file below ``path``, as paths relative to it, sorted."""
        base = os.fspath(path)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                yield os.path.relpath(os.path.join(dirpath, name), base)


LOCAL = PosixStorage()
"""The filesystem every local log dir lives in (paths are absolute or relative to the
working directory, as ``os`` takes them)."""


def read_small_file(path: Path, what: str) -> bytes | None:
    """A small local metadata file's bytes (a topic's config, its ``partition.metadata``);
    None when it does not exist: an optional file. Any other failure is
    KafkaStorageError naming ``what`` and the path."""
    try:
        return LOCAL.read(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise KafkaStorageError(f"cannot read {what}{path}: {e}") from e
