"""``ObjectStorage``: the ``Storage`` contract over an object store (S3 and S3-compatible
servers, GCS, Azure Blob, or memory), through obstore (the Python binding of Rust's
``object_store``).

obstore because commits need conditional writes: ``put(mode="create")`` sends
``If-None-Match: *`` (S3, GCS, Azure all answer 412 to the loser); ``pyarrow.fs`` has no
conditional put and fsspec has one on S3 only. It also gives ranged and multi-range gets
and listing from an offset (S3 ``StartAfter``), which ``list_after`` uses.

URIs and options: see ``object_store_config`` (``s3://bucket/prefix``, ``gs://``,
``az://``, ``memory://name``; options override the ecosystem's environment variables).

Failures are named: ``BucketNotFoundError``, ``StorageAccessDeniedError`` (401/403),
``StorageUnreachableError`` (no answer within the bounded retries: by default 4 retries
within 30 s, 5 s to connect, 15 s of silence per read), ``InvalidStorageUriError`` and
``ConfigError`` (options), each a ``KafkaStorageError`` naming the URI and the cause. A
missing object is ``FileNotFoundError``, as the contract says; a missing bucket never is.

Thread-safe: obstore's stores are; the only mutable field, ``_bucket_seen``, is a flag
whose racing writes all store ``True``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
    UnknownConfigurationKeyError,
)
from obstore.store import MemoryStore, ObjectStore, from_url

from ..errors import (
    BucketNotFoundError,
    ConfigError,
    KafkaStorageError,
    StorageAccessDeniedError,
    StorageUnreachableError,
)
from .object_store_config import (
    OBJECT_SCHEMES,
    StorageOptions,
    is_object_uri,
    parse_object_uri,
    split_options,
)
from .storage import Entry, StoragePath

__all__ = ["OBJECT_SCHEMES", "ObjectStorage", "StorageOptions", "is_object_uri"]

_memory_stores: dict[str, MemoryStore] = {}
_memory_lock = threading.Lock()  # guards _memory_stores

# How obstore 0.12 words the failures it has no exception class for.
_UNREACHABLE = (
    "error sending request",
    "operation timed out",
    "timed out",
    "dns error",
    "connection refused",
    "connection reset",
)
_DENIED = ("403 Forbidden", "401 Unauthorized")
_RANGE_NOT_SATISFIABLE = ("416 Range Not Satisfiable", "Invalid range")


_METADATA_SERVICE = "169.254.169.254"
_OPTION_HINT = (
    "check the endpoint and the other storage options: aws_endpoint or "
    "AWS_ENDPOINT_URL must be http(s)://host[:port]"
)


def _is_panic(e: BaseException) -> bool:
    """Whether ``e`` is a panic of obstore's Rust code (pyo3's ``PanicException``, which
    derives from ``BaseException`` and cannot be imported by name): anything but the
    interpreter's own ``BaseException`` subclasses."""
    return not isinstance(e, (Exception, KeyboardInterrupt, SystemExit, GeneratorExit))


def _key(path: StoragePath) -> str:
    key = str(PurePosixPath(os.fspath(path))).lstrip("/")
    return "" if key == "." else key


def _entries(objects: Sequence[Mapping[str, Any]], prefix: str) -> list[Entry]:
    """Listed objects as entries named below ``prefix``, in name order, without the
    prefix's own directory marker: a zero-byte ``prefix/`` object, which S3 consoles make
    for "Create folder" and SeaweedFS leaves where a "directory" emptied. obstore strips
    the trailing ``/``, so it lists as the prefix itself, an entry with no name."""
    cut = len(prefix) + 1 if prefix else 0
    entries = [
        Entry(o["path"][cut:], int(o["size"]), int(o["last_modified"].timestamp() * 1000))
        for o in objects
        if o["path"][cut:]
    ]
    entries.sort(key=lambda e: e.name)
    return entries


