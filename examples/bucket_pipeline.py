"""The example pipeline on object storage: log dirs in an S3 bucket instead of a directory.

    python examples/bucket_pipeline.py [--work-dir DIR]

For the demo it starts a local S3-compatible server (moto's, installed with seglog's
examples extra: ``pip install 'seglog[examples]'``) on 127.0.0.1 and creates the bucket
``seglog-demo``. Then it runs the same steps as ``examples/pipeline.py`` with
``option("path", "s3://seglog-demo/logs")`` and the server's endpoint and credentials
as ``storage.*`` options, which travel with the query to the driver's and every
executor's Python workers (no ``AWS_*`` variable is needed anywhere):

1. writes shop events to the topic ``events`` (tasks upload their fragments; the
   driver's commit is one small conditional PUT);
2. streams ``events`` -> ``purchases`` exactly once (checkpointed, AvailableNow);
3. reads ``purchases`` back and checks that every purchase arrived exactly once,

and lists what the bucket holds. On a real cluster, drop the server; give the endpoint
and region as ``storage.*`` options and the credentials through the machines' identity
or the environment (docs/cluster.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pipeline  # noqa: E402 (the example next to this one)

BUCKET = "seglog-demo"


class DemoS3Server:
    """moto's S3 server in a subprocess on 127.0.0.1 (a port the OS picks)."""

    def __init__(self) -> None:
        if importlib.util.find_spec("moto") is None:
            raise SystemExit(
                "this example starts moto's S3 server, which is not installed here: "
                "pip install 'seglog[examples]' (or use the .venv that 'python3 run.py' builds)")
        self._log = tempfile.NamedTemporaryFile(prefix="seglog-moto-", suffix=".log")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
            stdout=self._log, stderr=subprocess.STDOUT)
        self.endpoint = ""
        deadline = time.monotonic() + 120
        while not self.endpoint:
            found = re.search(r"Running on (http://127\.0\.0\.1:\d+)",
                              Path(self._log.name).read_text(errors="replace"))
            if found:
                self.endpoint = found.group(1)
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                output = Path(self._log.name).read_text(errors="replace")[-2000:]
                self.stop()
                raise SystemExit(f"could not start moto's S3 server: {output}")
            else:
                time.sleep(0.05)

    def storage_options(self) -> dict[str, str]:
        """obstore's names (docs/object-storage.md); moto takes any credentials."""
        return {"aws_endpoint": self.endpoint, "aws_access_key_id": "demo",
                "aws_secret_access_key": "demo", "aws_region": "us-east-1",
                "aws_allow_http": "true"}

    def create_bucket(self, name: str) -> None:
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{name}", method="PUT"))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self._log.close()


def describe_bucket(uri: str, storage_options: dict[str, str]) -> None:
    from seglog.logstore.manager.log_manager import LogManager

    with LogManager(uri, read_only=True, storage_options=storage_options) as mgr:
        state = mgr.state
        print(f"bucket {uri}: {len(state.topics)} topic(s)")
        for topic in sorted(state.topics):
            # Each topic has its own commit log (the catalog names it): its newest commits.
            log = mgr.commits.topic_log(topic) or mgr.commits.catalog
            version = log.state.version
            print(f"  topic {topic}: commit log {log.layout.commit_dir}/ at version {version}")
            for v in range(max(0, version - 2), version + 1):
                commit = json.loads(mgr.storage.read(log.layout.commit_key(v)))
                parts = commit["partitions"]
                added = sum(len(c.get("add", ())) for c in parts.values())
                print(f"    commit {v}: {commit['operation']}, {added} segment(s) added in "
                      f"{len(parts)} partition(s), {len(json.dumps(commit))} bytes")
            segments = [s for k, p in state.partitions.items() if k.rpartition("-")[0] == topic
                        for s in p.segments]
            print(f"    {len(segments)} segment(s), {sum(s.size for s in segments)} bytes")


def main(argv: list[str] | None = None) -> int:
    work = pipeline.clean_work_dir(argv, description=__doc__.splitlines()[0],
                                   default="work-data-bucket",
                                   holds="Spark's checkpoint goes")
    checkpoint = str(work / "checkpoints" / "purchases")
    uri = f"s3://{BUCKET}/logs"

    # The demo's server is reached through options alone: a shell's AWS_* variables
    # (a real endpoint, a profile, a session token) must not mix into its requests.
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        del os.environ[name]
    server = DemoS3Server()
    try:
        server.create_bucket(BUCKET)
        print(f"local S3 server at {server.endpoint}, bucket {BUCKET}")
        storage = server.storage_options()
        spark_options = {f"storage.{k}": v for k, v in storage.items()}
        started = time.monotonic()
        spark = pipeline.spark_session()
        try:
            t = time.monotonic()
            expected = pipeline.generate_events(spark, uri, spark_options)
            print(f"generated {pipeline.EVENTS} events into {uri} topic 'events' in "
                  f"{time.monotonic() - t:.1f} s")
            t = time.monotonic()
            query = pipeline.run_transform(spark, uri, checkpoint, spark_options)
            batches = (query.lastProgress or {}).get("batchId", -1) + 1
            print(f"streamed events -> purchases in {batches} micro-batches "
                  f"({time.monotonic() - t:.1f} s)")
            ok = pipeline.summarize(spark, uri, expected, spark_options)
        finally:
            spark.stop()
        describe_bucket(uri, storage)
        print(f"done in {time.monotonic() - started:.1f} s")
    finally:
        server.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
