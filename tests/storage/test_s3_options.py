"""S3 options that the loopback rclone server cannot show: SSE-KMS headers (moto, in-process,
named as the mock it is) and retries against an endpoint that is down (real socket)."""

from __future__ import annotations

import pytest
from moto import mock_aws

from burst.storage import S3Store, StoreError
from burst.storage.loopback import free_port


def test_sse_kms_is_requested_on_every_write(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for var in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():  # moto: AWS S3 and KMS simulated in-process
        import boto3

        key_id = boto3.client("kms", region_name="eu-west-1").create_key()["KeyMetadata"]["KeyId"]
        store = S3Store(
            "ckpt",
            "run",
            region="eu-west-1",
            sse="aws:kms",
            kms_key_id=key_id,
            multipart_threshold=6 << 20,
            multipart_chunksize=5 << 20,
        )
        boto3.client("s3", region_name="eu-west-1").create_bucket(
            Bucket="ckpt", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
        )
        store.put_bytes("small", b"x")
        store.put_bytes("large", bytes(7 << 20))  # multipart
        f = tmp_path / "f"
        f.write_bytes(b"file")
        store.put_file("file", f)
        for key in ("run/small", "run/large", "run/file"):
            head = store.client.head_object(Bucket="ckpt", Key=key)
            assert head["ServerSideEncryption"] == "aws:kms"
            assert key_id in head["SSEKMSKeyId"]


def test_endpoint_down_retries_then_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    store = S3Store(
        "bkt", endpoint_url=f"http://127.0.0.1:{free_port()}", region="us-east-1", max_attempts=2
    )
    with pytest.raises(StoreError) as err:
        store.get_bytes("k")
    line = err.value.one_line()
    assert line.startswith("s3://bkt/k: get failed") and err.value.exit_code == 4
