"""The bucket engine against plain PUT/GET of the same bytes to the same S3 server, same
run; and the cost of a topic with 10,000 segments.

Run: ``python benchmarks/bench_bucket.py [--append-mib 1 8] [--appends 16]
[--pipeline-mib 1 8] [--window 4] [--linger-ms 5] [--group-partitions 8] [--group-mib 1]
[--group-commits 8] [--repeat 3] [--segments 10000] [--segments-per-commit 500]``

A moto server (the test suite's, ``tests/s3_server.py``) is started on 127.0.0.1.

* **Append** (one partition): ``LogManager("s3://...").append`` of one buffer of encoded
  v2 batches (64 KiB batches of 1 KiB records; ``--append-mib`` MiB per append,
  ``--appends`` per round, each round a new topic) against plain PUTs of the same bytes,
  one object per append, by obstore and by boto3. An append validates its batches (CRC,
  sizes), cuts them into a segment, uploads the ``.log`` (its small indexes travel inline
  in the commit) and creates the commit object; the peer only PUTs. Ratio: seglog's MB/s
  over the faster peer's (goal >= 0.8).
* **Pipelined append** (one partition): ``--appends`` appends of ``--pipeline-mib`` MiB
  through ``append_async`` with ``max_in_flight_appends = --window``, then ``flush``,
  against the same PUTs made by ``--window`` threads (at most ``--window`` in flight, the
  same concurrency). Uploads overlap each other and the commits; a finished append waits
  for the uploads running behind it (``linger.ms``, ``--linger-ms``; while ``flush``
  waits, until its uploads ended) and one commit takes them all: "commits/append" is the
  commit requests paid per append (1 MiB x 16: 0.06, one per round; main's code before
  the linger paid 0.19-0.38). Ratio over nine runs alternated with that code, load
  1.4-2.0: 0.82-1.09, median 0.86 (before: 0.70-0.83, median 0.75); at ``--appends 64``
  (the caller blocks on ``max_in_flight_bytes``, and a blocked caller gets a commit at
  once): 0.79-0.91, median 0.85 (before 0.74-0.85, median 0.81).
* **Group commit** (several partitions): ``append_many`` of ``--group-mib`` MiB to each of
  ``--group-partitions`` partitions per commit (``--group-commits`` per round): every
  ``.log`` uploaded at once, then one commit. The peers PUT the same objects with the same
  concurrency (a thread per object, all at once), then wait for all, per group.
* **Read**: a partition of the single-partition segments read whole through the bucket
  reader (``get_log(...).read_chunks``, a fresh read-only manager per round) against plain
  GETs of the same ``.log`` objects (obstore and boto3). Ratio as above (goal >= 0.8).
* **10,000 segments**: one partition built by real appends whose batches each become a
  segment (``segment.bytes`` below two batches), ``--segments-per-commit`` segments per
  commit. Through a counting ``Storage`` wrapper (the tests' ``CountingStorage``): the
  requests and time of opening it (a fresh manager), of one refresh that finds one new
  commit, and of one append commit (an append of one batch).

The floor of a synchronous append: two requests, one after the other (the ``.log`` PUT,
then the conditional commit PUT, which may only name objects that exist). Against one PUT
of the same bytes, the ratio is at best ``put / (put + commit)``, printed as "floor" from a
commit-sized create timed in the same rounds: on moto a create costs 1.6-2.2 ms and a
1 MiB PUT 4.0-4.4 ms, so about 0.7 at 1 MiB and above 0.9 at 8 MiB. A group commit pays
the commit once for all its partitions. (docs/object-storage.md, "Performance", has the
figures.)

Each figure is the best of ``--repeat`` rounds, contenders interleaved so a slow moment
of the shared machine hits each. moto is slow and single-process, so absolute figures say
little; the ratios say what seglog's layers cost.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import obstore
import pyarrow as pa
from obstore.store import from_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "logstore"))
from bucket_helpers import CountingStorage  # noqa: E402
from s3_server import MotoServer  # noqa: E402

from seglog.logstore.bucket.bucket_manager import BucketLogManager  # noqa: E402
from seglog.logstore.manager.log_manager import LogManager  # noqa: E402
from seglog.logstore.records.record_codec import encode_batches  # noqa: E402
from seglog.logstore.records.record_format import read_batch_header  # noqa: E402
from seglog.logstore.storage.object_storage import ObjectStorage  # noqa: E402

TS = 1_700_000_000_000
RECORD_BYTES = 1024
BATCH_BYTES = 64 << 10


def records(mib: int) -> bytearray:
    """Whole 64 KiB v2 batches of 1 KiB records (half random, half repeated), as many as
    fit in ``mib`` MiB."""
    n = (mib << 20) // RECORD_BYTES
    body = os.urandom(RECORD_BYTES // 2)
    values = pa.array([body + b"%0512d" % i for i in range(n)])
    keys = pa.array([b"key-%d" % (i % 1000) for i in range(n)])
    buf = encode_batches(values, keys, pa.array([TS + i for i in range(n)], pa.int64()),
                         max_batch_bytes=BATCH_BYTES)
    end = 0
    while (h := read_batch_header(buf, end)) is not None and h.end_position <= mib << 20:
        end = h.end_position
    return buf[:end]


def best_seconds(run: Callable[[int], None], repeat: int) -> float:
    best = float("inf")
    for r in range(repeat):
        start = time.perf_counter()
        run(r)
        best = min(best, time.perf_counter() - start)
    return best


def interleaved(contenders: dict[str, Callable[[int], None]], repeat: int) -> dict[str, float]:
    """Best seconds of each contender; round r runs every contender once."""
    best = dict.fromkeys(contenders, float("inf"))
    for r in range(repeat):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn(r)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def bench_append_and_read(uri: str, plain, boto, bucket: str, mib: int, appends: int,
                          repeat: int) -> list[tuple[str, float | tuple[float, float]]]:
    buf = records(mib)
    total = len(buf) * appends
    mgr = LogManager(uri)
    topics = []

    def seglog_append(r: int) -> None:
        topic = f"a{mib}-{r}"
        mgr.create_topic(topic, 1)
        for _ in range(appends):
            mgr.append(topic, 0, buf)
        topics.append(topic)

    def obstore_put(r: int) -> None:
        for i in range(appends):
            obstore.put(plain, f"plain/put{mib}/{r}/{i:08d}.log", buf, use_multipart=False)

    def boto_put(r: int) -> None:
        for i in range(appends):
            boto.put_object(Bucket=bucket, Key=f"plain/boto{mib}/{r}/{i:08d}.log",
                            Body=bytes(buf))

    commit = b'{"commit": "%s"}' % (b"x" * 600)  # about an append commit's size

    def obstore_create(r: int) -> None:
        for i in range(appends):
            obstore.put(plain, f"plain/create{mib}/{r}/{i:08d}.json", commit, mode="create")

    put = interleaved({"seglog append": seglog_append, "obstore put": obstore_put,
                       "boto3 put": boto_put, "commit-sized create": obstore_create}, repeat)
    topic = topics[0]
    keys = [s.key + ".log" for s in mgr.state.partition(topic, 0).segments]
    mgr.close()

    # A fresh read-only manager per round (nothing cached), opened before the clock
    # starts: the peer is not timed listing or finding its keys either.
    readers = [LogManager(uri, read_only=True) for _ in range(repeat)]

    def seglog_read(r: int) -> None:
        log = readers[r].get_log(topic, 0)
        got = sum(len(c) for c in log.read_chunks(log.log_start_offset, log.high_watermark))
        assert got == total, (got, total)

    prefix = uri.split(f"s3://{bucket}/", 1)[1]

    def obstore_get(_: int) -> None:
        got = sum(len(obstore.get(plain, f"{prefix}/{k}").bytes()) for k in keys)
        assert got == total, (got, total)

    def boto_get(_: int) -> None:
        got = sum(len(boto.get_object(Bucket=bucket, Key=f"{prefix}/{k}")["Body"].read())
                  for k in keys)
        assert got == total, (got, total)

    get = interleaved({"seglog read": seglog_read, "obstore get": obstore_get,
                       "boto3 get": boto_get}, repeat)
    for reader in readers:
        reader.close()
    create = put.pop("commit-sized create")
    best_put = min(put["obstore put"], put["boto3 put"])
    out: list[tuple[str, float | tuple[float, float]]] = [
        (f"{name} {mib} MiB x {appends}", total / s / 1e6) for name, s in put.items()]
    out.append((f"one {mib} MiB PUT, one commit create",
                (best_put / appends * 1000, create / appends * 1000)))
    out.append((f"floor put/(put+create) ({mib} MiB)", best_put / (best_put + create)))
    out.append((f"ratio append/best PUT ({mib} MiB)", best_put / put["seglog append"]))
    out += [(f"{name} {mib} MiB x {appends}", total / s / 1e6) for name, s in get.items()]
    out.append((f"ratio read/best GET ({mib} MiB)",
                min(get["obstore get"], get["boto3 get"]) / get["seglog read"]))
    return out


def bench_pipeline(uri: str, plain, boto, bucket: str, mib: int, appends: int, window: int,
                   repeat: int, linger_ms: int | None) -> list[tuple[str, float]]:
    buf = records(mib)
    total = len(buf) * appends
    data = bytes(buf)
    mgr = BucketLogManager(uri, config=None if linger_ms is None else {"linger.ms": linger_ms})
    mgr.max_in_flight_appends = window
    commits = []
    for r in range(repeat):  # not timed: the peer creates nothing either
        mgr.create_topic(f"p{mib}-{r}", 1)

    def seglog_async(r: int) -> None:
        topic = f"p{mib}-{r}"
        before = mgr.state.version
        futures = [mgr.append_async(topic, 0, buf) for _ in range(appends)]
        mgr.flush()
        end = mgr.state.partition(topic, 0).high_watermark
        assert futures[-1].result().last_offset + 1 == end, (futures[-1].result(), end)
        commits.append(mgr.state.version - before)

    def windowed(put: Callable[[str], None], name: str, r: int) -> None:
        with ThreadPoolExecutor(window) as pool:
            futures = [pool.submit(put, f"plain/{name}{mib}w{window}/{r}/{i:08d}.log")
                       for i in range(appends)]
        for future in futures:
            future.result()

    def obstore_put(r: int) -> None:
        windowed(lambda key: obstore.put(plain, key, buf, use_multipart=False), "pipe", r)

    def boto_put(r: int) -> None:
        windowed(lambda key: boto.put_object(Bucket=bucket, Key=key, Body=data), "bpipe", r)

    put = interleaved({"seglog append_async": seglog_async, "obstore put": obstore_put,
                       "boto3 put": boto_put}, repeat)
    mgr.close()
    what = f"{mib} MiB x {appends}, window {window}"
    out = [(f"{name} {what}", total / s / 1e6) for name, s in put.items()]
    out.append((f"commits/append ({mib} MiB, window {window})", min(commits) / appends))
    out.append((f"ratio async/best PUT ({mib} MiB, w {window})",
                min(put["obstore put"], put["boto3 put"]) / put["seglog append_async"]))
    return out


def bench_group_commit(uri: str, plain, boto, bucket: str, partitions: int, mib: int,
                       commits: int, repeat: int) -> list[tuple[str, float]]:
    buf = records(mib)
    total = len(buf) * partitions * commits
    mgr = LogManager(uri)

    def seglog_group(r: int) -> None:
        topic = f"g{mib}-{r}"
        mgr.create_topic(topic, partitions)
        for _ in range(commits):
            mgr.append_many({(topic, p): buf for p in range(partitions)})

    def concurrent_puts(put: Callable[[str], None], name: str, r: int) -> None:
        with ThreadPoolExecutor(partitions) as pool:
            for i in range(commits):
                keys = [f"plain/{name}{mib}x{partitions}/{r}/{i:08d}-{p}.log"
                        for p in range(partitions)]
                for future in [pool.submit(put, key) for key in keys]:
                    future.result()

    def obstore_put(r: int) -> None:
        concurrent_puts(lambda key: obstore.put(plain, key, buf, use_multipart=False),
                        "group", r)

    data = bytes(buf)

    def boto_put(r: int) -> None:
        concurrent_puts(lambda key: boto.put_object(Bucket=bucket, Key=key, Body=data),
                        "bgroup", r)

    put = interleaved({"seglog append_many": seglog_group, "obstore put": obstore_put,
                       "boto3 put": boto_put}, repeat)
    mgr.close()
    what = f"{partitions} x {mib} MiB x {commits}"
    out = [(f"{name} {what}", total / s / 1e6) for name, s in put.items()]
    out.append((f"ratio group/best PUT ({partitions} x {mib} MiB)",
                min(put["obstore put"], put["boto3 put"]) / put["seglog append_many"]))
    return out


def bench_many_segments(uri: str, segments: int, per_commit: int) -> list[str]:
    one = encode_batches(pa.array([b"x" * 100]), timestamps=pa.array([TS], pa.int64()))
    config = {"segment.bytes": str(len(one) + 1)}
    lines = []
    start = time.perf_counter()
    with BucketLogManager(uri) as mgr:
        mgr.create_topic("big", 1, config)
        done = 0
        while done < segments:
            n = min(per_commit, segments - done)
            mgr.append("big", 0, bytes(one) * n)
            done += n
        version = mgr.state.version
    lines.append(f"built {segments} segments in {version} commits of up to {per_commit} "
                 f"segments: {time.perf_counter() - start:.1f} s")

    counting = CountingStorage(ObjectStorage(uri))
    start = time.perf_counter()
    reader = BucketLogManager(counting, read_only=True)
    open_s = time.perf_counter() - start
    n_segments = len(reader.state.partition("big", 0).segments)
    lines.append(f"open (fresh manager, state at version {reader.state.version}, "
                 f"{n_segments} segments): {open_s * 1000:.0f} ms, "
                 f"{counting.total()} requests {dict(counting.counts)}")
    writer_storage = CountingStorage(ObjectStorage(uri))
    with BucketLogManager(writer_storage) as writer:
        writer_storage.reset()
        start = time.perf_counter()
        writer.append("big", 0, one)
        commit_s = time.perf_counter() - start
        lines.append(f"one append commit (version {writer.state.version}): "
                     f"{commit_s * 1000:.0f} ms, {writer_storage.total()} requests "
                     f"{dict(writer_storage.counts)}")
    counting.reset()
    start = time.perf_counter()
    reader.refresh()
    refresh_s = time.perf_counter() - start
    lines.append(f"one refresh finding 1 new commit: {refresh_s * 1000:.0f} ms, "
                 f"{counting.total()} requests {dict(counting.counts)}")
    reader.close()
    return lines


def _line(name: str, value: float | tuple[float, float]) -> str:
    if isinstance(value, tuple):
        return f"  {name:36s} {value[0]:8.2f} ms {value[1]:8.2f} ms"
    unit = "" if name.startswith(("ratio", "floor", "commits/")) else " MB/s"
    return f"  {name:36s} {value:8.2f}{unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--append-mib", type=int, nargs="*", default=[1, 8])
    parser.add_argument("--appends", type=int, default=16)
    parser.add_argument("--pipeline-mib", type=int, nargs="*", default=[1, 8])
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--linger-ms", type=int, default=None,
                        help="append_async's linger_ms (default: the manager's)")
    parser.add_argument("--group-partitions", type=int, default=8)
    parser.add_argument("--group-mib", type=int, default=1)
    parser.add_argument("--group-commits", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--segments", type=int, default=10_000)
    parser.add_argument("--segments-per-commit", type=int, default=500)
    args = parser.parse_args()

    with MotoServer() as server:
        os.environ.update(server.env)
        bucket = server.create_bucket("seglog-bench")
        plain = from_url(f"s3://{bucket}", client_options={"allow_http": True})
        boto = server.client()
        print(f"moto at {server.endpoint}; best of {args.repeat}")
        for mib in args.append_mib:
            for name, value in bench_append_and_read(
                    f"s3://{bucket}/logs{mib}", plain, boto, bucket, mib, args.appends,
                    args.repeat):
                print(_line(name, value))
        for mib in args.pipeline_mib:
            for name, value in bench_pipeline(
                    f"s3://{bucket}/pipeline{mib}", plain, boto, bucket, mib, args.appends,
                    args.window, args.repeat, args.linger_ms):
                print(_line(name, value))
        if args.group_partitions:
            for name, value in bench_group_commit(
                    f"s3://{bucket}/group", plain, boto, bucket, args.group_partitions,
                    args.group_mib, args.group_commits, args.repeat):
                print(_line(name, value))
        if args.segments:
            for line in bench_many_segments(f"s3://{bucket}/many", args.segments,
                                            args.segments_per_commit):
                print(f"  {line}")


if __name__ == "__main__":
    main()
