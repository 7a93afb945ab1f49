"""A delay- and fault-injecting HTTP/1.1 reverse proxy for the test S3 servers
(``tests/s3_server.py``), on 127.0.0.1, for tests and benchmarks (which import it as
they import ``s3_server``: ``sys.path`` gets ``tests/``).

Real S3 answers in tens of milliseconds and fails now and then; the servers here answer
in well under one and never fail. The proxy puts that back, without touching what is
said: every request is forwarded byte for byte (method, path, query, headers in their
order and case, so the ``Host`` the client signed, conditional headers and signatures
arrive unchanged; bodies streamed, fixed-length or chunked; keep-alive kept), and every
response comes back byte for byte. On top of that it

- waits ``delay_s`` (default 25 ms) before forwarding each request;
- optionally logs every request (``log_requests``: kind, connection, arrival and answer
  on the proxy's clock; ``sequential_round_trips`` of a window says how many of them a
  caller waited for one after the other);
- optionally caps each connection's bandwidth (``bandwidth_bps``, bytes a second, both
  directions together), and keeps each capped connection's schedule (``throttled``);
- counts requests by kind (``request_kind``: GET, RANGED_GET, HEAD, PUT,
  CONDITIONAL_PUT, COPY, LIST, DELETE, MULTIPART, POST);
- injects faults, on a schedule (``inject``: the next N requests of some kinds) or at
  random (``set_random_faults``): ``Fault.HTTP_500`` / ``Fault.HTTP_503`` answered
  without forwarding, ``Fault.DROP_BEFORE`` closes the connection without forwarding,
  ``Fault.DROP_AFTER`` forwards the request, lets the server answer, and closes the
  connection instead of relaying the answer (the request happened; the client cannot
  know: the "did it land?" case).

>>> with S3Proxy(server.endpoint, delay_s=0.025) as proxy:  # doctest: +SKIP
...     ObjectStorage("s3://b/logs", {**server.storage_options(),
...                                   "aws_endpoint": proxy.endpoint})

Thread-safe: counters and fault plans are guarded by one lock; one thread per client
connection, each with its own connection to the server.
"""

from __future__ import annotations

import contextlib
import enum
import io
import random
import socket
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = [
    "Fault",
    "RequestRecord",
    "S3Proxy",
    "ThrottleRecord",
    "request_kind",
    "sequential_round_trips",
]

_CHUNK = 64 * 1024
_MAX_LINE = 64 * 1024


class Fault(enum.Enum):
    HTTP_500 = "500"
    HTTP_503 = "503"
    DROP_BEFORE = "drop-before"
    DROP_AFTER = "drop-after"


_STATUS_BODY = {
    Fault.HTTP_500: (b"500 Internal Server Error", b"InternalError"),
    Fault.HTTP_503: (b"503 Slow Down", b"SlowDown"),
}


