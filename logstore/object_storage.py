"""``ObjectStorage``: the ``Storage`` contract over an object store (S3 and S3-compatible
servers, GCS, Azure Blob, or memory), through obstore (the Python binding of Rust's
``object_store``).

obstore because commits need conditional writes: ``put(mode="create")`` sends
``If-None-Match: *`` (S3, GCS, Azure all answer 412 to the loser), ``mode={"e_tag": ...}``
sends ``If-Match``; ``pyarrow.fs`` has neither and fsspec has them on S3 only.

A URI is ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://container/prefix``
(also ``abfs://``, ``azure://``) or ``memory://name`` (one in-process store per name, for
tests). Endpoint and credentials come from the ecosystem's environment variables
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
``AWS_ALLOW_HTTP``; ``GOOGLE_SERVICE_ACCOUNT``...; ``AZURE_STORAGE_ACCOUNT_NAME``...),
and ``options`` override them by the same names.
"""

from __future__ import annotations

import os
import threading
from pathlib import PurePosixPath
from typing import Any

import obstore
from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError
from obstore.store import MemoryStore, from_url

from .errors import KafkaStorageError
from .storage import Entry, StoragePath

OBJECT_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "azure", "memory")

_memory_stores: dict[str, MemoryStore] = {}
_memory_lock = threading.Lock()


def is_object_uri(location: str | os.PathLike[str]) -> bool:
    """True for ``scheme://...`` with a scheme of an object store; local paths are False."""
    if not isinstance(location, str):
        return False
    scheme, sep, _ = location.partition("://")
    return bool(sep) and scheme.lower() in OBJECT_SCHEMES


def _key(path: StoragePath) -> str:
    return str(PurePosixPath(os.fspath(path))).lstrip("/")


class _ObjectRangeReader:
    """One object as seen at open (size and ETag); a read of a replaced object fails."""

    def __init__(self, storage: ObjectStorage, key: str) -> None:
        self._storage = storage
        self._key = key
        meta = storage._call("HEAD", key, obstore.head, storage._store, key)
        self._size = int(meta["size"])
        self._etag = meta.get("e_tag")

    @property
    def size(self) -> int:
        return self._size

    def pread(self, position: int, length: int) -> bytes:
        end = min(position + length, self._size)
        if end <= position:
            return b""
        options: dict[str, Any] = {"range": (position, end)}
        if self._etag:
            options["if_match"] = self._etag
        result = self._storage._call("GET", self._key, obstore.get, self._storage._store,
                                     self._key, options=options)
        return bytes(result.bytes())

    def close(self) -> None:
        return None


class ObjectStorage:
    """A bucket prefix (or a memory store) as a ``Storage``."""

    def __init__(self, uri: str, options: dict[str, str] | None = None) -> None:
        if not is_object_uri(uri):
            raise KafkaStorageError(f"{uri!r} is not an object-store URI "
                                    f"(schemes: {', '.join(OBJECT_SCHEMES)})")
        self._uri = uri.rstrip("/")
        scheme, _, rest = self._uri.partition("://")
        if scheme.lower() == "memory":
            with _memory_lock:
                self._store: Any = _memory_stores.setdefault(rest, MemoryStore())
        else:
            url = "s3://" + rest if scheme.lower() == "s3a" else self._uri
            self._store = from_url(url, config=dict(options or {}) or None)

    @property
    def uri(self) -> str:
        return self._uri

    def _call(self, op: str, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (FileNotFoundError, NotFoundError):
            raise FileNotFoundError(f"{self._uri}/{key}") from None
        except (AlreadyExistsError, PreconditionError):
            raise
        except Exception as e:  # obstore's errors carry the request; ours name the object
            raise KafkaStorageError(f"{op} {self._uri}/{key} failed: {e}") from e

    def read(self, path: StoragePath) -> bytes:
        key = _key(path)
        return bytes(self._call("GET", key, obstore.get, self._store, key).bytes())

    def read_range(self, path: StoragePath, position: int, length: int) -> bytes:
        key = _key(path)
        if length <= 0:
            return b""
        return bytes(self._call("GET", key, obstore.get_range, self._store, key,
                                start=position, length=length))

    def open_range_reader(self, path: StoragePath) -> _ObjectRangeReader:
        return _ObjectRangeReader(self, _key(path))

    def size(self, path: StoragePath) -> int:
        key = _key(path)
        return int(self._call("HEAD", key, obstore.head, self._store, key)["size"])

    def exists(self, path: StoragePath) -> bool:
        try:
            self.size(path)
        except FileNotFoundError:
            return False
        return True

    def list_dir(self, path: StoragePath) -> list[Entry]:
        prefix = _key(path)
        listed = self._call("LIST", prefix, obstore.list_with_delimiter, self._store,
                            prefix or None)
        cut = len(prefix) + 1 if prefix else 0
        entries = [Entry(o["path"][cut:], int(o["size"]),
                         int(o["last_modified"].timestamp() * 1000)) for o in listed["objects"]]
        entries += [Entry(p[cut:].rstrip("/"), 0, 0, True) for p in listed["common_prefixes"]]
        entries.sort(key=lambda e: e.name)
        return entries

    def write_atomic(self, path: StoragePath, data: bytes | bytearray | memoryview) -> None:
        key = _key(path)
        self._call("PUT", key, obstore.put, self._store, key, bytes(data))

    def create(self, path: StoragePath, data: bytes | bytearray | memoryview) -> bool:
        key = _key(path)
        try:
            self._call("PUT", key, obstore.put, self._store, key, bytes(data), mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        return True

    def delete(self, path: StoragePath) -> None:
        key = _key(path)
        try:
            self._call("DELETE", key, obstore.delete, self._store, key)
        except FileNotFoundError:
            return
