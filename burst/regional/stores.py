"""The stores of a regional run, and the only way bytes cross between regions.

Each region has its own store (its shard, the worker's own state) and the aggregation region
also holds the *exchange* store (the workers' deltas, the global checkpoints, the updates and
the aggregator's state). A process gets the store specs of its own region plus, for a worker,
the exchange store, and nothing else: the worker for region A is never given the path or the
credentials of region B's store.

A store in another region is only ever opened through ``LinkedStore``: every byte put or got
is a transfer of the link emulator (``burst.regional.links``), recorded with its seconds and
cost and appended to the run's link log (JSON lines, one per transfer, shared by every process
of the run). Reads and writes inside one region are recorded too, with zero seconds and cost,
so the log shows what moved where. Listings and existence checks are metadata and are not
counted (a few hundred bytes each on a real S3 API). ``PrefixedStore`` gives each checkpoint
series its own key space inside one store (the checkpoint engine keeps one series a store).

Chunks are content-addressed and immutable, so a ``LinkedStore`` with a ``cache`` keeps every
chunk it fetched in a local directory and never fetches the same digest twice: fetching a new
global checkpoint moves only the chunks that changed.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from burst.checkpoint.manifest import CHUNK_PREFIX
from burst.plan.crossregion import Link
from burst.regional.links import LinkEmulator, TransferRecord
from burst.storage import store_from_spec
from burst.storage.base import ObjectInfo, ObjectStore
from burst.storage.local import LocalStore

#: Checkpoint series in the exchange store (each a prefix).
GLOBAL = "global/"  # the global weights, one checkpoint a round (step = round)
UPDATES = "updates/"  # the compressed update that turns round r - 1 into round r
AGGREGATOR = "aggregator/"  # the aggregator's state: weights, outer momentum, consumed rounds
DELTAS = "deltas/"  # deltas/<region>/: a worker's compressed pseudo-gradient, step = round
#: In a region's own store.
SHARD_KEY = "shard/shard.npz"  # the region's shard (the local run's format: arrays x and y)
WORKER = "worker/"  # the worker's own state (inner optimizer), step = round


def delta_series(region: str) -> str:
    return f"{DELTAS}{region}/"


class PrefixedStore(ObjectStore):
    """``inner`` seen under ``prefix``: keys are prefixed, listings stripped of it."""

    def __init__(self, inner: ObjectStore, prefix: str) -> None:
        if not prefix.endswith("/"):
            raise ValueError("a store prefix ends with '/'")
        self.inner = inner
        self.prefix = prefix

    @property
    def url(self) -> str:
        return f"{self.inner.url.rstrip('/')}/{self.prefix}"

    def spec(self) -> dict[str, Any]:
        raise NotImplementedError("a prefixed view is used in process only")

    def put_bytes(self, key: str, data: bytes | memoryview) -> None:
        self.inner.put_bytes(self.prefix + key, data)

    def put_file(self, key: str, path: Path) -> None:
        self.inner.put_file(self.prefix + key, path)

    def get_bytes(self, key: str) -> bytes:
        return self.inner.get_bytes(self.prefix + key)

    def get_into(self, key: str, out: memoryview) -> None:
        self.inner.get_into(self.prefix + key, out)

    def get_file(self, key: str, path: Path) -> None:
        self.inner.get_file(self.prefix + key, path)

    def exists(self, key: str) -> bool:
        return self.inner.exists(self.prefix + key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        for info in self.inner.list(self.prefix + prefix):
            yield ObjectInfo(info.key[len(self.prefix) :], info.size, info.mtime)

    def delete(self, keys: Iterable[str]) -> None:
        self.inner.delete([self.prefix + k for k in keys])

    def close(self) -> None:
        self.inner.close()


def _kind(key: str) -> str:
    """What a key is, for the link log: shard, delta, update, global, aggregator, worker."""
    if key.startswith("shard/"):
        return "shard"
    head = key.split("/", 1)[0]
    return {
        "deltas": "delta",
        "updates": "update",
        "global": "global",
        "aggregator": "aggregator",
        "worker": "worker",
    }.get(head, "other")


def _is_chunk(key: str) -> bool:
    return key.startswith(CHUNK_PREFIX) or f"/{CHUNK_PREFIX}" in key


class LinkLog:
    """The emulator of one process, appending every transfer to the run's link log."""

    def __init__(
        self,
        links: Mapping[frozenset[str], Link],
        path: Path,
        role: str,
        time_scale: float = 1.0,
    ) -> None:
        self.emulator = LinkEmulator(links, time_scale=time_scale)
        self.path = path
        self.role = role
        self.round: int | None = None  # the round the process is working on (set by it)
        self._lock = threading.Lock()

    def transfer(self, src: str, dst: str, nbytes: int, kind: str) -> TransferRecord:
        with self._lock:
            rec = self.emulator.transfer(src, dst, nbytes, kind)
            line = {
                "role": self.role,
                "round": self.round,
                "src": rec.src,
                "dst": rec.dst,
                "kind": rec.kind,
                "bytes": rec.nbytes,
                "seconds": round(rec.seconds, 6),
                "usd": rec.usd,
            }
            # one short O_APPEND write a record: lines of concurrent processes never interleave
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (json.dumps(line, sort_keys=True) + "\n").encode())
            finally:
                os.close(fd)
        return rec


