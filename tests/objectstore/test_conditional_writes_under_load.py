"""Every S3 server the suite uses keeps the promise seglog's commits stand on, with the CPU
busy: of several concurrent ``If-None-Match: *`` PUTs of one key exactly one wins, and of
several concurrent ``If-Match: <etag>`` PUTs exactly one wins.

Plain moto 5.2.5 breaks the first under load (two winners, the later object replacing the
earlier); the suite runs it through ``tests/moto_locked.py``. These tests would catch a
server (or a server upgrade) that does not hold it before a concurrency test flakes.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.storage.store_probe import race

WRITERS = 8
MAX_TRIALS = 40
MIN_TRIALS = 4
BUDGET_S = 5.0
"""Trials run until ``MAX_TRIALS`` or ``BUDGET_S`` seconds, whichever comes first (but at
least ``MIN_TRIALS``): a bound on a loaded machine, where one SeaweedFS trial can take a
second."""
BODY = 1 << 20
"""Bodies of 1 MiB: moto hashes a body between its check and its store, and a larger
body widens that window (plain moto lost ~1 trial in 30 with 1-2 MiB)."""
HOGS = 2
_HOG = "while True:\n    pass\n"


@pytest.fixture(params=("bucket_server", "seaweed_server"))
def server_storage(request, monkeypatch) -> ObjectStorage:
    """A fresh bucket on each S3 server of the suite (moto, or what
    ``SEGLOG_TEST_S3_SERVER`` names; SeaweedFS where it installs)."""
    server = request.getfixturevalue(request.param)
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    return ObjectStorage(f"s3://{server.create_bucket()}/race")


@pytest.fixture
def cpu_hogs() -> Iterator[None]:
    """Busy loops in subprocesses for the test's duration: a loaded machine is where a
    check-and-set without a lock shows two winners."""
    hogs = [subprocess.Popen([sys.executable, "-c", _HOG]) for _ in range(HOGS)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _body(trial: int, i: int) -> bytes:
    tag = f"trial-{trial}-writer-{i};".encode()
    return tag * (BODY // len(tag))


def _trials() -> Iterator[int]:
    deadline = time.monotonic() + BUDGET_S
    for trial in range(MAX_TRIALS):
        if trial >= MIN_TRIALS and time.monotonic() > deadline:
            return
        yield trial


@pytest.mark.usefixtures("cpu_hogs")
def test_one_winner_of_racing_creates_under_load(server_storage):
    st = server_storage
    run = uuid.uuid4().hex[:8]
    for trial in _trials():
        key = f"{run}/create-{trial:04d}"
        winners = race(WRITERS, lambda i, trial=trial, key=key: st.create(key, _body(trial, i)))
        assert len(winners) == 1, f"{st.uri}: trial {trial}: creates won by {winners}"
        assert st.read(key) == _body(trial, winners[0])


@pytest.mark.usefixtures("cpu_hogs")
def test_one_winner_of_racing_if_match_puts_under_load(server_storage):
    st = server_storage
    key = f"{uuid.uuid4().hex[:8]}/if-match"
    assert st.create(key, b"start")
    for trial in _trials():
        etag = st.etag(key)
        assert etag
        winners = race(
            WRITERS,
            lambda i, trial=trial, etag=etag: st.replace_if_match(key, _body(trial, i), etag),
        )
        assert len(winners) == 1, f"{st.uri}: trial {trial}: if-match puts won by {winners}"
        assert st.read(key) == _body(trial, winners[0])


def test_if_match_with_a_stale_etag_is_refused(server_storage):
    st = server_storage
    assert st.create("k", b"one")
    stale = st.etag("k")
    assert stale
    assert st.replace_if_match("k", b"two", stale)
    assert not st.replace_if_match("k", b"three", stale)
    assert st.read("k") == b"two"
    assert not st.replace_if_match("missing", b"x", stale)
    assert not st.exists("missing")
