"""A real S3-compatible server for tests and benchmarks: moto's server (from PyPI, no
Docker) in a subprocess on 127.0.0.1, on a port the OS picks.

moto 5.2 enforces ``If-None-Match: *`` and ``If-Match`` on PUT (412 to the loser), which
``tests/objectstore/test_conditional_writes.py`` checks under concurrent requests.

Use it through the fixtures of ``tests/conftest.py`` (``moto_server``, ``s3_uri``,
``storage``); benchmarks start one with ``with MotoServer() as server: ...``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import boto3

# moto accepts any credentials unless told to enforce IAM (see ``start(auth=True)``).
ACCESS_KEY_ID = "seglog-test-key"
SECRET_ACCESS_KEY = "seglog-test-secret"
REGION = "us-east-1"

_RUNNING = re.compile(r"Running on (http://127\.0\.0\.1:\d+)")


class MotoServer:
    """One moto server process; ``env`` is what makes ``ObjectStorage("s3://...")`` reach it.

    Not thread-safe to start or stop; requests to it may come from any thread or process.
    """

    def __init__(self, *, enforce_auth_after: int | None = None,
                 start_timeout_s: float = 120.0) -> None:
        # enforce_auth_after: moto's INITIAL_NO_AUTH_ACTION_COUNT, the number of requests it
        # serves before it checks credentials against its own IAM (403 for unknown keys).
        self._enforce_auth_after = enforce_auth_after
        self._start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_dir = tempfile.TemporaryDirectory(prefix="seglog-moto-")
        self.endpoint = ""

    @property
    def pid(self) -> int:
        """The server process's id (benchmarks read its CPU time)."""
        if self._proc is None:
            raise RuntimeError("the S3 server is not running")
        return self._proc.pid

    @property
    def request_log(self) -> Path:
        """The server's output: one line per request (method, path, status), which
        benchmarks count requests from."""
        return Path(self._log_dir.name) / "moto.log"

    def storage_options(self) -> dict[str, str]:
        """seglog's storage options that reach this server with no ``AWS_*`` variable."""
        return {"aws_endpoint": self.endpoint, "aws_region": REGION,
                "aws_access_key_id": ACCESS_KEY_ID, "aws_secret_access_key": SECRET_ACCESS_KEY,
                "aws_allow_http": "true"}

    @property
    def env(self) -> dict[str, str]:
        """The standard variables that point S3 clients (obstore, boto3) at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def start(self) -> MotoServer:
        log = self.request_log
        env = dict(os.environ)
        if self._enforce_auth_after is not None:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(self._enforce_auth_after)
        with open(log, "wb") as out:
            # Output goes to a file, not a pipe: the server logs every request, and a pipe
            # nobody drains would block it.
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
                stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self._start_timeout_s
        while not self.endpoint:
            found = _RUNNING.search(log.read_text(errors="replace"))
            if found:
                self.endpoint = found.group(1)
            elif self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"moto server did not start; its output:\n{log.read_text()}")
            else:
                time.sleep(0.05)
        return self

    def client(self, access_key_id: str = ACCESS_KEY_ID,
               secret_access_key: str = SECRET_ACCESS_KEY):  # noqa: ANN201 (boto3 client)
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=access_key_id,
                            aws_secret_access_key=secret_access_key)

    def create_bucket(self, prefix: str = "seglog-test") -> str:
        """A new empty bucket with a unique name; returns its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        self._log_dir.cleanup()

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