def read_link_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class LinkedStore(ObjectStore):
    """A store of region ``there`` used from region ``here``: every byte moved is a transfer
    of the link emulator (``here == there``: recorded, free and instant)."""

    def __init__(
        self,
        inner: ObjectStore,
        here: str,
        there: str,
        links: LinkLog,
        *,
        cache: Path | None = None,
    ) -> None:
        self.inner = inner
        self.here = here
        self.there = there
        self.links = links
        self.cache = LocalStore(cache, fsync=False) if cache is not None else None

    @property
    def url(self) -> str:
        return self.inner.url

    def spec(self) -> dict[str, Any]:
        raise NotImplementedError("a linked store is used in process only")

    def _cached(self, key: str) -> bool:
        return self.cache is not None and _is_chunk(key) and self.cache.exists(key)

    def put_bytes(self, key: str, data: bytes | memoryview) -> None:
        self.links.transfer(self.here, self.there, len(data), _kind(key))
        self.inner.put_bytes(key, data)

    def put_file(self, key: str, path: Path) -> None:
        self.links.transfer(self.here, self.there, path.stat().st_size, _kind(key))
        self.inner.put_file(key, path)

    def get_bytes(self, key: str) -> bytes:
        if self._cached(key):
            assert self.cache is not None
            return self.cache.get_bytes(key)
        data = self.inner.get_bytes(key)
        self.links.transfer(self.there, self.here, len(data), _kind(key))
        if self.cache is not None and _is_chunk(key):
            self.cache.put_bytes(key, data)
        return data

    def get_into(self, key: str, out: memoryview) -> None:
        data = self.get_bytes(key)
        if len(data) != len(out):
            from burst.storage.base import StoreError

            raise StoreError(f"{key}: {len(data)} bytes, expected {len(out)}", where=self.url)
        out[:] = data

    def get_file(self, key: str, path: Path) -> None:
        path.write_bytes(self.get_bytes(key))

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def delete(self, keys: Iterable[str]) -> None:
        self.inner.delete(keys)

    def close(self) -> None:
        self.inner.close()


def open_spec(spec: Mapping[str, Any]) -> ObjectStore:
    return store_from_spec(dict(spec))


def links_from_pairs(pairs: Iterable[Mapping[str, Any]]) -> dict[frozenset[str], Link]:
    """The JSON form of the run's links: a list of ``{a, b, gb_per_s, latency_ms,
    usd_per_gb}``."""
    out: dict[frozenset[str], Link] = {}
    for p in pairs:
        out[frozenset((str(p["a"]), str(p["b"])))] = Link(
            float(p["gb_per_s"]), float(p["latency_ms"]), float(p["usd_per_gb"])
        )
    return out


def series(store: ObjectStore, prefix: str) -> PrefixedStore:
    return PrefixedStore(store, prefix)
