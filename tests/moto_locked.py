"""moto's S3 server with atomic conditional PUTs: ``python tests/moto_locked.py -H ... -p ...``
(the arguments of ``python -m moto.server``).

moto 5.2.5 checks ``If-None-Match: *`` and ``If-Match`` in ``S3Response.put_object`` by
looking the key up, then stores the new key a few statements later, with nothing held
between: its server is threaded, so two racing creates of one key can both pass the check
and both answer 200 (the later one replaces the earlier). On a loaded machine that
happened in ~4 of 60 trials of 8 racing threads. seglog's commit protocol stands on that
check-and-set, so the suite runs moto through this shim: every ``put_object`` of one key
runs under a lock of that key, which makes the check and the store one step, as on a real
store. Test-side only; moto itself is not changed.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from moto.s3.responses import S3Response
from moto.server import main
from werkzeug.datastructures import Headers

IGNORE_CONDITIONS_ENV = "SEGLOG_MOTO_IGNORE_CONDITIONS"
"""Set to 1: PUTs ignore ``If-None-Match`` and ``If-Match`` (every conditional PUT
succeeds and replaces), as some S3-compatible stores do; what ``seglog probe-store`` must
call unsafe."""

_STRIPES = 64
# One lock per stripe of (bucket, key): PUTs of different keys still run concurrently
# (mostly), PUTs of one key never do.
_locks = [threading.Lock() for _ in range(_STRIPES)]


def _locked(put_object: Callable[..., Any], ignore_conditions: bool) -> Callable[..., Any]:
    @functools.wraps(put_object)
    def put_object_atomically(self: S3Response) -> Any:
        if ignore_conditions:
            headers = Headers(self.headers)
            headers.remove("If-None-Match")
            headers.remove("If-Match")
            self.headers = headers
        stripe = hash((self.bucket_name, self.parse_key_name())) % _STRIPES
        with _locks[stripe]:
            return put_object(self)

    return put_object_atomically


_installed = False


def install() -> None:
    """Patch moto's S3 handler in this process (once)."""
    global _installed
    if not _installed:
        ignore = os.environ.get(IGNORE_CONDITIONS_ENV) == "1"
        setattr(S3Response, "put_object", _locked(S3Response.put_object, ignore))  # noqa: B010
        _installed = True


if __name__ == "__main__":
    install()
    main(sys.argv[1:])
