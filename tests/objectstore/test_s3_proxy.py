"""The delay- and fault-injecting proxy (``tests/s3_proxy.py``) in front of the suite's
S3 servers: S3's semantics pass through it intact, it counts requests by kind, delays
each one, and the faults it injects reach the client as errors (or, for a dropped
response, as an error for a request that in fact happened)."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator

import pytest
from s3_proxy import Fault, RequestRecord, S3Proxy, sequential_round_trips
from s3_server import S3Server

from seglog.logstore.errors import KafkaStorageError
from seglog.logstore.storage.object_storage import ObjectStorage


@pytest.fixture(params=("moto", "seaweedfs"))
def server(request: pytest.FixtureRequest) -> S3Server:
    name = "bucket_server" if request.param == "moto" else "seaweed_server"
    found: S3Server = request.getfixturevalue(name)
    return found


@pytest.fixture
def proxy(server: S3Server) -> Iterator[S3Proxy]:
    with S3Proxy(server.endpoint, delay_s=0.002) as p:
        yield p


def _storage(server: S3Server, endpoint: str, bucket: str, **options: str) -> ObjectStorage:
    return ObjectStorage(
        f"s3://{bucket}/logs", {**server.storage_options(), "aws_endpoint": endpoint, **options}
    )


def _path(*parts: str) -> str:
    return "/".join(parts)


def test_semantics_pass_through_and_counts_by_kind(server: S3Server, proxy: S3Proxy) -> None:
    bucket = server.create_bucket()
    st = _storage(server, proxy.endpoint, bucket)
    body = bytes(range(256)) * 4096  # 1 MiB: several reads and writes of the relay
    assert st.create(_path("a", "x.json"), body)
    # The conditional create's 412 comes back through the proxy: the loser learns it lost.
    assert not st.create(_path("a", "x.json"), b"other")
    assert st.read(_path("a", "x.json")) == body
    assert st.read_range(_path("a", "x.json"), 1000, 300) == body[1000:1300]
    st.write_atomic(_path("a", "y.log"), b"plain")
    assert sorted(e.name for e in st.list_dir(_path("a"))) == ["x.json", "y.log"]
    assert st.exists(_path("a", "y.log"))
    st.delete(_path("a", "y.log"))
    assert not st.exists(_path("a", "y.log"))
    # What landed is what the server holds, read without the proxy.
    direct = _storage(server, server.endpoint, bucket)
    assert direct.read(_path("a", "x.json")) == body
    counts = proxy.counts
    assert counts["CONDITIONAL_PUT"] == 2
    assert counts["PUT"] == 1
    assert counts["RANGED_GET"] >= 1
    assert counts["LIST"] >= 1
    assert counts["DELETE"] == 1
    assert counts["HEAD"] + counts["GET"] >= 3  # the whole read and two exists()
    # Every request was held for the delay, none faulted.
    assert proxy.delayed == sum(counts.values())
    assert proxy.faults == {}


def test_scheduled_faults_reach_the_client_as_errors(server: S3Server, proxy: S3Proxy) -> None:
    bucket = server.create_bucket()
    st = _storage(server, proxy.endpoint, bucket, max_retries="0")
    assert st.create(_path("k"), b"v")
    for fault in (Fault.HTTP_500, Fault.HTTP_503, Fault.DROP_BEFORE):
        proxy.inject(fault, kinds={"GET"})
        with pytest.raises(KafkaStorageError):
            st.read(_path("k"))
        assert st.read(_path("k")) == b"v"  # one request only: the next one passes
    assert proxy.faults == {"500": 1, "503": 1, "drop-before": 1}


def test_a_dropped_response_hides_a_request_that_happened(server: S3Server, proxy: S3Proxy) -> None:
    """DROP_AFTER: the PUT reaches the server, its answer never reaches the client."""
    bucket = server.create_bucket()
    st = _storage(server, proxy.endpoint, bucket, max_retries="0")
    name = f"landed-{uuid.uuid4().hex}"
    proxy.inject(Fault.DROP_AFTER, kinds={"CONDITIONAL_PUT"})
    with pytest.raises(KafkaStorageError):
        st.create(_path(name), b"did it land?")
    assert _storage(server, server.endpoint, bucket).read(_path(name)) == b"did it land?"
    # The client's retry of its own create now loses to itself: the case that commit
    # objects carry their writer's identity for.
    assert not st.create(_path(name), b"did it land?")
    assert proxy.faults == {"drop-after": 1}


def test_client_retries_hide_a_transient_fault(server: S3Server, proxy: S3Proxy) -> None:
    """With the client's retries (seglog's default), one 503 costs one more request."""
    bucket = server.create_bucket()
    st = _storage(server, proxy.endpoint, bucket, init_backoff="10ms")
    assert st.create(_path("k"), b"v")
    before = proxy.counts["GET"]
    proxy.inject(Fault.HTTP_503, kinds={"GET"})
    assert st.read(_path("k")) == b"v"
    assert proxy.counts["GET"] - before == 2
    assert proxy.faults == {"503": 1}


def test_random_faults_only_hit_the_kinds_named(server: S3Server, proxy: S3Proxy) -> None:
    bucket = server.create_bucket()
    st = _storage(server, proxy.endpoint, bucket, max_retries="0")
    proxy.set_random_faults(1.0, (Fault.HTTP_503,), kinds={"DELETE"}, seed=7)
    for i in range(5):
        st.write_atomic(_path(f"o{i}"), b"x")
    assert [e.name for e in st.list_dir(_path())] == [f"o{i}" for i in range(5)]
    with pytest.raises(KafkaStorageError):
        st.delete(_path("o0"))
    proxy.set_random_faults(0)
    st.delete(_path("o0"))
    assert proxy.faults == {"503": 1}


def test_a_bandwidth_cap_keeps_the_bytes_intact(server: S3Server) -> None:
    bucket = server.create_bucket()
    body = uuid.uuid4().bytes * 16384  # 256 KiB
    with S3Proxy(server.endpoint, delay_s=0, bandwidth_bps=8 << 20) as capped:
        st = _storage(server, capped.endpoint, bucket)
        st.write_atomic(_path("big"), body)
        assert st.read(_path("big")) == body
        assert capped.delayed == 0 and capped.counts["PUT"] == 1


class _ProxyClock:
    """A clock that moves only when the proxy sleeps: the throttle's schedule is then
    exact and independent of how fast the machine relays."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 1000.0

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


