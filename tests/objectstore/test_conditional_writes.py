"""Create-if-absent really holds under concurrent requests, on every backend: the commit
primitive of the bucket engine. For s3 this checks the server (moto) itself: ``create``
is one ``PUT`` with ``If-None-Match: *``, and only the server can pick one winner."""

from __future__ import annotations

import threading

import pytest

WRITERS = 16
ROUNDS = 8


def _race(storage, key: str) -> list[bool]:
    barrier = threading.Barrier(WRITERS)
    won = [False] * WRITERS
    failures: list[BaseException] = []

    def writer(i: int) -> None:
        # Distinct, sizeable bodies so uploads overlap and a mixed result would show.
        body = f"writer-{i:02d};".encode() * 4096
        try:
            barrier.wait()
            won[i] = storage.create(key, body)
        except BaseException as e:  # reported below, not swallowed
            failures.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    return won


def test_exactly_one_of_16_concurrent_creators_wins(storage):
    st = storage.storage
    for r in range(ROUNDS):
        key = storage.path(f"commit-{r:020d}.json")
        won = _race(st, key)
        assert won.count(True) == 1, f"round {r}: winners {[i for i, w in enumerate(won) if w]}"
        winner = won.index(True)
        assert st.read(key) == f"writer-{winner:02d};".encode() * 4096


def test_create_never_replaces_an_existing_object(storage):
    st = storage.storage
    key = storage.path("once.json")
    assert st.create(key, b"first")
    assert not st.create(key, b"second")
    st.write_atomic(key, b"replaced")
    assert not st.create(key, b"third")
    assert st.read(key) == b"replaced"
    st.delete(key)
    assert st.create(key, b"again")
    assert st.read(key) == b"again"


@pytest.mark.parametrize("body", [b"", b"x"])
def test_create_of_an_empty_or_tiny_object(storage, body):
    key = storage.path("tiny")
    assert storage.storage.create(key, body)
    assert storage.storage.read(key) == body
