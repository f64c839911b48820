"""S3 (or any S3-compatible endpoint) as an object store, through boto3.

Credentials come only from the environment, the shared config files or an instance/pod role
(boto3's default chain); nothing here accepts a key. ``profile`` names a profile of the shared
files (a process that uses stores of two owners, e.g. a regional worker: its own region's store
and the exchange store, each with its own credentials). Requests retry with exponential backoff
(botocore's ``standard`` mode, plus our own retry around reading a response body). Objects
above ``multipart_threshold`` go up in parallel parts. ``sse="aws:kms"`` with ``kms_key_id``
asks for SSE-KMS on every write.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from burst.errors import BadInputError
from burst.storage.base import (
    ObjectInfo,
    ObjectMissing,
    ObjectStore,
    StoreError,
    ViewReader,
    check_key,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

MISSING_CODES = {"404", "NoSuchKey", "NotFound"}
RETRY_CODES = {"500", "502", "503", "504", "SlowDown", "RequestTimeout", "InternalError"}


class S3Store(ObjectStore):
    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        sse: str | None = None,
        kms_key_id: str | None = None,
        max_attempts: int = 6,
        max_concurrency: int = 10,
        multipart_threshold: int = 64 << 20,
        multipart_chunksize: int = 16 << 20,
        addressing_style: str | None = None,
        profile: str | None = None,
    ) -> None:
        if not bucket:
            raise BadInputError("an S3 store needs a bucket name (s3://BUCKET/prefix)")
        if sse not in (None, "AES256", "aws:kms"):
            raise BadInputError(f"sse must be AES256 or aws:kms, not {sse!r}")
        if kms_key_id and sse != "aws:kms":
            raise BadInputError("kms_key_id needs sse='aws:kms'")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        self.region = region
        self.sse = sse
        self.kms_key_id = kms_key_id
        self.max_attempts = max_attempts
        self.max_concurrency = max_concurrency
        self.multipart_threshold = multipart_threshold
        self.multipart_chunksize = multipart_chunksize
        self.addressing_style = addressing_style or ("path" if endpoint_url else "auto")
        self.profile = profile
        self._client: Any = None
        self._chunk_client: Any = None  # put_chunk's (unsigned payload)
        self._tries = max_attempts  # each call's attempts (1 once fail_fast() was called)

    # -- plumbing -------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._build_client(sign_payload=None)
        return self._client

    @property
    def chunk_client(self) -> Any:
        """The client of ``put_chunk``: no SHA-256 of the body in the signature
        (UNSIGNED-PAYLOAD). botocore signs every body it sends without a checksum header,
        over HTTPS too: one SHA-256 pass over every byte, a third of a checkpoint worker's
        CPU per save (541 MiB: about 0.4 of 1.2 CPU-s). A chunk's integrity does not rest on
        it: its key is its blake3, which every restore verifies, and a reused chunk is read
        back and verified before a manifest references it (burst.checkpoint.verify); in
        transit TLS protects it on an https endpoint."""
        if self._chunk_client is None:
            self._chunk_client = self._build_client(sign_payload=False)
        return self._chunk_client

    def _build_client(self, *, sign_payload: bool | None) -> Any:
        from botocore.config import Config

        from burst.aws_session import session as aws_session

        down = self._tries == 1
        s3: dict[str, Any] = {"addressing_style": self.addressing_style}
        if sign_payload is not None:
            s3["payload_signing_enabled"] = sign_payload
        cfg = Config(
            retries={"max_attempts": self._tries, "mode": "standard"},
            max_pool_connections=max(16, self.max_concurrency * 2),
            s3=s3,
            connect_timeout=3 if down else 10,
            read_timeout=10 if down else 60,
            # No CRC32 of every body unless the operation requires one (botocore >= 1.36
            # computes one by default: a pass over each byte sent, ~20 % of an upload's
            # client CPU). Transport integrity is TLS (or the SigV4 payload hash over
            # plain HTTP, except a chunk's: ``chunk_client``); a checkpoint chunk's key is
            # its blake3, verified on read.
            request_checksum_calculation="when_required",
        )
        session = aws_session(profile_name=self.profile)
        return session.client(
            "s3", endpoint_url=self.endpoint_url, region_name=self.region, config=cfg
        )

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def spec(self) -> dict[str, Any]:
        return {
            "kind": "s3",
            "bucket": self.bucket,
            "prefix": self.prefix,
            "endpoint_url": self.endpoint_url,
            "region": self.region,
            "sse": self.sse,
            "kms_key_id": self.kms_key_id,
            "max_attempts": self.max_attempts,
            "max_concurrency": self.max_concurrency,
            "multipart_threshold": self.multipart_threshold,
            "multipart_chunksize": self.multipart_chunksize,
            "addressing_style": self.addressing_style,
            "profile": self.profile,
        }

    def _full(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _extra(self) -> dict[str, str]:
        extra: dict[str, str] = {}
        if self.sse:
            extra["ServerSideEncryption"] = self.sse
        if self.kms_key_id:
            extra["SSEKMSKeyId"] = self.kms_key_id
        return extra

    def _call(self, what: str, key: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` with retries on transient failures; map errors to StoreError."""
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            ConnectionError,
            IncompleteReadError,
            NoCredentialsError,
            ReadTimeoutError,
            ResponseStreamingError,
        )

        where = f"s3://{self.bucket}/{self._full(key) if key else self.prefix}"
        transient = (ConnectionError, IncompleteReadError, ReadTimeoutError, ResponseStreamingError)
        tries = self._tries
        for attempt in range(tries):
            try:
                result = fn()
            except NoCredentialsError as exc:
                raise StoreError(
                    "no S3 credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE"
                    " in the environment, or run with an instance/pod role",
                    where=where,
                ) from exc
            except ClientError as exc:
                code = str(exc.response.get("Error", {}).get("Code", ""))
                if code in MISSING_CODES:
                    raise ObjectMissing("object does not exist", where=where) from exc
                if code == "NoSuchBucket":
                    raise StoreError(f"bucket {self.bucket!r} does not exist", where=where) from exc
                if code not in RETRY_CODES or attempt == tries - 1:
                    raise StoreError(f"{what} failed: {code or exc}", where=where) from exc
                problem = code
            except transient as exc:
                if attempt == tries - 1:
                    raise StoreError(f"{what} failed: {exc}", where=where) from exc
                problem = str(exc)
            except BotoCoreError as exc:
                raise StoreError(f"{what} failed: {exc}", where=where) from exc
            else:
                if self.on_trouble is not None:
                    self.troubled(None)  # the store answered
                return result
            delay = min(8.0, 0.2 * 2**attempt) * (0.5 + random.random())
            log.warning(
                "s3 %s %s: transient failure, retry %d in %.1fs", what, key, attempt + 1, delay
            )
            self.troubled(f"{where}: {what} failed: {problem}; retrying")
            time.sleep(delay)
        raise AssertionError("unreachable")

    def _transfer_config(self) -> Any:
        from boto3.s3.transfer import TransferConfig

        return TransferConfig(
            multipart_threshold=self.multipart_threshold,
            multipart_chunksize=self.multipart_chunksize,
            max_concurrency=self.max_concurrency,
        )

    # -- the interface --------------------------------------------------------------------

    def put_bytes(self, key: str, data: bytes | memoryview) -> None:
        self._put(key, data, self.client)

    def put_chunk(self, key: str, data: bytes | memoryview) -> None:
        self._put(key, data, self.chunk_client, body=ViewSlices)

    def _put(
        self,
        key: str,
        data: bytes | memoryview,
        client: Any,
        body: type[ViewReader] = ViewReader,
    ) -> None:
        full = self._full(key)
        view = memoryview(data).cast("B")
        if len(view) >= self.multipart_threshold:
            self._call(
                "upload",
                key,
                lambda: client.upload_fileobj(
                    ViewReader(view),
                    self.bucket,
                    full,
                    ExtraArgs=self._extra(),
                    Config=self._transfer_config(),
                ),
            )
            return

        def put() -> None:
            client.put_object(
                Bucket=self.bucket,
                Key=full,
                Body=body(view),
                ContentLength=len(view),
                **self._extra(),
            )

        self._call("put", key, put)

    def put_file(self, key: str, path: Path) -> None:
        full = self._full(key)
        self._call(
            "upload",
            key,
            lambda: self.client.upload_file(
                str(path),
                self.bucket,
                full,
                ExtraArgs=self._extra(),
                Config=self._transfer_config(),
            ),
        )

    def get_bytes(self, key: str) -> bytes:
        full = self._full(key)
        return self._call(
            "get", key, lambda: self.client.get_object(Bucket=self.bucket, Key=full)["Body"].read()
        )

    def get_into(self, key: str, out: memoryview) -> None:
        """GET straight into ``out``: the response body is read with ``readinto`` from the
        HTTP response underneath botocore's stream (no intermediate bytes object), falling
        back to ``read()`` if that layer is not there."""
        full = self._full(key)
        where = f"s3://{self.bucket}/{full}"

        def get() -> None:
            resp = self.client.get_object(Bucket=self.bucket, Key=full)
            body = resp["Body"]
            try:
                size = int(resp.get("ContentLength", -1))
                if size != len(out):
                    raise StoreError(f"object has {size} bytes, expected {len(out)}", where=where)
                fp = getattr(getattr(body, "_raw_stream", None), "_fp", None)
                if fp is None or not hasattr(fp, "readinto"):
                    out[:] = body.read()
                    return
                pos = 0
                while pos < size:
                    n = fp.readinto(out[pos:])
                    if not n:
                        from botocore.exceptions import IncompleteReadError

                        raise IncompleteReadError(actual_bytes=pos, expected_bytes=size)
                    pos += n
            finally:
                body.close()  # the connection is not reused: urllib3 did not see the read

        self._call("get", key, get)

    def get_file(self, key: str, path: Path) -> None:
        full = self._full(key)
        self._call(
            "download",
            key,
            lambda: self.client.download_file(
                self.bucket, full, str(path), Config=self._transfer_config()
            ),
        )

    def exists(self, key: str) -> bool:
        full = self._full(key)
        try:
            self._call("head", key, lambda: self.client.head_object(Bucket=self.bucket, Key=full))
        except ObjectMissing:
            return False
        return True

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        base = f"{self.prefix}/" if self.prefix else ""
        paginator = self.client.get_paginator("list_objects_v2")
        pages = self._call(
            "list", "", lambda: list(paginator.paginate(Bucket=self.bucket, Prefix=base + prefix))
        )
        for page in pages:
            for obj in page.get("Contents", []):
                yield ObjectInfo(
                    key=obj["Key"][len(base) :],
                    size=int(obj["Size"]),
                    mtime=obj["LastModified"].timestamp(),
                )

    def delete(self, keys: Iterable[str]) -> None:
        fulls = [self._full(k) for k in keys]
        for i in range(0, len(fulls), 1000):
            batch = [{"Key": k} for k in fulls[i : i + 1000]]

            def delete_batch(b: list[dict[str, str]] = batch) -> dict[str, Any]:
                resp: dict[str, Any] = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": b, "Quiet": True}
                )
                return resp

            resp = self._call("delete", "", delete_batch)
            errors = [e for e in resp.get("Errors", []) if e.get("Code") not in MISSING_CODES]
            if errors:
                first = errors[0]
                raise StoreError(
                    f"delete failed for {len(errors)} objects: {first.get('Code')}",
                    where=f"s3://{self.bucket}/{first.get('Key')}",
                )

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (for loopback servers and tests)."""
        if self._call("head bucket", "", lambda: _bucket_exists(self.client, self.bucket)):
            return
        self._call("create bucket", "", lambda: self.client.create_bucket(Bucket=self.bucket))

    def fail_fast(self) -> None:
        if self._tries == 1:
            return
        self._tries = 1
        # the next call builds a client that tries once, shorter timeouts
        self._client = self._chunk_client = None

    def close(self) -> None:
        for client in (self._client, self._chunk_client):
            if client is not None:
                client.close()
        self._client = self._chunk_client = None


class ViewSlices(ViewReader):
    """A chunk's body: ``read`` returns slices of the buffer itself, not copies (the
    HTTP sender passes each to ``socket.sendall``; with no payload hash and no checksum it
    is the body's only reader): a copy of every byte sent, ~13 % of a checkpoint worker's
    CPU, saved."""

    def read(self, size: int | None = -1) -> Any:
        end = (
            len(self._view) if size is None or size < 0 else min(len(self._view), self._pos + size)
        )
        data = self._view[self._pos : end]
        self._pos = max(self._pos, end)
        return data


def _bucket_exists(client: Any, bucket: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        if str(exc.response.get("Error", {}).get("Code")) in {"404", "NoSuchBucket", "NotFound"}:
            return False
        raise
    return True