def test_a_capped_transfer_is_scheduled_at_no_more_than_the_cap(server: S3Server) -> None:
    bucket = server.create_bucket()
    body = uuid.uuid4().bytes * 16384  # 256 KiB: several relay chunks each way
    rate = 64 << 10  # 64 KiB/s: the body alone needs 4 s of the proxy's clock each way
    clock = _ProxyClock()
    with S3Proxy(
        server.endpoint, delay_s=0, bandwidth_bps=rate, clock=clock, sleep=clock.sleep
    ) as capped:
        st = _storage(server, capped.endpoint, bucket)
        st.write_atomic(_path("big"), body)
        assert st.read(_path("big")) == body
        records = capped.throttled
    # Every byte relayed is accounted for: the body went up and came back, with heads.
    assert sum(r.relayed for r in records) >= 2 * len(body)
    for r in records:
        # Each connection's last byte left no earlier than its bytes allow at the cap.
        assert r.released - r.started >= r.relayed / rate - 1e-9
    busiest = max(records, key=lambda r: r.relayed)
    assert busiest.relayed >= len(body) and busiest.waited_s >= len(body) / rate * 0.99
    # Only the throttle moved the proxy's clock, by exactly what it waited.
    assert abs((clock.now - 1000.0) - sum(r.waited_s for r in records)) < 1e-6


def test_the_request_log_says_what_a_caller_waited_for(server: S3Server) -> None:
    bucket = server.create_bucket()
    with S3Proxy(server.endpoint, delay_s=0.002, log_requests=True) as logged:
        st = _storage(server, logged.endpoint, bucket)
        st.write_atomic(_path("warm"), b"w")  # the client's connection, set up unlogged
        since = logged.clock()
        assert st.create(_path("c.json"), b"x")
        assert st.read(_path("c.json")) == b"x"
        st.delete(_path("c.json"))
        records = logged.requests(since)
    assert [r.kind for r in records] == ["CONDITIONAL_PUT", "GET", "DELETE"]
    # Each was answered (after the proxy's delay) before the next arrived.
    assert all(r.answered - r.arrived >= 0.002 for r in records)
    assert all(a.answered <= b.arrived for a, b in zip(records, records[1:], strict=False))
    assert sequential_round_trips(records) == 3


