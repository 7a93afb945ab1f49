"""Broker-like Kafka log dirs built in tmp dirs, with an independent model of what they
hold: the corpus the broker-data tests run ``seglog check``, ``dump-log``, the library
reader and Spark over.

Batches come from kafka-python's record builders (Kafka's format implemented outside
seglog); this module then does what a broker does to them and lays the files out as
brokers of each era leave them (facts from Kafka's ``LogSegment.append``,
``LogValidator``, ``TimeIndex.maybeAppend``, ``ProducerStateManager``, ``LogLoader``):

* offsets assigned by rewriting the base offset (v2) or each message's offset (magic 0/1
  uncompressed; a magic-1 compressed wrapper gets the absolute LAST offset and the max
  inner timestamp, with a new CRC); the partition leader epoch written into bytes 12-15;
  LogAppendTime stamped into attributes and maxTimestamp (new CRC); control batches are a
  builder's batch with the control bit set (brokers write them, clients cannot).
* index entries when more than ``index.interval.bytes`` were appended since the last
  one, checked before the append. ``era="leader"`` (brokers before 3.x): one entry per
  append, the append's LAST offset at its FIRST position, and the time index names the
  record holding the max timestamp (inside its batch). ``era="follower"`` (before 3.x):
  per append too, but the time index names the batch's last offset. ``era="3.x"``: an
  entry per batch at its own position with its own last offset.
* the time index appends (max timestamp so far, its offset) only when the timestamp
  grows, plus once more when a segment rolls; indexes are trimmed (clean shutdown).
* producer-state ``.snapshot`` files at each roll and at the log end (version 1, CRC-32C,
  46-byte entries), ``.txnindex`` entries for aborted transactions, checkpoints written
  as ``0\\n<n>\\n<topic> <partition> <offset>`` (a ``cleaner-offset-checkpoint`` left
  empty, as created, where nothing was cleaned), ``leader-epoch-checkpoint``,
  ``partition.metadata``, ``meta.properties``, ``.kafka_cleanshutdown``, KRaft's
  ``bootstrap.checkpoint``, ``__cluster_metadata-0`` with ``quorum-state`` and a
  ``<offset>-<epoch>.checkpoint`` snapshot.
"""

from __future__ import annotations

import base64
import random
import struct
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

T0 = 1_600_000_000_000


@dataclass(frozen=True)
class Rec:
    """One data record as a consumer sees it (the model)."""

    offset: int
    timestamp: int | None
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime, -1 none (magic 0)
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass
class Pending:
    """A batch as a client built it, before the broker assigns offsets."""

    raw: bytearray
    magic: int
    timestamps: list[int | None]  # one per offset
    data: list[tuple[bytes | None, bytes | None, tuple]]  # (key, value, headers); [] control
    codec: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    control_type: int | None = None
    log_append_time: bool = False

    @property
    def count(self) -> int:
        return len(self.timestamps)


def v2_batch(rows, *, codec: int = 0, producer_id: int = -1, producer_epoch: int = -1,
             base_sequence: int = -1, transactional: bool = False,
             log_append_time: bool = False) -> Pending:
    """rows: (timestamp, key, value, headers) per record."""
    b = DefaultRecordBatchBuilder(2, codec, transactional, producer_id, producer_epoch,
                                  base_sequence, 1 << 30)
    for i, (ts, key, value, headers) in enumerate(rows):
        b.append(i, timestamp=ts, key=key, value=value, headers=list(headers))
    return Pending(bytearray(b.build()), 2, [r[0] for r in rows],
                   [(r[1], r[2], tuple(r[3])) for r in rows], codec, producer_id,
                   producer_epoch, base_sequence, log_append_time=log_append_time)


