"""The create of a commit object and how its outcome is settled: create-if-absent
(``Storage.create``) has one winner, and a commit's bytes (writer id, timestamp) are
unique to the attempt, so reading the key back says whose it is when the answer did not
(a client that retried a PUT which had landed, a create that failed on the wire)."""

from __future__ import annotations

from ..errors import (
    BucketNotFoundError,
    CommitOutcomeUnknownError,
    KafkaStorageError,
    StorageAccessDeniedError,
)
from ..storage.storage import Storage


def create_settled(
    storage: Storage, key: str, data: bytes, operation: str
) -> tuple[bool, bytes | None]:
    """Create commit ``key`` (``data``, of ``operation``): True if the object there is
    ours, False if another writer's. Reading the key settles what the answer did not
    say: a create answered "exists" may be the client's retry of our own PUT that
    succeeded unseen, and one that failed on the wire may have landed. When nothing is
    there the same bytes are created again: if the first PUT lands late the server
    refuses it. Returns (ours, the bytes found there when another writer's: the loser
    folds them without reading them again)."""
    cause: KafkaStorageError | None = None
    for _ in range(2):
        try:
            if storage.create(key, data):
                return True, None
            cause = None
        except (StorageAccessDeniedError, BucketNotFoundError):
            raise  # refused outright: nothing was written
        except KafkaStorageError as e:
            cause = e
        try:
            found = storage.read(key)
            return (True, None) if found == data else (False, found)
        except FileNotFoundError:
            if cause is None:
                return False, None  # "exists" yet gone: not ours, the refresh will tell
        except KafkaStorageError as e:
            cause = e
            break
    raise CommitOutcomeUnknownError(
        f"{storage.uri}/{key}: the outcome of this {operation} is unknown: the "
        f"create of the commit failed ({cause}) and the bucket could not say whether it landed; "
        f"it may be visible. Refresh and look before doing it again (a blindly "
        f"retried append may duplicate its records)"
    ) from cause


def create_unsettled(
    storage: Storage, key: str, data: bytes, operation: str
) -> tuple[bool, bytes | None]:
    """Create commit ``key``: (True, None) ours; (False, None) "exists", not read
    (our own create retried by the client, or another writer's); (False, bytes)
    another writer's, read while settling a create that failed on the wire."""
    try:
        return storage.create(key, data), None
    except (StorageAccessDeniedError, BucketNotFoundError):
        raise  # refused outright: nothing was written
    except KafkaStorageError:
        return create_settled(storage, key, data, operation)
