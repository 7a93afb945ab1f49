"""The bucket sink against what a hostile review found (each test failed before its fix):
a best-effort sweep never fails a published batch, and a URI's credentials are never
echoed."""

from __future__ import annotations

import pytest
from test_sink_bucket import SINK, TOPIC, check_exactly_once, memory_uri, options, stage, values

from seglog.logstore.errors import InvalidStorageUriError, KafkaStorageError
from seglog.logstore.log_manager import LogManager
from seglog.logstore.object_storage import ObjectStorage
from seglog.logstore.object_store_config import parse_object_uri, redact_uri
from seglog.streaming.sink_bucket_commit import commit
from seglog.streaming.sink_bucket_staging import open_bucket
from seglog.streaming.sink_options import SinkOptions


def test_a_failing_sweep_after_the_publish_does_not_fail_the_commit(monkeypatch, caplog):
    uri = memory_uri()
    opts = options(uri)
    tasks = [stage(opts, 0)]
    real = ObjectStorage.list_dir

    def flaky(self, path):
        if str(path).startswith("_seglog/staging"):
            raise KafkaStorageError(f"LIST {self.uri}/{path} failed: 503 SlowDown")
        return real(self, path)

    monkeypatch.setattr(ObjectStorage, "list_dir", flaky)
    result = commit(tasks, 0, opts)  # raised KafkaStorageError, the batch published
    monkeypatch.undo()
    assert result.records == 300
    assert "503 SlowDown" in caplog.text and "published batch 0" in caplog.text
    check_exactly_once(uri, values(0))
    with LogManager(uri, read_only=True) as mgr:
        assert mgr.state.sinks[SINK]["batch_id"] == 0


@pytest.mark.parametrize("uri", ["s3a://AKIAEXAMPLE:wJalrSECRET@bucket/logs",
                                 "s3://AKIAEXAMPLE@bucket/logs",
                                 "gs://user:wJalrSECRET@bucket"])
def test_credentials_in_a_uri_are_refused_and_never_echoed(uri):
    with pytest.raises(InvalidStorageUriError, match="carries credentials") as e:
        parse_object_uri(uri)
    assert "SECRET" not in str(e.value) and "AKIA" not in str(e.value)
    assert "***@bucket" in str(e.value)
    with pytest.raises(InvalidStorageUriError) as e:
        open_bucket(SinkOptions.parse({"path": uri, "topic": TOPIC}), read_only=True)
    assert "SECRET" not in str(e.value) and "AKIA" not in str(e.value)


def test_redaction_keeps_azure_container_names_and_plain_paths():
    assert redact_uri("abfs://container@account.dfs.core.windows.net/logs") == \
        "abfs://container@account.dfs.core.windows.net/logs"
    assert redact_uri("abfs://u:pw@account/logs") == "abfs://***@account/logs"
    assert redact_uri("/data/logs") == "/data/logs"
    with pytest.raises(Exception) as e:  # a sink option message quoting the log dirs
        SinkOptions.parse({"path": "s3a://K:wJalrSECRET@bucket/logs,/tmp/x", "topic": TOPIC})
    assert "SECRET" not in str(e.value)
