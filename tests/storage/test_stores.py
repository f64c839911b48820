"""Both object stores against the same contract; S3 against a real rclone server on loopback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from burst.errors import BadInputError
from burst.storage import (
    LocalStore,
    ObjectMissing,
    ObjectStore,
    S3Store,
    StoreError,
    open_store,
    store_from_spec,
)


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return open_store(f"file://{tmp_path}/objects")
    bucket = request.getfixturevalue("s3_bucket")
    # low multipart threshold so a 12 MiB object goes up in parts
    return open_store(
        f"s3://{bucket}/pre/fix", multipart_threshold=6 << 20, multipart_chunksize=5 << 20
    )


def test_put_get_list_delete(store: ObjectStore, tmp_path: Path) -> None:
    store.put_bytes("a/b/one", b"1")
    store.put_bytes("a/two", memoryview(b"xx22")[2:])
    big = os.urandom(12 << 20)
    store.put_bytes("big", big)
    src = tmp_path / "file.bin"
    src.write_bytes(big[: 7 << 20])
    store.put_file("files/f", src)
    assert store.get_bytes("a/b/one") == b"1"
    assert store.get_bytes("a/two") == b"22"
    assert store.get_bytes("big") == big
    dst = tmp_path / "out.bin"
    store.get_file("files/f", dst)
    assert dst.read_bytes() == big[: 7 << 20]
    assert store.exists("a/two") and not store.exists("a/three")
    infos = {i.key: i for i in store.list("a/")}
    assert set(infos) == {"a/b/one", "a/two"}
    assert infos["a/two"].size == 2 and infos["a/two"].mtime > 0
    assert {i.key for i in store.list()} == {"a/b/one", "a/two", "big", "files/f"}
    store.put_bytes("a/two", b"replaced")
    assert store.get_bytes("a/two") == b"replaced"
    store.delete(["a/two", "never-existed"])
    assert not store.exists("a/two")
    with pytest.raises(ObjectMissing) as err:
        store.get_bytes("a/two")
    assert "a/two" in err.value.one_line()
    with pytest.raises(ObjectMissing):
        store.get_file("a/two", dst)


def test_spec_rebuilds_an_equal_store(store: ObjectStore) -> None:
    store.put_bytes("k", b"v")
    again = store_from_spec(store.spec())
    assert again.url == store.url and again.get_bytes("k") == b"v"
    assert "secret" not in repr(store.spec()).lower()


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "dir/", "sp ace"])
def test_bad_keys_are_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(BadInputError):
        LocalStore(tmp_path).put_bytes(key, b"x")


def test_local_writes_are_atomic_and_temp_files_invisible(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    seen: list[str] = []

    def midway(key: str) -> None:
        # halfway through the write: the object is not visible yet, only a temp file is
        seen.append(key)
        assert not store.exists(key)
        assert [i.key for i in store.list()] == []
        assert any(p.name.startswith(".m") for p in (tmp_path / "s").iterdir())

    store.on_midway = midway
    store.put_bytes("m", b"0123456789")
    assert seen == ["m"] and store.get_bytes("m") == b"0123456789"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("gs://bucket/x", "scheme must be file:// or s3://"),
        ("s3:///nobucket", "needs a bucket"),
        ("s3://b/p?colour=red", "unknown option"),
        ("s3://b/p?sse=rot13", "sse must be"),
    ],
)
def test_bad_urls_are_one_clear_line(url: str, message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        open_store(url)


def test_url_options() -> None:
    s = open_store(
        "s3://bkt/a/b?endpoint=http://127.0.0.1:9&region=eu-west-1&sse=aws:kms"
        "&kms_key_id=alias/ckpt"
    )
    assert isinstance(s, S3Store)
    assert (s.bucket, s.prefix, s.endpoint_url, s.region) == (
        "bkt",
        "a/b",
        "http://127.0.0.1:9",
        "eu-west-1",
    )
    assert s._extra() == {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "alias/ckpt"}
    rel = open_store("file://runs/checkpoints")
    assert isinstance(rel, LocalStore) and rel.root == Path("runs/checkpoints").resolve()


@pytest.mark.e2e
def test_wrong_credentials_fail_with_one_line(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    store = open_store(f"s3://{s3_bucket}/x", max_attempts=1)
    with pytest.raises(StoreError) as err:
        store.put_bytes("k", b"v")
    assert s3_bucket in err.value.one_line() and err.value.exit_code == 4


@pytest.mark.e2e
def test_missing_credentials_say_where_they_come_from(
    s3_server: object, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = open_store("s3://somebucket/x", max_attempts=1)
    with pytest.raises(StoreError, match="no S3 credentials"):
        store.get_bytes("k")


@pytest.mark.e2e
def test_missing_bucket(s3_server: object) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        open_store("s3://no-such-bucket-here/x", max_attempts=1).put_bytes("k", b"v")


def test_get_into_reads_in_place_and_checks_size(store: ObjectStore) -> None:
    data = os.urandom(3 << 20)
    store.put_bytes("blob", data)
    out = bytearray(len(data))
    store.get_into("blob", memoryview(out))
    assert bytes(out) == data
    with pytest.raises(StoreError, match="expected"):
        store.get_into("blob", memoryview(bytearray(10)))
    with pytest.raises(ObjectMissing):
        store.get_into("nothing", memoryview(bytearray(1)))