def control_batch(control_type: int, *, producer_id: int, producer_epoch: int, ts: int,
                  value: bytes) -> Pending:
    """A broker-written control batch: a transactional builder batch of one record whose
    key is (version 0, type), with the control attribute bit set and a new CRC."""
    b = DefaultRecordBatchBuilder(2, 0, producer_id >= 0, producer_id, producer_epoch, -1,
                                  1 << 30)
    b.append(0, timestamp=ts, key=struct.pack(">hh", 0, control_type), value=value, headers=[])
    raw = bytearray(b.build())
    attrs = struct.unpack_from(">h", raw, 21)[0] | 0x20
    struct.pack_into(">h", raw, 21, attrs)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return Pending(raw, 2, [ts], [], 0, producer_id, producer_epoch, -1, control_type)


def end_txn_marker(commit: bool, *, producer_id: int, producer_epoch: int, ts: int,
                   coordinator_epoch: int) -> Pending:
    return control_batch(1 if commit else 0, producer_id=producer_id,
                         producer_epoch=producer_epoch, ts=ts,
                         value=struct.pack(">hi", 0, coordinator_epoch))


def legacy_messages(magic: int, rows, *, codec: int = 0) -> list[Pending]:
    """Magic 0/1 messages: one Pending per uncompressed message, or one compressed
    wrapper (magic 1) holding them all. rows: (timestamp, key, value)."""
    def build(chunk):
        b = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
        for i, (ts, key, value) in enumerate(chunk):
            b.append(i, timestamp=ts if magic else None, key=key, value=value)
        return bytearray(b.build())

    def ts_of(r):
        return r[0] if magic else None

    if codec:
        return [Pending(build(rows), magic, [ts_of(r) for r in rows],
                        [(r[1], r[2], ()) for r in rows], codec)]
    return [Pending(build([r]), magic, [ts_of(r)], [(r[1], r[2], ())]) for r in rows]


@dataclass
class _Segment:
    base: int
    data: bytearray = field(default_factory=bytearray)
    offset_entries: list[tuple[int, int]] = field(default_factory=list)
    time_entries: list[tuple[int, int]] = field(default_factory=list)
    txn_entries: list[tuple[int, int, int, int]] = field(default_factory=list)
    bytes_since_index: int = 0
    max_ts: int = -1
    offset_of_max_ts: int = -1

    def maybe_append_time(self, ts: int, offset: int) -> None:
        last = self.time_entries[-1][0] if self.time_entries else -1
        if ts > last:
            self.time_entries.append((ts, offset))


