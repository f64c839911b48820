"""A checkpoint chunk goes up without a SHA-256 of its body in the signature (its key is its
blake3, verified on read), every other object with one; both against the real rclone server
on loopback, the headers as botocore sent them."""

from __future__ import annotations

import os
from typing import Any

from burst.storage import S3Store, open_store

UNSIGNED = "UNSIGNED-PAYLOAD"


def _sent_payload_hashes(store: S3Store) -> dict[str, str]:
    """Object key -> the X-Amz-Content-SHA256 header of its PutObject/UploadPart, as sent."""
    sent: dict[str, str] = {}

    def record(request: Any, **_: Any) -> None:
        key = request.url.split("?")[0].rsplit("/", 1)[-1]
        sent[key] = request.headers["X-Amz-Content-SHA256"].decode()

    for client in (store.client, store.chunk_client):
        client.meta.events.register("before-send.s3.PutObject", record)
        client.meta.events.register("before-send.s3.UploadPart", record)
    return sent


def test_chunks_go_up_unsigned_and_every_other_object_signed(s3_bucket: str) -> None:
    store = open_store(
        f"s3://{s3_bucket}/chunks-test", multipart_threshold=6 << 20, multipart_chunksize=5 << 20
    )
    assert isinstance(store, S3Store)
    sent = _sent_payload_hashes(store)
    buf = bytearray(os.urandom(9 << 20))
    small = memoryview(buf)[123 : 123 + (3 << 20)]  # a slice at an odd offset of a buffer
    large = memoryview(buf)[7:]  # over the multipart threshold
    store.put_chunk("chunks/small", small)
    store.put_chunk("chunks/large", large)
    store.put_bytes("manifest", b'{"step": 1}')
    assert store.get_bytes("chunks/small") == bytes(small)
    assert store.get_bytes("chunks/large") == bytes(large)
    assert sent["small"] == UNSIGNED
    assert sent["large"] == UNSIGNED
    assert sent["manifest"] not in ("", UNSIGNED) and len(sent["manifest"]) == 64