def test_the_request_log_says_which_creates_lost(server: S3Server) -> None:
    """Each logged request carries its answer's status: a create-if-absent that lost its
    race is a 412, an injected fault its own status, a dropped answer the server's."""
    bucket = server.create_bucket()
    with S3Proxy(server.endpoint, delay_s=0.0, log_requests=True) as logged:
        st = _storage(server, logged.endpoint, bucket, max_retries="0")
        st.write_atomic(_path("warm"), b"w")
        since = logged.clock()
        assert st.create(_path("v.json"), b"first")
        assert not st.create(_path("v.json"), b"second")
        logged.inject(Fault.HTTP_503, kinds={"GET"})
        with pytest.raises(KafkaStorageError):
            st.read(_path("v.json"))
        logged.inject(Fault.DROP_AFTER, kinds={"GET"})
        with pytest.raises(KafkaStorageError):
            st.read(_path("v.json"))
        records = logged.requests(since)
    assert [(r.kind, r.status) for r in records] == [
        ("CONDITIONAL_PUT", 200),
        ("CONDITIONAL_PUT", 412),
        ("GET", 503),
        ("GET", 200),
    ]


def test_sequential_round_trips_count_overlapping_requests_once() -> None:
    def req(arrived: float, answered: float) -> RequestRecord:
        return RequestRecord("PUT", 0, arrived, answered)

    # Three uploads at once, then a commit, then a read: three round trips, not five.
    parallel = [req(0.0, 1.0), req(0.1, 1.2), req(0.2, 0.9)]
    assert sequential_round_trips([*parallel, req(1.3, 2.0), req(2.0, 2.5)]) == 3
    assert sequential_round_trips([]) == 0


class _OnePieceUpstream:
    """A one-connection HTTP server on 127.0.0.1 that keeps each ``recv`` of the request
    it gets, answers with its head and body in two sends, and between them waits (up to
    ``WAIT_S``, never a figure checked) for the client to have received something."""

    WAIT_S = 0.3
    BODY = b"answer-body"

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.received: list[bytes] = []
        self.got_something = threading.Event()  # set by the test's client
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            data = b""
            while not data.endswith(b"\r\n\r\nhello"):
                chunk = conn.recv(65536)
                if not chunk:
                    return
                self.received.append(chunk)
                data += chunk
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(self.BODY))
            self.got_something.wait(self.WAIT_S)
            conn.sendall(self.BODY)
            conn.recv(1)  # until the proxy closes

    def close(self) -> None:
        self.listener.close()
        self.thread.join(timeout=10)


def test_a_small_message_is_relayed_in_one_piece() -> None:
    """A request or answer with a small fixed-length body reaches the other side as one
    write, head and body together, as S3 clients send it: the server, and then the
    client, is woken once per message, not once for its head and again for its body
    (each wake-up costs a loaded machine's scheduling delay, on every request). Before,
    the proxy relayed the head as soon as it had it; the parts are sent apart here, so
    that relaying one at once would show."""
    upstream = _OnePieceUpstream()
    try:
        with S3Proxy(upstream.endpoint, delay_s=0.0) as proxy:
            port = int(proxy.endpoint.rsplit(":", 1)[1])
            with socket.create_connection(("127.0.0.1", port)) as client:
                head = b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"
                client.sendall(head)
                # The body follows once the server has something, or after WAIT_S.
                for _ in range(int(_OnePieceUpstream.WAIT_S / 0.01)):
                    if upstream.received:
                        break
                    threading.Event().wait(0.01)
                client.sendall(b"hello")
                first = client.recv(65536)
                upstream.got_something.set()
                answer = first
                while not answer.endswith(_OnePieceUpstream.BODY):
                    more = client.recv(65536)
                    assert more, answer
                    answer += more
    finally:
        upstream.close()
    assert upstream.received[0] == head + b"hello", upstream.received
    assert first.endswith(b"\r\n\r\n" + _OnePieceUpstream.BODY), first