class PartitionWriter:
    """One partition directory written as a broker of ``era`` writes it."""

    def __init__(self, log_dir: Path, topic: str, partition: int, *, era: str,
                 segment_bytes: int = 6000, index_interval_bytes: int = 700,
                 leader_epoch: int = 0, now_ms: int = T0, topic_id: bool = True,
                 epoch_checkpoint: bool = True) -> None:
        assert era in ("leader", "follower", "3.x")
        self.topic, self.partition, self.era = topic, partition, era
        self.dir = log_dir / f"{topic}-{partition}"
        self.dir.mkdir(parents=True)
        self.segment_bytes, self.interval = segment_bytes, index_interval_bytes
        self.leader_epoch, self.now_ms = leader_epoch, now_ms
        self.segments = [_Segment(0)]
        self.next_offset = 0
        self.records: list[Rec] = []
        self.control_stamps: list[tuple[int, int]] = []  # (offset, timestamp) of markers
        self.producers: dict[int, tuple] = {}
        self.open_txns: dict[int, int] = {}  # producer id -> first offset
        if topic_id:
            # A topic has one id on every partition and broker (KIP-516): derive it
            # from the name so that every partition of a topic agrees.
            tid = base64.urlsafe_b64encode(uuid.uuid5(uuid.NAMESPACE_URL, topic).bytes)
            tid = tid.decode().rstrip("=")
            (self.dir / "partition.metadata").write_text(f"version: 0\ntopic_id: {tid}\n")
        if epoch_checkpoint:
            (self.dir / "leader-epoch-checkpoint").write_text(f"0\n1\n{leader_epoch} 0\n")

    # -- the broker's offset assignment -------------------------------------------------

    def _assign(self, p: Pending, base: int) -> tuple[int, int, int]:
        """Rewrite ``p`` at ``base``; returns (max timestamp, offset of the record holding
        it, last offset) and records the model."""
        raw, last = p.raw, base + p.count - 1
        stamps = list(p.timestamps)
        if p.magic == 2:
            struct.pack_into(">q", raw, 0, base)
            struct.pack_into(">i", raw, 12, self.leader_epoch)
            if p.log_append_time:
                struct.pack_into(">h", raw, 21, struct.unpack_from(">h", raw, 21)[0] | 0x08)
                struct.pack_into(">q", raw, 35, self.now_ms)
                struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
                stamps = [self.now_ms] * p.count
        elif p.codec:  # magic-1 wrapper: absolute last offset, max inner timestamp
            struct.pack_into(">q", raw, 0, last)
            struct.pack_into(">q", raw, 18, max(stamps))
            struct.pack_into(">I", raw, 12, zlib.crc32(bytes(raw[16:])))
        else:
            struct.pack_into(">q", raw, 0, base)
        ts_type = (1 if p.log_append_time else 0) if p.magic else -1
        if p.control_type is not None:
            self.control_stamps.append((base, stamps[0]))
        for i, (key, value, headers) in enumerate(p.data):
            self.records.append(Rec(base + i, stamps[i], ts_type, key, value, headers))
        if p.producer_id >= 0:
            first_seq = p.base_sequence
            self.producers[p.producer_id] = (p.producer_epoch, first_seq + p.count - 1
                                             if first_seq >= 0 else -1, last, p.count - 1,
                                             max(s for s in stamps if s is not None), 0)
        if p.magic == 0:
            return -1, last, last
        top = max(stamps)
        # A leader before 3.x: the first record holding the max (LogValidator's record
        # walk); a compressed v1 wrapper or LogAppendTime: the batch's last offset.
        inside = base + stamps.index(top) if (p.magic == 2 and not p.log_append_time) else last
        return top, inside, last

    def append(self, batches: list[Pending]) -> None:
        """One append (a produce request, or a follower's fetch) of ``batches``."""
        size = sum(len(p.raw) for p in batches)
        seg = self.segments[-1]
        if seg.data and len(seg.data) > self.segment_bytes - size:
            self.roll()
            seg = self.segments[-1]
        start = len(seg.data)
        infos = []
        for p in batches:
            base = self.next_offset
            ts, inside, last = self._assign(p, base)
            self._track_txn(p, base, last, seg)
            infos.append((len(seg.data), ts, inside, last, len(p.raw)))
            seg.data += p.raw
            self.next_offset = last + 1
        if self.era == "3.x":
            for pos, ts, _inside, last, n in infos:
                if ts > seg.max_ts:
                    seg.max_ts, seg.offset_of_max_ts = ts, last
                if seg.bytes_since_index > self.interval:
                    seg.offset_entries.append((last, pos))
                    seg.maybe_append_time(seg.max_ts, seg.offset_of_max_ts)
                    seg.bytes_since_index = 0
                seg.bytes_since_index += n
            return
        top = max(infos, key=lambda x: x[1])  # first batch holding the append's max
        if top[1] > seg.max_ts:
            seg.max_ts = top[1]
            seg.offset_of_max_ts = top[2] if self.era == "leader" else top[3]
        if seg.bytes_since_index > self.interval:
            seg.offset_entries.append((infos[-1][3], start))
            seg.maybe_append_time(seg.max_ts, seg.offset_of_max_ts)
            seg.bytes_since_index = 0
        seg.bytes_since_index += size

    def _track_txn(self, p: Pending, base: int, last: int, seg: _Segment) -> None:
        if p.producer_id < 0 or not (p.raw[22] & 0x10):
            return
        if p.control_type is None:
            self.open_txns.setdefault(p.producer_id, base)
            return
        first = self.open_txns.pop(p.producer_id)
        if p.control_type == 0:  # aborted: the last stable offset is past the marker
            seg.txn_entries.append((p.producer_id, first, last, last + 1))

    def roll(self) -> None:
        seg = self.segments[-1]
        seg.maybe_append_time(seg.max_ts, seg.offset_of_max_ts)
        self.segments.append(_Segment(self.next_offset))
        self._snapshot(self.next_offset)

    def _snapshot(self, offset: int) -> None:
        body = struct.pack(">i", len(self.producers)) + b"".join(
            struct.pack(">qhiqiqiq", pid, epoch, seq, last, delta, ts, coord, -1)
            for pid, (epoch, seq, last, delta, ts, coord) in sorted(self.producers.items()))
        (self.dir / f"{offset:020d}.snapshot").write_bytes(
            struct.pack(">hI", 1, crc32c.crc32c(body)) + body)

    def close(self, *, empty_active_without_index: bool = False) -> None:
        """Write every file as a clean shutdown leaves them. With
        ``empty_active_without_index``, roll first and leave the new empty active segment
        with a ``.timeindex`` but no ``.index`` (Kafka 2.7's lazy index)."""
        if empty_active_without_index:
            self.roll()
        self._snapshot(self.next_offset)
        for i, seg in enumerate(self.segments):
            name = f"{seg.base:020d}"
            (self.dir / f"{name}.log").write_bytes(bytes(seg.data))
            (self.dir / f"{name}.timeindex").write_bytes(b"".join(
                struct.pack(">qi", t, o - seg.base) for t, o in seg.time_entries))
            if not (empty_active_without_index and i == len(self.segments) - 1):
                (self.dir / f"{name}.index").write_bytes(b"".join(
                    struct.pack(">ii", o - seg.base, p) for o, p in seg.offset_entries))
            if seg.txn_entries:
                (self.dir / f"{name}.txnindex").write_bytes(b"".join(
                    struct.pack(">hqqqq", 0, *e) for e in seg.txn_entries))

    @property
    def index_entries(self) -> int:
        return sum(len(s.offset_entries) for s in self.segments)