def request_kind(method: str, target: str, headers: dict[str, str]) -> str:
    """The kind of one S3 request, by its method, target (path?query) and lower-cased
    headers."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query, keep_blank_values=True)
    if "uploads" in query or "uploadId" in query:
        return "MULTIPART"
    if method == "GET":
        path = urllib.parse.urlsplit(target).path.strip("/")
        if "list-type" in query or "/" not in path and "prefix" in query:
            return "LIST"
        return "RANGED_GET" if "range" in headers else "GET"
    if method == "PUT":
        if "x-amz-copy-source" in headers:
            return "COPY"
        if "if-none-match" in headers or "if-match" in headers:
            return "CONDITIONAL_PUT"
        return "PUT"
    if method == "POST" and "delete" in query:
        return "DELETE"
    return method


@dataclass
class _Scheduled:
    fault: Fault
    kinds: frozenset[str] | None
    remaining: int


@dataclass
class _Random:
    rate: float
    faults: tuple[Fault, ...]
    kinds: frozenset[str] | None
    rng: random.Random


class _Message:
    """One HTTP message's head as read: the raw bytes to forward and what the proxy
    needs to know (lower-cased header names; a repeated header keeps its last value)."""

    def __init__(self, start_line: bytes, raw: bytes, headers: dict[str, str]) -> None:
        self.start_line = start_line
        self.raw = raw
        self.headers = headers

    @property
    def chunked(self) -> bool:
        return "chunked" in self.headers.get("transfer-encoding", "").lower()

    @property
    def length(self) -> int | None:
        value = self.headers.get("content-length")
        return int(value) if value is not None else None


def _read_head(reader: io.BufferedReader) -> _Message | None:
    """The next message head, or None if the peer closed cleanly before one."""
    start = reader.readline(_MAX_LINE)
    while start in (b"\r\n", b"\n"):  # stray CRLF between messages (RFC 9112 2.2)
        start = reader.readline(_MAX_LINE)
    if not start:
        return None
    raw = [start]
    headers: dict[str, str] = {}
    while True:
        line = reader.readline(_MAX_LINE)
        if not line:
            raise ConnectionError("connection closed inside a message head")
        raw.append(line)
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return _Message(start, b"".join(raw), headers)


@dataclass
class ThrottleRecord:
    """One capped connection's schedule, on the proxy's clock: bytes relayed (both
    directions) since ``started``, and when the last of them was let through
    (``released``, after the throttle's wait; ``started`` while none was). The cap
    holds when ``released - started >= relayed / bandwidth_bps``."""

    started: float
    relayed: int = 0
    released: float = 0.0
    waited_s: float = 0.0


@dataclass(frozen=True)
class RequestRecord:
    """One request as the proxy saw it (``log_requests``), on the proxy's clock: its
    kind, the client connection it came on (numbered from 0 in accept order), when its
    head arrived and when its answer was relayed (or the connection dropped)."""

    kind: str
    connection: int
    arrived: float
    answered: float
    target: str = ""
    """The request's path and query, as sent (which object or prefix it named)."""
    replied: float | None = None
    """When the proxy had the answer's head and began relaying it (None: no answer):
    before the client can have it, so a request the client sent once it had this
    answer arrives after it, which ``answered`` (logged after the relay, when the client
    may have sent its next request already) does not promise."""
    status: int | None = None
    """The answer's HTTP status: the server's (also when ``DROP_AFTER`` kept it from the
    client: the request happened), an injected fault's, or None (no answer). A 412 to a
    ``CONDITIONAL_PUT`` is a create-if-absent that lost its race."""
    forwarded: float | None = None
    """When the proxy began sending the request to the server, its delay served (None:
    never forwarded): ``replied - forwarded`` is the server's time (and the local
    sockets'), ``forwarded - arrived - delay_s`` the proxy's own before it."""


def sequential_round_trips(records: Iterable[RequestRecord]) -> int:
    """The most requests of ``records`` that ran one after the other (each arrived after
    the answer to the one before was on its way back, ``replied``): a lower bound on the
    round trips on the critical path of whatever made them, and exact for a caller that
    waits for each answer."""

    def end(r: RequestRecord) -> float:
        return r.replied if r.replied is not None else r.answered

    chain = 0
    last_end = float("-inf")
    for r in sorted(records, key=end):
        if r.arrived >= last_end:
            chain += 1
            last_end = end(r)
    return chain


class _Throttle:
    """A connection's bandwidth cap: after sending n bytes, wait until n/rate seconds
    have passed since the connection's first byte (so short bursts are not penalised
    twice). ``clock``/``sleep`` are the proxy's (injectable, so a test can check the
    schedule without measuring time)."""

    def __init__(
        self,
        bytes_per_s: float | None,
        record: ThrottleRecord,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self._rate = bytes_per_s
        self._record = record
        self._clock = clock
        self._sleep = sleep

    def sent(self, n: int) -> None:
        if not self._rate:
            return
        record = self._record
        record.relayed += n
        ahead = record.started + record.relayed / self._rate - self._clock()
        if ahead > 0:
            record.waited_s += ahead
            self._sleep(ahead)
        record.released = self._clock()


def _relay_body(
    msg: _Message,
    reader: io.BufferedReader,
    out: socket.socket | None,
    throttle: _Throttle,
    *,
    until_close: bool = False,
) -> None:
    """Copy ``msg``'s body from ``reader`` to ``out`` (or discard it if ``out`` is None),
    as framed: chunked (chunk lines and trailers copied as they are), a length, or
    (``until_close``, responses only) everything until the peer closes."""

    def send(data: bytes) -> None:
        if out is not None:
            out.sendall(data)
            throttle.sent(len(data))

    if msg.chunked:
        while True:
            size_line = reader.readline(_MAX_LINE)
            if not size_line:
                raise ConnectionError("connection closed inside a chunked body")
            send(size_line)
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, up to the empty line
                    line = reader.readline(_MAX_LINE)
                    if not line:
                        raise ConnectionError("connection closed inside a chunked trailer")
                    send(line)
                    if line in (b"\r\n", b"\n"):
                        return
            _copy(reader, send, size + 2)  # the chunk and its CRLF
        return
    length = msg.length
    if length is not None:
        _copy(reader, send, length)
    elif until_close:
        while data := reader.read1(_CHUNK):
            send(data)


def _small_body(msg: _Message, reader: io.BufferedReader) -> bytes | None:
    """``msg``'s whole body if it has a length of at most ``_CHUNK`` bytes (read now, to be
    sent with the head), else None (relayed as it comes: ``_relay_body``)."""
    length = msg.length
    if msg.chunked or length is None or length > _CHUNK:
        return None
    body = reader.read(length)
    if len(body) < length:
        raise ConnectionError(f"connection closed with {length - len(body)} body byte(s) to come")
    return body


def _copy(reader: io.BufferedReader, send: Callable[[bytes], None], n: int) -> None:
    while n > 0:
        data = reader.read(min(n, _CHUNK))
        if not data:
            raise ConnectionError(f"connection closed with {n} body byte(s) to come")
        send(data)
        n -= len(data)


def _no_body(method: bytes, status: int) -> bool:
    return method == b"HEAD" or 100 <= status < 200 or status in (204, 304)


def _status(msg: _Message) -> int:
    parts = msg.start_line.split(None, 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


class S3Proxy:
    """The proxy (see the module docstring) in front of ``upstream`` (``http://host:port``).

    ``start()``/``stop()`` or a ``with`` block; ``endpoint`` is what clients use instead
    of the server's. ``counts`` (requests by kind), ``faults`` (injected, by fault) and
    ``delayed`` (requests held for ``delay_s``) are snapshots.
    """

    def __init__(
        self,
        upstream: str,
        *,
        delay_s: float = 0.025,
        bandwidth_bps: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        log_requests: bool = False,
    ) -> None:
        parts = urllib.parse.urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream {upstream!r}: expected http://host:port")
        self._upstream = (parts.hostname, parts.port)
        self.delay_s = delay_s
        self.bandwidth_bps = bandwidth_bps
        self._clock = clock
        self._sleep = sleep
        self._throttled: list[ThrottleRecord] = []
        self._log_requests = log_requests
        self._requests: list[RequestRecord] = []
        self._in_flight = 0
        self._connections = 0
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # _in_flight fell to 0
        self._counts: Counter[str] = Counter()
        self._faults: Counter[str] = Counter()
        self._delayed = 0
        self._scheduled: list[_Scheduled] = []
        self._random: _Random | None = None
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self.endpoint = ""

    # -- control -----------------------------------------------------------------------

    def inject(self, fault: Fault, *, count: int = 1, kinds: Iterable[str] | None = None) -> None:
        """Inject ``fault`` into the next ``count`` requests of ``kinds`` (any kind if
        None). Schedules are served in the order given, before random faults."""
        with self._lock:
            self._scheduled.append(_Scheduled(fault, _kinds(kinds), count))

    def set_random_faults(
        self,
        rate: float,
        faults: Iterable[Fault] = tuple(Fault),
        *,
        kinds: Iterable[str] | None = None,
        seed: int = 0,
    ) -> None:
        """From now on, each request of ``kinds`` (any if None) gets one of ``faults``
        (chosen uniformly) with probability ``rate``; ``rate=0`` stops them."""
        with self._lock:
            self._random = (
                _Random(rate, tuple(faults), _kinds(kinds), random.Random(seed))
                if rate > 0
                else None
            )

    def clear_faults(self) -> None:
        with self._lock:
            self._scheduled.clear()
            self._random = None

    @property
    def counts(self) -> Counter[str]:
        with self._lock:
            return Counter(self._counts)

    @property
    def faults(self) -> Counter[str]:
        with self._lock:
            return Counter(self._faults)

    @property
    def throttled(self) -> list[ThrottleRecord]:
        """One record per connection served under ``bandwidth_bps`` (copies), in the
        order the connections were accepted; after the requests in flight were answered
        (up to 5 s: a client has its last byte before the proxy counted it)."""
        with self._settled:
            self._settled.wait_for(lambda: self._in_flight == 0, timeout=5.0)
            return [ThrottleRecord(**vars(r)) for r in self._throttled]

    def requests(self, since: float = float("-inf"), *, wait_s: float = 5.0) -> list[RequestRecord]:
        """The requests answered so far (``log_requests=True``) whose head arrived at or
        after ``since`` (the proxy's clock: ``clock()``), in the order answered. Waits up
        to ``wait_s`` for requests in flight: a client has its answer a moment before the
        proxy has logged it."""
        with self._settled:
            self._settled.wait_for(lambda: self._in_flight == 0, timeout=wait_s)
            return [r for r in self._requests if r.arrived >= since]

    def clock(self) -> float:
        """The proxy's clock (``time.monotonic`` unless one was given)."""
        return self._clock()

    @property
    def delayed(self) -> int:
        with self._lock:
            return self._delayed

    def _choose_fault(self, kind: str) -> Fault | None:
        with self._lock:
            self._counts[kind] += 1
            for plan in self._scheduled:
                if plan.kinds is None or kind in plan.kinds:
                    plan.remaining -= 1
                    if plan.remaining <= 0:
                        self._scheduled.remove(plan)
                    self._faults[plan.fault.value] += 1
                    return plan.fault
            chance = self._random
            if (
                chance is not None
                and (chance.kinds is None or kind in chance.kinds)
                and chance.rng.random() < chance.rate
            ):
                fault = chance.faults[chance.rng.randrange(len(chance.faults))]
                self._faults[fault.value] += 1
                return fault
            return None

    # -- life cycle ----------------------------------------------------------------------

    def start(self) -> S3Proxy:
        listener = socket.create_server(("127.0.0.1", 0))
        self._listener = listener
        self.endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
        accept = threading.Thread(target=self._accept, name="s3-proxy-accept", daemon=True)
        accept.start()
        self._threads.append(accept)
        return self

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            _close(listener)  # a shutdown wakes the accept(); a close alone would not
        with self._lock:
            open_sockets = list(self._sockets)
        for s in open_sockets:
            _close(s)
        for t in self._threads:
            t.join(timeout=10)
        self._threads.clear()

    def __enter__(self) -> S3Proxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        while (listener := self._listener) is not None:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by stop()
            t = threading.Thread(
                target=self._serve, args=(client,), daemon=True, name="s3-proxy-connection"
            )
            t.start()
            with self._lock:
                self._threads = [x for x in self._threads if x.is_alive()]
                self._threads.append(t)

    # -- one connection ------------------------------------------------------------------

    def _track(self, s: socket.socket) -> socket.socket:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._sockets.add(s)
        return s

    def _untrack(self, s: socket.socket | None) -> None:
        if s is None:
            return
        with self._lock:
            self._sockets.discard(s)
        _close(s)

    def _serve(self, client: socket.socket) -> None:
        self._track(client)
        with self._lock:
            connection = self._connections
            self._connections += 1
        upstream: socket.socket | None = None
        up_reader: io.BufferedReader | None = None
        opened = self._clock()
        record = ThrottleRecord(started=opened, released=opened)
        if self.bandwidth_bps:
            with self._lock:
                self._throttled.append(record)
        throttle = _Throttle(self.bandwidth_bps, record, self._clock, self._sleep)
        reader = client.makefile("rb")
        try:
            while (request := _read_head(reader)) is not None:
                arrived = self._clock()
                replied: float | None = None
                forwarded: float | None = None
                status: int | None = None
                method, target = _request_line(request)
                kind = request_kind(method.decode(), target, request.headers)
                with self._lock:
                    self._in_flight += 1
                try:
                    fault = self._choose_fault(kind)
                    if self.delay_s > 0:
                        with self._lock:
                            self._delayed += 1
                        self._sleep(self.delay_s)
                    if fault is Fault.DROP_BEFORE:
                        return
                    if fault in _STATUS_BODY:
                        # The body is read (and dropped) so the connection stays usable.
                        _relay_body(request, reader, None, throttle)
                        replied = self._clock()
                        status = int(_STATUS_BODY[fault][0].split()[0])
                        client.sendall(_error_response(fault))
                        continue
                    if upstream is None:
                        upstream = self._track(socket.create_connection(self._upstream))
                        up_reader = upstream.makefile("rb")
                    assert up_reader is not None
                    relay = None if fault is Fault.DROP_AFTER else client
                    expect = request.headers.get("expect", "").lower() == "100-continue"
                    # A small body goes with its head in one write, as clients send it:
                    # the server is woken once for the request, not once for each part.
                    body = None if expect else _small_body(request, reader)
                    forwarded = self._clock()
                    head_and_body = request.raw if body is None else request.raw + body
                    upstream.sendall(head_and_body)
                    throttle.sent(len(head_and_body))
                    if expect:
                        response = _read_head(up_reader)
                        if response is None:
                            return
                        if _status(response) == 100:
                            if relay is not None:
                                client.sendall(response.raw)
                        else:
                            # A final answer before the body: the client will not send it.
                            replied = self._clock()
                            status = _status(response)
                            self._relay_response(method, response, up_reader, relay, throttle)
                            return
                    if body is None:
                        _relay_body(request, reader, upstream, throttle)
                    response = _read_head(up_reader)
                    while response is not None and _status(response) in range(100, 200):
                        if relay is not None:
                            client.sendall(response.raw)
                        response = _read_head(up_reader)
                    if response is None:
                        return
                    replied = self._clock()
                    status = _status(response)
                    keep = self._relay_response(method, response, up_reader, relay, throttle)
                    if fault is Fault.DROP_AFTER:
                        return
                    if not keep:
                        self._untrack(upstream)
                        upstream = up_reader = None
                    if "close" in request.headers.get("connection", "").lower():
                        return
                finally:
                    self._answered(kind, connection, arrived, target, replied, status, forwarded)
        except (OSError, ValueError):
            return  # a peer went away (or a stop()): this connection ends, nothing else
        finally:
            self._untrack(upstream)
            self._untrack(client)

    def _answered(
        self,
        kind: str,
        connection: int,
        arrived: float,
        target: str,
        replied: float | None,
        status: int | None,
        forwarded: float | None,
    ) -> None:
        record = RequestRecord(
            kind, connection, arrived, self._clock(), target, replied, status, forwarded
        )
        with self._settled:
            if self._log_requests:
                self._requests.append(record)
            self._in_flight -= 1
            self._settled.notify_all()

    def _relay_response(
        self,
        method: bytes,
        response: _Message,
        up_reader: io.BufferedReader,
        client: socket.socket | None,
        throttle: _Throttle,
    ) -> bool:
        """Relay one final response (or read and drop it if ``client`` is None); True if
        the server's connection can carry another request."""
        status = _status(response)
        no_body = _no_body(method, status)
        # A small body goes with its head in one write (the client is woken once).
        body = b"" if no_body else _small_body(response, up_reader)
        if client is not None:
            head_and_body = response.raw if body is None else response.raw + body
            client.sendall(head_and_body)
            throttle.sent(len(head_and_body))
        if no_body:
            return "close" not in response.headers.get("connection", "").lower()
        delimited = response.chunked or response.length is not None
        if body is None:
            _relay_body(response, up_reader, client, throttle, until_close=not delimited)
        return delimited and "close" not in response.headers.get("connection", "").lower()


def _request_line(request: _Message) -> tuple[bytes, str]:
    parts = request.start_line.split()
    if len(parts) != 3:
        raise ValueError(f"malformed request line {request.start_line!r}")
    return parts[0], parts[1].decode("latin-1")


def _error_response(fault: Fault) -> bytes:
    status, code = _STATUS_BODY[fault]
    body = (
        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>'
        + code
        + b"</Code><Message>injected by the test proxy</Message></Error>"
    )
    return (
        b"HTTP/1.1 " + status + b"\r\nContent-Type: application/xml\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


def _kinds(kinds: Iterable[str] | None) -> frozenset[str] | None:
    return frozenset(kinds) if kinds is not None else None


def _close(s: socket.socket) -> None:
    # Already shut down, or never connected: closing is all that is left to do.
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()
