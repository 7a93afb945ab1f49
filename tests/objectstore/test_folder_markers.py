"""Zero-byte "folder" objects (``logs/``, ``logs/t-0/``), which S3 consoles make for
"Create folder" and SeaweedFS leaves where a "directory" emptied, are no files: listings
skip a prefix's own marker, and a log dir holding them works as one without."""

from __future__ import annotations

import pyarrow as pa

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage


def test_listings_skip_the_prefix_own_marker(bucket_server, s3_uri):
    bucket = s3_uri[len("s3://"):].split("/", 1)[0]
    client = bucket_server.client()
    for key in ("logs/", "logs/d/", "logs/d/e/"):
        client.put_object(Bucket=bucket, Key=key, Body=b"")
    client.put_object(Bucket=bucket, Key="logs/d/e/f.log", Body=b"abc")
    st = ObjectStorage(s3_uri)
    assert [(e.name, e.is_dir) for e in st.list_dir("")] == [("d", True)]
    assert [(e.name, e.is_dir) for e in st.list_dir("d")] == [("e", True)]
    assert [(e.name, e.size) for e in st.list_dir("d/e")] == [("f.log", 3)]
    assert [e.name for e in st.list_after("d/e", "")] == ["f.log"]
    # A nested marker lists as an empty object under a name, as S3 shows it.
    assert [(e.name, e.size) for e in st.list_tree("d")] == [("e", 0), ("e/f.log", 3)]


def test_a_log_dir_made_as_console_folders_works(bucket_server, s3_uri):
    bucket = s3_uri[len("s3://"):].split("/", 1)[0]
    client = bucket_server.client()
    for key in ("logs/", "logs/_seglog/", "logs/t-0/"):
        client.put_object(Bucket=bucket, Key=key, Body=b"")
    with LogManager(s3_uri) as mgr:
        mgr.create_topic("t", 1)
        mgr.append("t", 0, encode_batches(pa.array([b"a", b"b", b"c"], pa.binary())))
    with LogManager(s3_uri, read_only=True) as reader:
        assert reader.high_watermarks() == {("t", 0): 3}
        log = reader.get_log("t", 0)
        chunks = b"".join(bytes(c) for c in log.read_chunks(0, 3, 1 << 20))
        assert decode_batches(chunks, start_offset=0).column("value").to_pylist() == [
            b"a", b"b", b"c"]