def write_checkpoint(log_dir: Path, name: str, entries: dict[tuple[str, int], int]) -> None:
    lines = [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    (log_dir / name).write_text("\n".join(["0", str(len(lines)), *lines]) + "\n")


@dataclass
class BrokerDir:
    """A built log dir and what its partitions hold."""

    path: Path
    partitions: dict[tuple[str, int], PartitionWriter]
    kraft_metadata: Path | None = None

    @property
    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.partitions})

    def finish(self, *, clean_shutdown: str = "") -> None:
        ends = {tp: w.next_offset for tp, w in self.partitions.items()}
        write_checkpoint(self.path, "recovery-point-offset-checkpoint", ends)
        write_checkpoint(self.path, "replication-offset-checkpoint", ends)
        write_checkpoint(self.path, "log-start-offset-checkpoint", {})
        cleaned = {tp: 0 for tp in ends if tp[0] == "__consumer_offsets"}
        if cleaned:
            write_checkpoint(self.path, "cleaner-offset-checkpoint", cleaned)
        else:
            # Kafka's CheckpointFile creates the file empty; a broker whose cleaner never
            # checkpointed (no compacted topic) leaves it so
            (self.path / "cleaner-offset-checkpoint").write_bytes(b"")
        (self.path / ".kafka_cleanshutdown").write_text(clean_shutdown)


def _rows(rng: random.Random, n: int, ts: int, *, headers: bool = True, keyed: bool = True):
    """Records with timestamps that jump back and forth (producers' CreateTime)."""
    out = []
    for i in range(n):
        key = None if not keyed or i % 9 == 4 else f"key-{rng.randint(0, 40)}".encode()
        value = None if i % 23 == 11 else rng.randbytes(rng.randint(20, 260))
        hdrs = ((("trace", f"{i}".encode()), ("empty", None)) if headers and i % 3 == 0
                else ())
        out.append((ts + rng.randint(-400, 2_000), key, value, hdrs))
    return out


