"""The backends a storage-level test runs over, as one value (see the ``storage`` fixture
in ``tests/conftest.py``)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from seglog.logstore.storage.storage import Storage

STORAGE_KINDS = ("posix", "memory", "s3")


@dataclass(frozen=True)
class StorageUnderTest:
    """A fresh, empty place to keep a log dir, and the ``Storage`` over it.

    ``location`` is what a user would give seglog (a directory path, ``memory://<name>``,
    ``s3://<bucket>/<prefix>``); ``path(...)`` names a file or object in the form this
    ``storage`` takes (a filesystem path for posix, a key relative to the root otherwise).
    """

    kind: str
    location: str
    storage: Storage

    def path(self, *parts: str) -> str:
        if self.kind == "posix":
            return os.path.join(self.location, *parts)
        return "/".join(parts)

    def makedirs(self, *parts: str) -> str:
        """The path of a directory, made where directories exist (posix: ``write_atomic``
        and ``create`` do not make parents; an object store has no directories)."""
        path = self.path(*parts)
        if self.kind == "posix":
            os.makedirs(path, exist_ok=True)
        return path
