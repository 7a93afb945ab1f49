"""Every file operation of ``logstore/`` and ``streaming/`` goes through the storage seam
(``logstore/storage/storage.py`` and its open files, ``logstore/storage/file_handle.py``): no
other module opens, reads, writes, syncs, renames, lists, locks, maps or removes a file
itself. Found by reading the source with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEAM = (ROOT / "logstore" / "storage" / "storage.py",
        ROOT / "logstore" / "storage" / "file_handle.py")

_OS_CALLS = frozenset({
    "open", "fdopen", "read", "write", "pread", "pwrite", "preadv", "pwritev", "readv",
    "writev", "close", "closerange", "dup", "dup2", "replace", "rename", "renames", "unlink",
    "remove", "removedirs", "rmdir", "mkdir", "makedirs", "scandir", "listdir", "walk",
    "fwalk", "stat", "lstat", "fstat", "statvfs", "fstatvfs", "fsync", "fdatasync",
    "ftruncate", "truncate", "posix_fallocate", "posix_fadvise", "lseek", "link", "symlink",
    "readlink", "utime", "chmod", "fchmod", "chown", "access", "sendfile", "copy_file_range",
    "mkfifo", "mknod", "lockf", "flock"})
_OS_PATH_CALLS = frozenset({
    "exists", "lexists", "isdir", "isfile", "islink", "ismount", "getsize", "getmtime",
    "getatime", "getctime", "realpath", "samefile"})
_FILE_MODULES = frozenset({"shutil", "mmap", "fcntl", "tempfile", "glob"})
# Imported for its type only (``mmap.mmap`` in an annotation or a type alias) is no file
# operation; a call of it still is.
_TYPE_MODULES = frozenset({"mmap"})
_MODULE_CALLS = {"io": frozenset({"open", "FileIO"}), "np": frozenset({"fromfile", "memmap"}),
                 "numpy": frozenset({"fromfile", "memmap"})}
# Method names only pathlib (or a file object) has: a call of one is file I/O whatever the
# receiver. ``exists``/``is_dir``/``is_file``/``stat``/``resolve`` are included with no
# arguments (Path's form); engine objects do not use these names.
_PATH_METHODS = frozenset({
    "read_bytes", "write_bytes", "read_text", "write_text", "iterdir", "glob", "rglob",
    "mkdir", "rmdir", "unlink", "touch", "chmod", "lchmod", "symlink_to", "hardlink_to",
    "is_symlink", "readlink", "lstat", "samefile", "is_mount", "tofile"})
_PATH_METHODS_NO_ARGS = frozenset({"exists", "is_dir", "is_file", "stat", "resolve"})
# The seam's objects: calls on them are what every module should make.
_SEAM_OWNERS = frozenset({"LOCAL", "fs", "self._fs", "self._fs()", "self._storage", "storage"})


def _under_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING",
                                                                  "typing.TYPE_CHECKING"):
            return True
    return False


def file_operations(source: str) -> list[tuple[int, str]]:
    """(line, what) for every direct file operation in ``source``."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in _FILE_MODULES - _TYPE_MODULES \
                        and not _under_type_checking(node, parents):
                    found.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            names = {a.name for a in node.names}
            if (mod.split(".")[0] in _FILE_MODULES or (mod == "os" and names & _OS_CALLS)
                    or (mod == "os.path" and names & _OS_PATH_CALLS)) \
                    and not _under_type_checking(node, parents):
                found.append((node.lineno, f"from {mod} import {', '.join(sorted(names))}"))
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "open":
                found.append((node.lineno, "open()"))
            elif isinstance(f, ast.Attribute):
                owner = ast.unparse(f.value)
                if owner in _SEAM_OWNERS:
                    continue
                if (owner == "os" and f.attr in _OS_CALLS) \
                        or (owner == "os.path" and f.attr in _OS_PATH_CALLS) \
                        or owner in _FILE_MODULES \
                        or f.attr in _MODULE_CALLS.get(owner, ()) \
                        or f.attr in _PATH_METHODS \
                        or (f.attr in _PATH_METHODS_NO_ARGS and not node.args
                            and not node.keywords):
                    found.append((node.lineno, f"{owner}.{f.attr}()"))
    return sorted(found)


def test_the_scanner_finds_each_kind_of_file_operation():
    src = """
import os, shutil
from os import replace
import mmap
Buffer = bytes | mmap.mmap
mmap.mmap(fd, 0)
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import fcntl
open("x")
os.pread(fd, 1, 0)
os.path.exists("x")
np.fromfile("x")
path.read_bytes()
path.exists()
txn.exists(1)
LOCAL.unlink(p)
os.fspath(p)
os.path.join(a, b)
"""
    assert [what for _line, what in file_operations(src)] == [
        "import shutil", "from os import replace", "mmap.mmap()", "open()", "os.pread()",
        "os.path.exists()", "np.fromfile()", "path.read_bytes()", "path.exists()"]


def test_only_the_storage_seam_touches_files():
    offenders = []
    for folder in ("logstore", "streaming"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path in SEAM:
                continue
            for line, what in file_operations(path.read_text()):
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert offenders == [], ("file operations outside logstore/storage/storage.py and "
                             "file_handle.py (add what is needed to PosixStorage or "
                             "FileHandle):\n" + "\n".join(offenders))