def _meta_properties(path: Path, *, kraft: bool, node: int) -> None:
    if kraft:
        text = (f"version=1\nnode.id={node}\ncluster.id=q1Sh-9_ISia_zwGINzRvyQ\n"
                f"directory.id={base64.urlsafe_b64encode(uuid.uuid4().bytes).decode()[:22]}\n")
    else:
        text = f"#\n#Thu Jan 01 00:00:00 UTC 2020\nversion=0\nbroker.id={node}\n"
    (path / "meta.properties").write_text(text)


def zk_legacy_dir(root: Path) -> BrokerDir:
    """Kafka 0.10 upgraded through 0.11: magic 0, then magic 1 (plain and a gzip
    wrapper), then v2 batches in one partition; no partition.metadata, no epochs file."""
    rng = random.Random(10)
    d = root / "zk-0.10"
    d.mkdir(parents=True)
    w = PartitionWriter(d, "legacy", 0, era="leader", topic_id=False, epoch_checkpoint=False)
    for _ in range(6):
        w.append(legacy_messages(0, [(None, r[1], r[2]) for r in _rows(rng, 8, T0)]))
    for k in range(6):
        rows = [(r[0], r[1], r[2]) for r in _rows(rng, 8, T0 + 10_000 * k)]
        w.append(legacy_messages(1, rows, codec=1 if k % 2 else 0))
    for k in range(6):
        w.append([v2_batch(_rows(rng, 10, T0 + 100_000 + 10_000 * k, headers=False))])
    w.close()
    _meta_properties(d, kraft=False, node=0)
    bd = BrokerDir(d, {("legacy", 0): w})
    bd.finish()
    return bd


def zk_27_dir(root: Path) -> BrokerDir:
    """Kafka 2.7 (ZooKeeper): multi-batch appends indexed at their first batch with
    their last offset, time entries inside batches, every codec, an empty active segment
    with a .timeindex and no .index, transactions (commit and abort) with producer
    snapshots and a .txnindex, __consumer_offsets and __transaction_state."""
    rng = random.Random(27)
    d = root / "zk-2.7"
    d.mkdir(parents=True)
    parts: dict[tuple[str, int], PartitionWriter] = {}
    for p in range(2):
        w = parts[("events", p)] = PartitionWriter(d, "events", p, era="leader",
                                                   leader_epoch=3)
        for k in range(30):
            w.append([v2_batch(_rows(rng, rng.randint(1, 12), T0 + 3_000 * k),
                               codec=(k + j) % 5) for j in range(rng.randint(1, 4))])
        w.close(empty_active_without_index=(p == 0))
    w = parts[("txn", 0)] = PartitionWriter(d, "txn", 0, era="leader")
    pid, seq = 4000, 0
    for k in range(12):
        rows = _rows(rng, 5, T0 + 5_000 * k)
        w.append([v2_batch(rows, producer_id=pid, producer_epoch=1, base_sequence=seq,
                           transactional=True)])
        seq += 5
        w.append([end_txn_marker(k % 4 != 3, producer_id=pid, producer_epoch=1,
                                 ts=T0 + 5_000 * k + 3_000, coordinator_epoch=7)])
    w.append([v2_batch(_rows(rng, 4, T0 + 90_000), producer_id=pid + 1, producer_epoch=0,
                       base_sequence=0)])  # idempotent, not transactional
    w.close()
    for p in range(3):
        w = parts[("__consumer_offsets", p)] = PartitionWriter(d, "__consumer_offsets", p,
                                                               era="leader")
        for k in range(6):
            w.append([v2_batch(_rows(rng, 6, T0 + 1_000 * k, headers=False))])
        w.close()
    w = parts[("__transaction_state", 0)] = PartitionWriter(d, "__transaction_state", 0,
                                                            era="leader")
    w.append([v2_batch(_rows(rng, 3, T0, headers=False))])
    w.close()
    _meta_properties(d, kraft=False, node=1)
    bd = BrokerDir(d, parts)
    bd.finish()
    return bd


