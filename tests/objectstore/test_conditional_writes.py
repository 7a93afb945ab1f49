"""Create-if-absent really holds under concurrent requests, on every backend: the commit
primitive of the bucket engine. For s3 this checks the server (moto) itself: ``create``
is one ``PUT`` with ``If-None-Match: *``, and only the server can pick one winner."""

from __future__ import annotations

import pytest

from seglog.logstore.storage.store_probe import race

WRITERS = 16
ROUNDS = 8
SEAWEEDFS_ROUNDS = 1
"""SeaweedFS answers the losers of a contended ``If-None-Match: *`` PUT late, in whole
seconds (each loser is one request, answered 1-7 s after it arrived: the proxy of
``tests/s3_proxy.py`` counts 16 PUTs a round and no retry), so a round there costs ~5 s
where it costs milliseconds elsewhere. One round of 16 overlapping creators here (the
contract's shape on every backend); the repeated races on SeaweedFS are
``test_conditional_writes_under_load.py``'s (at least 4 more rounds of 8 creators, and of
8 ``If-Match`` PUTs, with the CPU busy), so a server with a second winner still fails."""


def _body(i: int) -> bytes:
    # Distinct, sizeable bodies so uploads overlap and a mixed result would show.
    return f"writer-{i:02d};".encode() * 4096


def test_exactly_one_of_16_concurrent_creators_wins(storage):
    st = storage.storage
    for r in range(SEAWEEDFS_ROUNDS if storage.kind == "seaweedfs" else ROUNDS):
        key = storage.path(f"commit-{r:020d}.json")
        winners = race(WRITERS, lambda i, key=key: st.create(key, _body(i)))
        assert len(winners) == 1, f"round {r}: winners {winners}"
        assert st.read(key) == _body(winners[0])


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
