"""``.kafka_cleanshutdown``: the marker a writer leaves when it closes cleanly, and the
proof a paused writer needs that nothing wrote its log dirs since.

Kafka only checks that the file exists (its content is ``{"version":0,"brokerEpoch":N}``);
seglog writes the same JSON with one more key, ``"seglogWriter"``, a random token per
clean close or pause. Every writer removes the marker once its open succeeded and writes
its own at its clean close (a Kafka broker writes one without the key), so a marker that
still holds the token a paused ``LogManager`` wrote proves that no writer opened the dir
since: the paused manager's loaded state is still the dir's.

Edits by anything that is not a writer (a person, a test, a damaged disk) leave the marker
alone, so the pause also keeps a ``Fingerprint`` (identity, size and mtime of the marker,
the checkpoints and, per loaded partition, of its directory and active segment) and
``resume`` trusts the state only if it is unchanged: O(partitions) ``stat`` calls, never
a listing. A paused writer whose proof fails is dropped, and the caller opens afresh.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from pathlib import Path, PurePath

from ..storage.file_names import CLEAN_SHUTDOWN_FILE
from ..storage.storage import LOCAL

Fingerprint = tuple[tuple[str, int, int, int, int] | tuple[str], ...]
"""Per path: (path, st_dev, st_ino, st_size, st_mtime_ns), or (path,) if it is missing."""


def marker_content(token: str | None = None) -> bytes:
    """The marker's bytes: Kafka's JSON, plus the writer's token when given."""
    doc: dict[str, object] = {"version": 0, "brokerEpoch": -1}
    if token is not None:
        doc["seglogWriter"] = token
    return json.dumps(doc, separators=(",", ":")).encode()


def new_token() -> str:
    return uuid.uuid4().hex


def holds_token(log_dir: Path, token: str) -> bool:
    """Whether ``log_dir``'s marker exists and is the one written with ``token``."""
    try:
        return LOCAL.read(log_dir / CLEAN_SHUTDOWN_FILE) == marker_content(token)
    except FileNotFoundError:
        return False


def fingerprint(paths: Iterable[PurePath]) -> Fingerprint:
    out: list[tuple[str, int, int, int, int] | tuple[str]] = []
    for path in paths:
        try:
            st = LOCAL.stat(path)
        except FileNotFoundError:
            out.append((str(path),))
            continue
        out.append((str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)
