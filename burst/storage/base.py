"""The object-store interface every checkpoint store implements.

A store maps keys (``a/b/c``, forward slashes, no leading slash) to immutable byte strings.
``put_*`` is atomic: a reader sees the whole new object or nothing (the old one, if any).
Stores are safe to call from several threads at once.
"""

from __future__ import annotations

import contextlib
import io
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burst.errors import BadInputError, InfraError

KEY_RE = re.compile(r"^[A-Za-z0-9._\-][A-Za-z0-9._\-/]*$")


class StoreError(InfraError):
    """The object store failed (network, permissions, server error) after retries."""


class ObjectMissing(StoreError):
    """The object asked for does not exist."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    mtime: float  # seconds since the epoch


def check_key(key: str) -> str:
    if not KEY_RE.match(key) or "//" in key or key.endswith("/") or "/../" in f"/{key}/":
        raise BadInputError(f"object key {key!r} is not a relative slash-separated name")
    return key


class ViewReader(io.RawIOBase):
    """A seekable, read-only file over a memoryview: lets boto3 send a slice without a copy."""

    def __init__(self, view: memoryview) -> None:
        super().__init__()
        self._view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        out = memoryview(buffer).cast("B")
        n = max(0, min(len(out), len(self._view) - self._pos))
        out[:n] = self._view[self._pos : self._pos + n]
        self._pos += n
        return n

    def read(self, size: int | None = -1) -> bytes:
        end = (
            len(self._view) if size is None or size < 0 else min(len(self._view), self._pos + size)
        )
        data = bytes(self._view[self._pos : end])
        self._pos = max(self._pos, end)
        return data

    def __len__(self) -> int:
        return len(self._view)


class ObjectStore(ABC):
    """A place checkpoints live: a local directory or an S3 bucket prefix."""

    #: Told (one line) of each transient failure the store retries on its own, while the
    #: retries go on, and (None) of each call that succeeded: the checkpoint worker passes
    #: the first failure of a save on to the trainer, whose retry window starts there, and
    #: a success after it (the store answers again: the window closes) (``burst.checkpoint.
    #: manager``). Called from any thread.
    on_trouble: Callable[[str | None], None] | None = None

    def troubled(self, message: str | None) -> None:
        """Report a transient failure (None: a call that succeeded) to ``on_trouble`` (a
        failing hook is ignored)."""
        hook = self.on_trouble
        if hook is not None:
            with contextlib.suppress(Exception):
                hook(message)

    @property
    @abstractmethod
    def url(self) -> str:
        """Where the store is, as a URL (``file:///...`` or ``s3://bucket/prefix``)."""

    @abstractmethod
    def spec(self) -> dict[str, Any]:
        """Options that rebuild an equal store in another process (never credentials)."""

    @abstractmethod
    def put_bytes(self, key: str, data: bytes | memoryview) -> None:
        """Write ``data`` under ``key`` atomically."""

    def put_chunk(self, key: str, data: bytes | memoryview) -> None:
        """Write a content-addressed object: ``key`` names a hash of ``data`` that every
        reader verifies (a checkpoint chunk: its blake3, ``burst.checkpoint.verify``), so a
        store may skip a transfer checksum of its own. The default is ``put_bytes``."""
        self.put_bytes(key, data)

    @abstractmethod
    def put_file(self, key: str, path: Path) -> None:
        """Upload a file atomically (multipart for large files where the store has it)."""

    @abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """Read a whole object. Raises ObjectMissing."""

    def get_into(self, key: str, out: memoryview) -> None:
        """Read an object of exactly ``len(out)`` bytes into ``out``. Raises ObjectMissing,
        or StoreError if the object has another size. Stores override this to skip a copy."""
        data = self.get_bytes(key)
        if len(data) != len(out):
            raise StoreError(f"object has {len(data)} bytes, expected {len(out)}", where=key)
        out[:] = data

    @abstractmethod
    def get_file(self, key: str, path: Path) -> None:
        """Download an object to a file. Raises ObjectMissing."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (no particular order)."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Delete objects; keys that do not exist are ignored."""

    def fail_fast(self) -> None:  # noqa: B027 - optional hook
        """The store is known to be down (the checkpoint retry window is spent): from now
        on each call is tried once, so what a stopping trainer still records (its attempt,
        its lease) fails at once instead of retrying for minutes."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url})"


#: Opens a store when it is needed (teardown's view of where a run's train kept its records)
StoreOpener = Callable[[], ObjectStore]
