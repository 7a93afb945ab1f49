"""The Storage conformance suite and the create-if-absent race against MinIO in a
container (testcontainers), where a Docker engine answers; skipped with the reason
otherwise. The same tests always run against moto (they are not the only test of
anything here)."""

from __future__ import annotations

import uuid

import pytest
from docker_engine import docker_unavailable
from storage_cases import StorageUnderTest
from test_conditional_writes import *  # noqa: F403 (the same tests, collected here again)
from test_storage_contract import *  # noqa: F403

from seglog.logstore.storage.object_storage import ObjectStorage

# A release that enforces If-None-Match/If-Match on PUT (testcontainers' default image,
# from 2022, predates MinIO's conditional writes).
MINIO_IMAGE = "minio/minio:RELEASE.2025-04-22T22-12-26Z"


_UNAVAILABLE = docker_unavailable()
pytestmark = pytest.mark.skipif(_UNAVAILABLE is not None, reason=_UNAVAILABLE or "")


@pytest.fixture(scope="module")
def minio():
    from testcontainers.community.minio import MinioContainer

    with MinioContainer(image=MINIO_IMAGE) as container:
        config = container.get_config()
        yield {
            "AWS_ENDPOINT_URL": f"http://{config['endpoint']}",
            "AWS_ACCESS_KEY_ID": config["access_key"],
            "AWS_SECRET_ACCESS_KEY": config["secret_key"],
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }


@pytest.fixture
def storage(minio, monkeypatch):
    """Overrides the posix/memory/s3 ``storage`` fixture for this module: a fresh MinIO
    bucket per test."""
    import boto3

    for name, value in minio.items():
        monkeypatch.setenv(name, value)
    bucket = f"seglog-test-{uuid.uuid4().hex[:16]}"
    boto3.client("s3", endpoint_url=minio["AWS_ENDPOINT_URL"], region_name="us-east-1",
                 aws_access_key_id=minio["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=minio["AWS_SECRET_ACCESS_KEY"]).create_bucket(
                     Bucket=bucket)
    location = f"s3://{bucket}/logs"
    return StorageUnderTest("minio", location, ObjectStorage(location))
