from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from seglog.logstore.errors import LogDirError, LogDirLockedError
from seglog.logstore.manager.dir_lock import DirLock


def _hold_in_child(path, ready_marker):
    """A child process that takes the lock, says so on stdout, and waits for stdin."""
    code = textwrap.dedent(f"""
        import sys
        from seglog.logstore.manager.dir_lock import DirLock
        lock = DirLock({str(path)!r}).acquire()
        print({ready_marker!r}, flush=True)
        sys.stdin.readline()
        lock.release()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == ready_marker
    return proc


def test_lock_release_and_relock(tmp_path):
    lock = DirLock(tmp_path)
    with lock:
        assert lock.locked
        text = (tmp_path / ".lock").read_text()
        assert f"pid={os.getpid()}" in text and f"host={socket.gethostname()}" in text
    assert not lock.locked
    with DirLock(tmp_path):
        pass
    lock.release()  # idempotent


def test_same_process_twice_is_refused(tmp_path):
    with DirLock(tmp_path):
        with pytest.raises(LogDirLockedError) as e:
            DirLock(tmp_path).acquire()
        assert str(tmp_path) in str(e.value) and "this process" in str(e.value)
        # the failed attempt closed its descriptor without dropping our POSIX lock
        proc = subprocess.run(
            [sys.executable, "-c",
             "from seglog.logstore.manager.dir_lock import DirLock; "
             f"DirLock({str(tmp_path)!r}).acquire()"],
            capture_output=True, text=True)
        assert proc.returncode != 0 and "LogDirLockedError" in proc.stderr


def test_the_same_dir_through_a_symlink_is_the_same_lock(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    with DirLock(real), pytest.raises(LogDirLockedError):
        DirLock(tmp_path / "alias").acquire()


def test_another_process_gets_an_error_naming_dir_and_holder(tmp_path):
    proc = _hold_in_child(tmp_path, "locked")
    try:
        with pytest.raises(LogDirLockedError) as e:
            DirLock(tmp_path).acquire()
        msg = str(e.value)
        assert str(tmp_path) in msg and f"pid={proc.pid}" in msg
    finally:
        proc.communicate("go\n", timeout=30)
    # released by the child: we can take it now
    with DirLock(tmp_path):
        pass


def test_a_killed_holder_releases_the_lock(tmp_path):
    proc = _hold_in_child(tmp_path, "locked")
    proc.kill()
    proc.wait(timeout=30)
    proc.stdin.close()
    proc.stdout.close()
    with DirLock(tmp_path) as lock:
        assert f"pid={os.getpid()}" in lock.path.read_text()


def test_a_forked_child_does_not_inherit_the_registry(tmp_path):
    with DirLock(tmp_path):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: the parent's POSIX lock is not ours, so this must fail
            try:
                DirLock(tmp_path).acquire()
                code = b"acquired"
            except LogDirLockedError as e:
                code = b"other" if "another writer" in str(e) else b"same"
            os.write(w, code)
            os._exit(0)
        os.close(w)
        answer = os.read(r, 100)
        os.close(r)
        os.waitpid(pid, 0)
    assert answer == b"other"


def test_unusable_dir_is_a_log_dir_error(tmp_path):
    with pytest.raises(LogDirError, match="missing"):
        DirLock(tmp_path / "missing").acquire()