def kraft_39_dir(root: Path) -> BrokerDir:
    """Kafka 3.9 (KRaft): per-batch indexes, a LogAppendTime topic, __consumer_offsets,
    and KRaft's metadata: bootstrap.checkpoint, __cluster_metadata-0 with a leader-change
    control batch, quorum-state and a snapshot."""
    rng = random.Random(39)
    d = root / "kraft-3.9"
    d.mkdir(parents=True)
    parts: dict[tuple[str, int], PartitionWriter] = {}
    for p in range(3):
        w = parts[("events", p)] = PartitionWriter(d, "events", p, era="3.x", leader_epoch=1)
        for k in range(25):
            w.append([v2_batch(_rows(rng, rng.randint(1, 10), T0 + 2_000 * k),
                               codec=rng.randint(0, 4))])
        w.close()
    w = parts[("audit", 0)] = PartitionWriter(d, "audit", 0, era="3.x")
    for k in range(20):
        w.now_ms = T0 + 1_000 * k
        w.append([v2_batch(_rows(rng, 6, T0 - 50_000), log_append_time=True)])
    w.close()
    w = parts[("__consumer_offsets", 0)] = PartitionWriter(d, "__consumer_offsets", 0,
                                                           era="3.x")
    for k in range(5):
        w.append([v2_batch(_rows(rng, 4, T0 + k, headers=False))])
    w.close()
    meta = PartitionWriter(d, "__cluster_metadata", 0, era="3.x", leader_epoch=1)
    meta.append([control_batch(2, producer_id=-1, producer_epoch=-1, ts=T0,
                               value=b"\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00")])
    for k in range(8):
        meta.append([v2_batch([(T0 + k, None, rng.randbytes(40), ())])])
    meta.close()
    (meta.dir / "quorum-state").write_text('{"leaderId":1,"leaderEpoch":1,"votedId":-1,'
                                           '"appliedOffset":0,"currentVoters":[{"voterId":1}],'
                                           '"data_version":0}')
    snap = bytearray()
    for base, p in enumerate((control_batch(3, producer_id=-1, producer_epoch=-1, ts=T0,
                            value=struct.pack(">hq", 0, T0) + b"\x00"),
              v2_batch([(T0, None, b"metadata-record", ())]),
              control_batch(4, producer_id=-1, producer_epoch=-1, ts=T0,
                            value=struct.pack(">h", 0) + b"\x00"))):
        struct.pack_into(">q", p.raw, 0, base)
        snap += p.raw
    (meta.dir / "00000000000000000005-0000000001.checkpoint").write_bytes(bytes(snap))
    (d / "bootstrap.checkpoint").write_bytes(bytes(snap))
    _meta_properties(d, kraft=True, node=1)
    bd = BrokerDir(d, parts, kraft_metadata=meta.dir)
    bd.finish(clean_shutdown='{"version":0,"brokerEpoch":42}')
    return bd


def cluster_dirs(root: Path) -> list[BrokerDir]:
    """Kafka 2.8, three brokers: the leader's replica indexes produce requests (time
    entries inside batches), the followers' index their fetches (several batches per
    append, time entries at batch ends), each grouping batches differently."""
    rng = random.Random(28)
    batches = [_rows(rng, rng.randint(1, 8), T0 + 1_500 * k) for k in range(60)]
    out = []
    for broker, fetch in ((1, 1), (2, 3), (3, 5)):
        d = root / f"cluster-2.8/broker-{broker}"
        d.mkdir(parents=True)
        w = PartitionWriter(d, "replicated", 0, era="leader" if broker == 1 else "follower",
                            leader_epoch=2, segment_bytes=20_000)
        for k in range(0, len(batches), fetch):
            w.append([v2_batch(rows, codec=1) for rows in batches[k:k + fetch]])
        w.close()
        _meta_properties(d, kraft=False, node=broker)
        bd = BrokerDir(d, {("replicated", 0): w})
        bd.finish()
        out.append(bd)
    return out


def build_corpus(root: Path) -> list[BrokerDir]:
    return [zk_legacy_dir(root), zk_27_dir(root), kraft_39_dir(root), *cluster_dirs(root)]
