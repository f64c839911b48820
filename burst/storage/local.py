"""A local directory as an object store: temp name, fsync, rename, fsync of the directory."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from burst.storage.base import ObjectInfo, ObjectMissing, ObjectStore, StoreError, check_key

TMP_MARK = ".tmp-"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStore(ObjectStore):
    """Objects are files under ``root``; a write is invisible until its rename."""

    def __init__(self, root: str | Path, *, fsync: bool = True) -> None:
        self.root = Path(root).expanduser().resolve()
        self.fsync = fsync
        # Called with the key halfway through writing a temp file (crash tests only).
        self.on_midway: Callable[[str], None] | None = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create store directory: {exc}", where=str(self.root)) from exc

    @property
    def url(self) -> str:
        return self.root.as_uri()

    def spec(self) -> dict[str, Any]:
        return {"kind": "file", "root": str(self.root), "fsync": self.fsync}

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _write_atomic(self, key: str, write: Callable[[int], None]) -> None:
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}{TMP_MARK}{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                write(fd)
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, dest)
            if self.fsync:
                _fsync_dir(dest.parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StoreError(f"cannot write object: {exc}", where=f"{self.url}/{key}") from exc

    def put_bytes(self, key: str, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")

        def write(fd: int) -> None:
            half = len(view) // 2
            _write_all(fd, view[:half])
            if self.on_midway is not None:
                self.on_midway(key)
            _write_all(fd, view[half:])

        self._write_atomic(key, write)

    def put_file(self, key: str, path: Path) -> None:
        def write(fd: int) -> None:
            with open(path, "rb") as src, os.fdopen(os.dup(fd), "wb") as dst:
                shutil.copyfileobj(src, dst, 8 << 20)

        self._write_atomic(key, write)

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError as exc:
            raise ObjectMissing("object does not exist", where=f"{self.url}/{key}") from exc
        except OSError as exc:
            raise StoreError(f"cannot read object: {exc}", where=f"{self.url}/{key}") from exc

    def get_into(self, key: str, out: memoryview) -> None:
        where = f"{self.url}/{key}"
        try:
            with open(self._path(key), "rb", buffering=0) as f:
                size = os.fstat(f.fileno()).st_size
                if size != len(out):
                    raise StoreError(f"object has {size} bytes, expected {len(out)}", where=where)
                pos = 0
                while pos < len(out):
                    n = f.readinto(out[pos:])
                    if not n:
                        raise StoreError("object shrank while being read", where=where)
                    pos += n
        except FileNotFoundError as exc:
            raise ObjectMissing("object does not exist", where=where) from exc
        except OSError as exc:
            raise StoreError(f"cannot read object: {exc}", where=where) from exc

    def get_file(self, key: str, path: Path) -> None:
        src = self._path(key)
        if not src.is_file():
            raise ObjectMissing("object does not exist", where=f"{self.url}/{key}")
        shutil.copyfile(src, path)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        base = self.root
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if name.startswith(".") and TMP_MARK in name:
                    continue
                full = Path(dirpath) / name
                key = full.relative_to(base).as_posix()
                if not key.startswith(prefix):
                    continue
                try:
                    st = full.stat()
                except FileNotFoundError:
                    continue
                yield ObjectInfo(key=key, size=st.st_size, mtime=st.st_mtime)

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                self._path(key).unlink()


def _write_all(fd: int, view: memoryview) -> None:
    while len(view):
        n = os.write(fd, view[: 64 << 20])
        view = view[n:]
