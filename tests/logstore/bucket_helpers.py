"""Helpers of the bucket engine's tests: a ``Storage`` wrapper that counts requests, and
unique memory:// stores."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

from seglog.logstore.object_storage import ObjectStorage
from seglog.logstore.storage import Storage


def memory_uri() -> str:
    return f"memory://bucket-test-{uuid.uuid4().hex}"


class CountingStorage:
    """Forwards to ``inner``; ``counts`` holds the requests made, by operation (a
    ranged reader's ``pread`` counts as ``read_range``)."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.counts: Counter[str] = Counter()
        self.fail_creates = 0  # the next n creates answer False (another writer won)

    @property
    def uri(self) -> str:
        return self.inner.uri

    def reset(self) -> None:
        self.counts.clear()

    def total(self) -> int:
        return sum(self.counts.values())

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] += 1
            if name == "create" and self.fail_creates:
                self.fail_creates -= 1
                return False
            result = attr(*args, **kwargs)
            if name == "open_range_reader":
                return _CountingReader(result, self.counts)
            return result

        return counted


class _CountingReader:
    def __init__(self, inner: Any, counts: Counter[str]) -> None:
        self._inner = inner
        self._counts = counts

    @property
    def size(self) -> int:
        return self._inner.size

    def pread(self, position: int, length: int) -> bytes:
        self._counts["read_range"] += 1
        return self._inner.pread(position, length)

    def close(self) -> None:
        self._inner.close()


def counting_memory_storage() -> CountingStorage:
    return CountingStorage(ObjectStorage(memory_uri()))


@contextlib.contextmanager
def moto_s3() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 with one bucket; yields ``s3://<bucket>`` and sets
    the standard AWS variables for the time it runs (restored after)."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _host, port = server.get_host_and_port()
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "test",
           "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1",
           "AWS_ALLOW_HTTP": "true"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="test",
                     aws_secret_access_key="test",
                     region_name="us-east-1").create_bucket(Bucket="seglog-tests")
        yield "s3://seglog-tests"
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()