def _cause(e: BaseException) -> str:
    # obstore appends a multi-line Rust debug dump after the message; the message is enough.
    return str(e).split("\n\nDebug source:", 1)[0].strip()


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
        try:
            result = self._storage._call(
                "GET", self._key, obstore.get, self._storage._store, self._key, options=options
            )
        except PreconditionError:
            raise KafkaStorageError(
                f"GET {self._storage.uri}/{self._key}: the object was replaced after it was "
                f"opened (ETag {self._etag} no longer matches)"
            ) from None
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{self._storage.uri}/{self._key} was deleted after it was opened"
            ) from None
        return bytes(result.bytes())

    def close(self) -> None:
        return None

    def __enter__(self) -> _ObjectRangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# obstore's from_url is overloaded per scheme, each taking its config, client and retry
# options as TypedDicts; split_options builds plain dicts from the user's strings, which no
# TypedDict admits statically, and obstore checks every key itself at run time
# (UnknownConfigurationKeyError, in ObjectStorage). Seen through this wider signature the
# call's result keeps its type (an ObjectStore), where an ignore would hide every error.
_from_url: Callable[..., ObjectStore] = from_url


class ObjectStorage:
    """A bucket prefix (or a memory store) as a ``Storage``.

    >>> st = ObjectStorage("memory://doc-example")
    >>> st.create("t-0/00000000000000000000.log", b"...")
    True
    """

    def __init__(
        self, uri: str, options: Mapping[str, object] | StorageOptions | None = None
    ) -> None:
        target = parse_object_uri(uri)
        self._uri = target.uri
        self._options = StorageOptions.of(options)
        settings = split_options(target, self._options.as_dict())
        self._retry = settings.retry_config
        self._bucket_seen = target.scheme == "memory"
        if target.scheme == "memory":
            with _memory_lock:
                self._store: Any = _memory_stores.setdefault(target.bucket, MemoryStore())
            return
        try:
            self._store = _from_url(
                target.url,
                config=settings.config or None,
                client_options=settings.client_options,
                retry_config=settings.retry_config,
            )
        except (UnknownConfigurationKeyError, ValueError, TypeError) as e:
            raise ConfigError(f"{self._uri}: bad object-store option: {self._cause(e)}") from None
        except Exception as e:  # obstore reports a bad option value as a generic error
            raise ConfigError(
                f"{self._uri}: cannot configure the object store: {self._cause(e)}"
            ) from None
        except BaseException as e:
            if _is_panic(e):
                raise ConfigError(
                    f"{self._uri}: the object-store client rejected its "
                    f"options ({_OPTION_HINT}): {self._cause(e)}"
                ) from None
            raise

    @property
    def options(self) -> StorageOptions:
        """The options given (their ``repr`` hides secrets)."""
        return self._options

    def _cause(self, e: BaseException) -> str:
        # The store's own text may quote a credential (a bad value, an access key id in
        # an S3 error body): redacted before it reaches a message.
        return self._options.redact(_cause(e))

    @property
    def uri(self) -> str:
        return self._uri

    def _call(self, op: str, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Runs one obstore request and maps its failure to the contract's errors."""
        where = f"{self._uri}/{key}" if key else self._uri
        try:
            result = fn(*args, **kwargs)
        except (AlreadyExistsError, PreconditionError):
            raise
        except (PermissionDeniedError, UnauthenticatedError) as e:
            raise StorageAccessDeniedError(
                f"{op} {where}: access denied; check the credentials (AWS_ACCESS_KEY_ID... or "
                f"options) and their permissions: {self._cause(e)}"
            ) from e
        except FileNotFoundError as e:
            if "NoSuchBucket" in str(e):
                raise self._no_bucket(op, where, e) from e
            if not self._bucket_seen:
                # A HEAD of a missing bucket answers a bare 404, like a missing object.
                self._check_bucket()
            raise FileNotFoundError(where) from None
        except Exception as e:  # obstore's GenericError: its text carries the HTTP status
            text = str(e)
            if "NoSuchBucket" in text:
                raise self._no_bucket(op, where, e) from e
            if _METADATA_SERVICE in text:
                raise StorageAccessDeniedError(
                    f"{op} {where}: no credentials: none were given, so the client asked "
                    f"the EC2 instance metadata service ({_METADATA_SERVICE}), which did not "
                    f"give any; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and "
                    f"AWS_ENDPOINT_URL for a store other than AWS), or the options "
                    f"aws_access_key_id, aws_secret_access_key, aws_endpoint (storage.* in "
                    f"Spark, --storage-option for seglog commands): "
                    f"{self._cause(e).splitlines()[0]}"
                ) from e
            if any(s in text for s in _DENIED):
                raise StorageAccessDeniedError(
                    f"{op} {where}: access denied: {self._cause(e)}"
                ) from e
            if any(s in text.lower() for s in _UNREACHABLE):
                raise StorageUnreachableError(
                    f"{op} {where}: the object store did not answer (up to "
                    f"{self._retry['max_retries']} retries within "
                    f"{self._retry['retry_timeout'].total_seconds():g} s; options "
                    f"max_retries, retry_timeout, connect_timeout, read_timeout, timeout): "
                    f"{self._cause(e)}"
                ) from e
            raise KafkaStorageError(f"{op} {where} failed: {self._cause(e)}") from e
        except BaseException as e:
            if _is_panic(e):
                # A panic of the Rust client (a BaseException: `except Exception` would
                # miss it and the process would die) on input it did not expect.
                raise KafkaStorageError(
                    f"{op} {where}: the object-store client failed on this request "
                    f"({_OPTION_HINT}): {self._cause(e)}"
                ) from None
            raise
        self._bucket_seen = True
        return result

    def _no_bucket(self, op: str, where: str, e: BaseException) -> BucketNotFoundError:
        return BucketNotFoundError(
            f"{op} {where}: the bucket of {self._uri} does not exist "
            f"({self._cause(e).splitlines()[0]})"
        )

    def _check_bucket(self) -> None:
        # One LIST of at most a page, once per instance: a missing bucket raises from _call.
        self._call("LIST", "", obstore.list_with_delimiter, self._store, None)

    def read(self, path: StoragePath) -> bytes:
        key = _key(path)
        return bytes(self._call("GET", key, obstore.get, self._store, key).bytes())

    def read_range(self, path: StoragePath, position: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``position``; fewer at the end, ``b""`` past it."""
        key = _key(path)
        if length <= 0:
            return b""
        try:
            return bytes(
                self._call(
                    "GET", key, obstore.get_range, self._store, key, start=position, length=length
                )
            )
        except KafkaStorageError as e:
            if any(s in str(e) for s in _RANGE_NOT_SATISFIABLE):
                return b""
            raise

    def read_range_view(self, path: StoragePath, position: int, length: int) -> memoryview:
        """``read_range`` without its copy: a view of the buffer obstore received the
        answer in (copying a large range costs about as much as receiving it)."""
        key = _key(path)
        if length <= 0:
            return memoryview(b"")
        try:
            return memoryview(
                self._call(
                    "GET", key, obstore.get_range, self._store, key, start=position, length=length
                )
            )
        except KafkaStorageError as e:
            if any(s in str(e) for s in _RANGE_NOT_SATISFIABLE):
                return memoryview(b"")
            raise

    def read_ranges(self, path: StoragePath, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The ``(position, length)`` ranges of one object, fetched concurrently (near ones
        coalesced into one request); each range must lie within the object."""
        key = _key(path)
        if not ranges:
            return []
        parts = self._call(
            "GET",
            key,
            obstore.get_ranges,
            self._store,
            key,
            starts=[p for p, _ in ranges],
            lengths=[n for _, n in ranges],
        )
        return [bytes(p) for p in parts]

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
        listed = self._call(
            "LIST", prefix, obstore.list_with_delimiter, self._store, prefix or None
        )
        entries = _entries(listed["objects"], prefix)
        cut = len(prefix) + 1 if prefix else 0
        entries += [Entry(p[cut:].rstrip("/"), 0, 0, True) for p in listed["common_prefixes"]]
        entries.sort(key=lambda e: e.name)
        return entries

    def list_after(self, path: StoragePath, start_after: str) -> list[Entry]:
        """Objects directly under ``path`` whose names sort after ``start_after``, in name
        order: the server starts the listing there (S3 ``StartAfter``), so the cost is the
        newer names, not the whole history."""
        prefix = _key(path)
        offset = (f"{prefix}/{start_after}" if prefix else start_after) or None
        stream = self._call(
            "LIST",
            prefix,
            obstore.list,
            self._store,
            prefix or None,
            offset=offset,
            chunk_size=1000,
        )
        objects = self._call("LIST", prefix, stream.collect)
        return [e for e in _entries(objects, prefix) if "/" not in e.name]

    def list_tree(self, path: StoragePath) -> list[Entry]:
        """Every object under ``path``, flat (no delimiter: a page of 1,000 names per
        request however many "directories" they sit in)."""
        prefix = _key(path)
        stream = self._call(
            "LIST",
            prefix,
            obstore.list,
            self._store,
            f"{prefix}/" if prefix else None,
            chunk_size=1000,
        )
        return _entries(self._call("LIST", prefix, stream.collect), prefix)

    def write_atomic(self, path: StoragePath, data: bytes | bytearray | memoryview) -> None:
        key = _key(path)
        # One PUT, never a multipart upload (obstore's default above 5 MiB): three more
        # requests, and a writer killed in the middle would leave hidden parts that no
        # listing shows and nothing collects. obstore takes any buffer, so a segment's
        # bytes are not copied (the call returns once the upload is done).
        self._call("PUT", key, obstore.put, self._store, key, data, use_multipart=False)

    def create(self, path: StoragePath, data: bytes | bytearray | memoryview) -> bool:
        """One ``PUT`` with ``If-None-Match: *``: ``False`` if anything is there.

        A request that failed on the wire may be retried by the client, and a retry of a
        ``PUT`` that in fact succeeded answers 412: the caller then sees ``False`` for its
        own object. Commit objects should therefore carry something unique to their writer,
        so a loser can read the winner and recognise itself.
        """
        key = _key(path)
        try:
            self._call(
                "PUT", key, obstore.put, self._store, key, data, mode="create", use_multipart=False
            )
        except (AlreadyExistsError, PreconditionError):
            return False
        return True

    def etag(self, path: StoragePath) -> str | None:
        """The object's ETag (None if the store gives none); ``FileNotFoundError`` if
        there is no object."""
        key = _key(path)
        tag = self._call("HEAD", key, obstore.head, self._store, key).get("e_tag")
        return str(tag) if tag else None

    def replace_if_match(
        self, path: StoragePath, data: bytes | bytearray | memoryview, etag: str
    ) -> bool:
        """One ``PUT`` with ``If-Match: <etag>``: ``False`` if the object there is not
        the one of ``etag`` any more (or is gone). Not part of the ``Storage`` contract:
        ``seglog probe-store`` uses it to see whether a store enforces the header."""
        key = _key(path)
        try:
            self._call(
                "PUT",
                key,
                obstore.put,
                self._store,
                key,
                data,
                mode={"e_tag": etag},
                use_multipart=False,
            )
        except (AlreadyExistsError, PreconditionError, FileNotFoundError):
            return False
        return True

    def delete(self, path: StoragePath) -> None:
        key = _key(path)
        try:
            self._call("DELETE", key, obstore.delete, self._store, key)
        except FileNotFoundError:
            return
