"""``LazyIndex``: a segment's offset or time index, opened on first use (Kafka's
``LazyIndex``).

A loaded log holds one open file per untouched segment instead of three: a partition
loaded only to append opens the indexes of its active segment alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import PurePath
from typing import Generic, TypeVar

from ..storage.storage import PosixStorage
from .offset_index import OffsetIndex
from .time_index import TimeIndex

IndexT = TypeVar("IndexT", OffsetIndex, TimeIndex)


class LazyIndex(Generic[IndexT]):
    """An index opened on first use. Thread-safe: ``_lock`` guards ``_index`` and
    ``path``."""

    def __init__(self, factory: Callable[[PurePath], IndexT],
                 path: PurePath | Callable[[], PurePath]) -> None:
        self._factory: Callable[[PurePath], IndexT] = factory
        # A function defers building the Path until the index is used (loading a long
        # partition then builds none for its untouched segments).
        self._path = path
        self._index: IndexT | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> PurePath:
        if callable(self._path):
            self._path = self._path()
        return self._path

    @path.setter
    def path(self, value: PurePath) -> None:
        self._path = value

    @property
    def is_loaded(self) -> bool:
        return self._index is not None

    def get(self) -> IndexT:
        index = self._index
        if index is None:
            with self._lock:
                if self._index is None:
                    self._index = self._factory(self.path)
                index = self._index
        return index

    def rename_to(self, path: PurePath, fs: PosixStorage) -> None:
        with self._lock:
            if self._index is not None:
                self._index.rename_to(path)
            elif fs.exists(self.path):
                fs.rename(self.path, path)
            self.path = path

    def update_path(self, path: PurePath) -> None:
        with self._lock:
            self.path = path
            if self._index is not None:
                self._index.path = path

    def flush(self) -> None:
        if self._index is not None:
            self._index.flush()

    def close(self) -> None:
        if self._index is not None:
            self._index.close()

    def close_handler(self) -> None:
        if self._index is not None:
            self._index.close_handler()

    def release(self) -> None:
        """Release the file as it is (the writer trimmed it); reopened on next use."""
        with self._lock:
            if self._index is not None:
                self._index.close_handler()
                self._index = None
