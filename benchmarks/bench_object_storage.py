"""ObjectStorage against plain PUT/GET of the same bytes to the same S3 server, same run.

Run: ``python benchmarks/bench_object_storage.py [--objects 40] [--size-kib 1024]
[--repeat 3]``

A moto server (the test suite's, ``tests/s3_server.py``) is started on 127.0.0.1. For each
round, the same payloads are written and read back by:

* seglog: ``ObjectStorage.write_atomic`` / ``create`` (If-None-Match) / ``read`` /
  ``read_range``;
* peer obstore: ``obstore.put`` (plain, and ``mode="create"`` for ``create``: moto
  serves a conditional PUT slower than a plain one) / ``obstore.get`` on a store built the
  plain way;
* peer boto3: ``put_object`` / ``get_object``.

Each figure is the best of ``--repeat`` rounds (MB/s); the ratio is seglog's throughput
over the faster peer's (goal >= 0.8). moto is slow and single-process, so absolute figures
say little; the ratio says what seglog's layer costs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import obstore
from obstore.store import from_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from s3_server import MotoServer  # noqa: E402

from seglog.logstore.storage.object_storage import ObjectStorage  # noqa: E402


def _best_mb_s(run: Callable[[int], None], total_bytes: int, repeat: int) -> float:
    best = float("inf")
    for r in range(repeat):
        start = time.perf_counter()
        run(r)
        best = min(best, time.perf_counter() - start)
    return total_bytes / best / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=40)
    parser.add_argument("--size-kib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    payloads = [os.urandom(args.size_kib * 1024) for _ in range(args.objects)]
    total = sum(len(p) for p in payloads)

    with MotoServer() as server:
        os.environ.update(server.env)
        bucket = server.create_bucket("seglog-bench")
        seglog = ObjectStorage(f"s3://{bucket}/seglog")
        plain = from_url(f"s3://{bucket}/plain", client_options={"allow_http": True})
        boto = server.client()

        def seglog_put(r: int) -> None:
            for i, p in enumerate(payloads):
                seglog.write_atomic(f"r{r}/{i:08d}.log", p)

        def seglog_create(r: int) -> None:
            for i, p in enumerate(payloads):
                seglog.create(f"c{r}/{i:08d}.log", p)

        def obstore_put(r: int) -> None:
            for i, p in enumerate(payloads):
                obstore.put(plain, f"r{r}/{i:08d}.log", p)

        def obstore_create(r: int) -> None:
            for i, p in enumerate(payloads):
                obstore.put(plain, f"c{r}/{i:08d}.log", p, mode="create")

        def boto_put(r: int) -> None:
            for i, p in enumerate(payloads):
                boto.put_object(Bucket=bucket, Key=f"boto/r{r}/{i:08d}.log", Body=p)

        def seglog_get(_: int) -> None:
            for i in range(len(payloads)):
                seglog.read(f"r0/{i:08d}.log")

        def seglog_get_range(_: int) -> None:
            for i, p in enumerate(payloads):
                seglog.read_range(f"r0/{i:08d}.log", 0, len(p))

        def obstore_get(_: int) -> None:
            for i in range(len(payloads)):
                bytes(obstore.get(plain, f"r0/{i:08d}.log").bytes())

        def boto_get(_: int) -> None:
            for i in range(len(payloads)):
                boto.get_object(Bucket=bucket, Key=f"boto/r0/{i:08d}.log")["Body"].read()

        # Interleaved so that a slow moment of the shared machine hits every contender.
        results: dict[str, float] = {}
        for name, fn in [("boto3 put", boto_put), ("obstore put", obstore_put),
                         ("seglog write_atomic", seglog_put),
                         ("obstore create", obstore_create), ("seglog create", seglog_create),
                         ("boto3 get", boto_get), ("obstore get", obstore_get),
                         ("seglog read", seglog_get), ("seglog read_range", seglog_get_range)]:
            results[name] = _best_mb_s(fn, total, args.repeat)

    print(f"{args.objects} objects x {args.size_kib} KiB, best of {args.repeat}, "
          f"moto at 127.0.0.1")
    for name, mb_s in results.items():
        print(f"  {name:22s} {mb_s:8.1f} MB/s")
    put_peer = max(results["boto3 put"], results["obstore put"])
    get_peer = max(results["boto3 get"], results["obstore get"])
    print(f"ratio write_atomic/best plain PUT: {results['seglog write_atomic'] / put_peer:.2f}")
    print(f"ratio create/obstore create:       "
          f"{results['seglog create'] / results['obstore create']:.2f}")
    print(f"ratio read/best plain GET:         {results['seglog read'] / get_peer:.2f}")
    print(f"ratio read_range/best plain GET:   {results['seglog read_range'] / get_peer:.2f}")


if __name__ == "__main__":
    main()
