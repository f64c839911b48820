"""Write one checkpoint from a buffer: hash, upload missing chunks, commit the manifest.

Runs in the background worker process. Order is what makes a checkpoint atomic:
1. hash every chunk in order (xxh3 against the previous save finds unchanged chunks; changed
   ones get their blake3, which is also their key);
2. meanwhile, write ``pending/<token>.json`` naming the chunks hashed so far (every chunk the
   manifest will reference, in the end), so a garbage collection running elsewhere keeps
   them, and upload those the store lacks, in parallel: the record is rewritten, growing,
   after 1, 2, 4, 8... chunks, and a chunk goes up only once a record names it, so the
   uploads overlap the hashing of the next chunks; reused chunks this worker has not
   verified yet are read back once;
3. when every upload is done, write the manifest (the commit), then move ``latest.json``,
   then drop the pending record.
A crash before 3 leaves only unreferenced chunks, which GC removes later.

Deduplication trusts a chunk only once it has been checked: chunks this writer uploaded, or
read back and found to hold their blake3 (once per worker; the trainer's restore passes the
digests it has just verified, so resuming does not read them twice). The store's listing
gives every chunk's size: a chunk of the wrong size is uploaded again at once. A chunk that
does not verify is quarantined (``burst.checkpoint.verify``) and uploaded again, so every
manifest this writer commits references only verified bytes (``stats.verified``).
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import blake3
import xxhash

from burst import faults
from burst.checkpoint.layout import ArrayEntry, ChunkSpan, layout_signature, plan_chunks
from burst.checkpoint.manifest import (
    CHUNK_PREFIX,
    LATEST_KEY,
    PENDING_PREFIX,
    ChunkRef,
    Manifest,
    check_tier,
    chunk_key,
)
from burst.checkpoint.sharded import ShardInfo, check_commit_by, commit_global, write_shard
from burst.checkpoint.verify import chunk_is_sound
from burst.storage.base import ObjectStore, StoreError

log = logging.getLogger(__name__)
T = TypeVar("T")


class CheckpointWriter:
    """Keeps what the previous save hashed and which chunks the store holds."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        concurrency: int = 8,
        upload_rate: float | None = None,
        background_concurrency: int | None = None,
        nice: int = 0,
    ) -> None:
        """``background_concurrency``: threads (at CPU priority ``nice``) that hash, upload
        and check while nobody waits for the save; ``concurrency`` more, at this process's
        own priority, join in once ``hurry`` is set. None: ``concurrency`` threads, at any
        time, at this process's priority (a writer inside the training process)."""
        self.store = store
        self.concurrency = concurrency
        self.background_concurrency = background_concurrency
        # Pacing of background uploads (bytes/s, None: none); lifted once ``hurry`` is set,
        # i.e. as soon as someone waits for the save (an emergency save, close, the next save).
        self.upload_rate = upload_rate
        self.hurry = threading.Event()
        # the trainer is gone: a sharded commit waits for missing shards only a little longer
        self.abandoned = threading.Event()
        # a stop notice's deadline (time.time()): nothing is committed past it
        self.commit_by: float | None = None
        self._pace_lock = threading.Lock()
        self._pace_next = 0.0
        self.known: dict[str, int] | None = None  # chunk digest -> size, present in the store
        self.verified: set[str] = set()  # digests known to hold their bytes (uploaded/checked)
        self._known_lock = threading.Lock()
        self._prev_sig: str | None = None
        self._prev_fast: list[bytes] = []
        self._prev_digests: list[str] = []
        self._pool = Lanes(concurrency, background_concurrency or 0, nice, self.hurry)
        # hashing has lanes of its own: the next chunk's hash never waits behind uploads
        self._hasher = Lanes(1, 1 if background_concurrency else 0, nice, self.hurry)

    def load_known(self) -> dict[str, int]:
        if self.known is None:
            self.known = {
                info.key[len(CHUNK_PREFIX) :]: info.size for info in self.store.list(CHUNK_PREFIX)
            }
        return self.known

    def forget(self, digests: set[str]) -> None:
        """Chunks that GC removed (or that were quarantined): upload them again if needed."""
        with self._known_lock:
            if self.known is not None:
                for digest in digests:
                    self.known.pop(digest, None)
            self.verified -= digests
        self._prev_sig = None

    def trust(self, digests: set[str]) -> None:
        """Chunks someone has just read back and verified (a restore): no need to re-read."""
        with self._known_lock:
            self.verified |= digests

    def _check(self, digest: str, size: int) -> bool:
        """Read a chunk the save would reuse; False if it must be uploaded again."""
        sound = chunk_is_sound(self.store, digest, size)  # quarantines a corrupt one
        with self._known_lock:
            if sound:
                self.verified.add(digest)
            elif self.known is not None:
                self.known.pop(digest, None)
        return bool(sound)

    def _hash(self, view: memoryview, prev: int) -> tuple[bytes, str]:
        """xxh3 of a chunk; its blake3 unless the xxh3 matches chunk ``prev`` of the
        previous save (same layout; -1: none), whose digest it then takes."""
        fx = xxhash.xxh3_128_digest(view)
        if prev >= 0 and self._prev_fast[prev] == fx:
            return fx, self._prev_digests[prev]
        return fx, blake3.blake3(view).hexdigest()

    def _pace(self, nbytes: int) -> None:
        if not self.upload_rate or self.hurry.is_set():
            return
        with self._pace_lock:
            start = max(time.monotonic(), self._pace_next)
            self._pace_next = start + nbytes / self.upload_rate
        while not self.hurry.is_set():
            delay = start - time.monotonic()
            if delay <= 0:
                return
            self.hurry.wait(min(delay, 0.05))

    def _upload(self, digest: str, view: memoryview) -> int:
        self._pace(len(view))
        # put_chunk: the store may skip its own transfer checksum (S3: no SHA-256 payload
        # hash, half the worker's CPU per byte): the key is the chunk's blake3, and every
        # reader verifies it (restore, a reused chunk's read-back, replication)
        self.store.put_chunk(chunk_key(digest), view)
        with self._known_lock:
            assert self.known is not None
            self.known[digest] = len(view)
            self.verified.add(digest)
        faults.checkpoint("chunk-uploaded")
        return len(view)

    def write(
        self,
        buffer: memoryview,
        entries: list[ArrayEntry],
        tree: Any,
        *,
        step: int,
        tier: str,
        chunk_size: int,
        shard: ShardInfo | None = None,
        hashes: list[tuple[bytes, str]] | None = None,
    ) -> Manifest:
        """Write one checkpoint; with ``shard``, this rank's shard of a sharded one (phase 1),
        and on rank 0 the global commit once every rank's shard is durable (phase 2).
        ``hashes``: each chunk's (xxh3-128, blake3) of this buffer as a faster tier's write
        of the same save computed them (``Manifest.chunks``), so the bytes are hashed once
        per save whatever the number of tiers."""
        check_tier(tier)
        t0 = time.perf_counter()
        known = self.load_known()
        spans = plan_chunks(entries, chunk_size)
        sig = layout_signature(entries, chunk_size)
        same_layout = sig == self._prev_sig
        fast: list[bytes] = []
        digests: list[str] = []
        futures: list[Future[int]] = []
        scheduled: set[str] = set()
        self._pace_next = time.monotonic()

        def upload(digest: str, span: ChunkSpan) -> None:
            if digest in scheduled:
                return
            scheduled.add(digest)
            view = buffer[span.offset : span.offset + span.size]
            futures.append(self._pool.submit(self._upload, digest, view))

        # The pending record names every chunk the manifest will reference, so a GC elsewhere
        # (even one with no grace) keeps them: a chunk is uploaded only once a record naming
        # it is in the store. It is rewritten, growing, after 1, 2, 4, 8... chunks are
        # hashed, and the new chunks named so far go up while the next ones are hashed.
        token = f"{step:012d}-{secrets.token_hex(6)}"
        pending_key = f"{PENDING_PREFIX}{token}.json"
        waiting: list[tuple[str, ChunkSpan]] = []  # new chunks, not named by the record yet
        mark = 1
        th = time.perf_counter()
        try:
            for i, span in enumerate(spans):
                view = buffer[span.offset : span.offset + span.size]
                if hashes is not None and len(hashes) == len(spans):
                    fx, digest = hashes[i]
                else:
                    # hashed on the hashing lanes: at the background priority until someone
                    # waits
                    hashing = self._hasher.submit(self._hash, view, i if same_layout else -1)
                    fx, digest = hashing.result()
                fast.append(fx)
                digests.append(digest)
                with self._known_lock:
                    if known.get(digest) != span.size:  # absent, or with the wrong size
                        waiting.append((digest, span))
                if i + 1 == mark or i + 1 == len(spans):
                    mark *= 2
                    self.store.put_bytes(
                        pending_key, json.dumps({"step": step, "chunks": digests}).encode()
                    )
                    for named, where in waiting:
                        upload(named, where)
                    waiting.clear()
            hash_s = time.perf_counter() - th
            if not spans:
                self.store.put_bytes(pending_key, json.dumps({"step": step, "chunks": []}).encode())
            with self._known_lock:
                unchecked = {
                    d: s.size
                    for d, s in zip(digests, spans, strict=True)
                    if known.get(d) == s.size and d not in self.verified and d not in scheduled
                }
            if unchecked:  # reused chunks nobody has verified in this worker yet: read them once
                checks = {d: self._pool.submit(self._check, d, n) for d, n in unchecked.items()}
                bad = {d for d, fut in checks.items() if not fut.result()}
                for d, span in zip(digests, spans, strict=True):
                    if d in bad:
                        upload(d, span)
                if bad:
                    log.warning("%d stored chunk(s) failed verification: uploading them", len(bad))
            uploaded = 0
            for fut in futures:
                uploaded += fut.result()
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
        total = sum(s.size for s in spans)
        manifest = Manifest(
            step=step,
            tier=tier,
            created_at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
            chunk_size=chunk_size,
            total_bytes=total,
            arrays=entries,
            chunks=[
                ChunkRef(s.offset, s.size, d, fx.hex())
                for s, d, fx in zip(spans, digests, fast, strict=True)
            ],
            tree=tree,
            stats={
                "uploaded_bytes": uploaded,
                "uploaded_chunks": len(futures),
                "reused_chunks": len(spans) - len(futures),
                "hash_seconds": round(hash_s, 4),
                "verified_chunks": len(unchecked),
                "verified": True,  # every chunk was uploaded or read back by this writer
            },
        )
        if shard is not None:
            return self._write_shard(manifest, shard, pending_key, sig, fast, digests, t0)
        faults.checkpoint(f"before-manifest@{step}")
        check_commit_by(self.commit_by, step, tier, f"{self.store.url}/{manifest.key}")
        self.store.put_bytes(manifest.key, manifest.to_bytes())  # the commit
        # Committed: what follows is bookkeeping. Its failure is reported with the result,
        # never as a failed save (``latest`` is a hint; the manifests are the truth, and GC
        # removes a stale pending record after its grace).
        self._prev_sig, self._prev_fast, self._prev_digests = sig, fast, digests
        try:
            faults.checkpoint(f"before-latest@{step}")
            latest = {"step": step, "tier": tier, "manifest": manifest.key}
            self.store.put_bytes(LATEST_KEY, json.dumps(latest).encode())
            faults.checkpoint(f"after-latest@{step}")
            self.store.delete([pending_key])
        except StoreError as exc:
            log.warning(
                "checkpoint step %d committed; clean-up after the commit failed: %s",
                step,
                exc.one_line(),
            )
            manifest.stats["cleanup_error"] = exc.one_line()
        manifest.stats["seconds"] = round(time.perf_counter() - t0, 4)
        log.info(
            "checkpoint step %d (%s) committed: %d/%d chunks uploaded, %d bytes, %.2fs",
            step,
            tier,
            len(futures),
            len(spans),
            uploaded,
            manifest.stats["seconds"],
        )
        return manifest

    def _write_shard(
        self,
        manifest: Manifest,
        shard: ShardInfo,
        pending_key: str,
        sig: str,
        fast: list[bytes],
        digests: list[str],
        t0: float,
    ) -> Manifest:
        """Phase 1 (this rank's shard manifest; its pending record stays until the global
        commit drops it), then on rank 0 phase 2 (burst.checkpoint.sharded)."""
        write_shard(self.store, manifest, shard, pending_key)
        self._prev_sig, self._prev_fast, self._prev_digests = sig, fast, digests
        manifest.stats["shard_seconds"] = round(time.perf_counter() - t0, 4)
        if shard.rank == 0 and shard.global_commit:
            merged = commit_global(
                self.store, manifest, shard, self.abandoned, commit_by=self.commit_by
            )
            manifest.stats["committed"] = True
            manifest.stats["global_bytes"] = merged.total_bytes
            manifest.stats["ranks"] = merged.stats["ranks"]
        manifest.stats["seconds"] = round(time.perf_counter() - t0, 4)
        return manifest

    def close(self) -> None:
        self._hasher.shutdown()
        self._pool.shutdown()


class Lanes:
    """The threads that run a writer's work, first come first served (``first``: ahead of
    the queue). ``background`` threads, at CPU priority ``nice`` (set per thread), take work
    while nobody waits for the save; once ``hurry`` is set (someone waits), ``concurrency``
    threads at the process's own priority take it instead, so a waited-for save is not
    starved by the priority its background part runs at (what a background thread has in
    hand, it finishes). ``nice`` is added to a background thread's
    priority, like ``os.nice``. With ``background`` 0 every thread takes work
    at any time, at the process's priority."""

    def __init__(self, concurrency: int, background: int, nice: int, hurry: threading.Event):
        self._cv = threading.Condition()
        self._queue: collections.deque[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]]
        self._queue = collections.deque()
        self._closed = False
        self._threads: list[threading.Thread] = []
        for i in range(background):
            self._spawn(f"ckpt-bg{i}", lambda: not hurry.is_set(), nice)
        for i in range(concurrency):
            self._spawn(f"ckpt-up{i}", hurry.is_set if background else None, 0)

    def _spawn(self, name: str, gate: Callable[[], bool] | None, nice: int) -> None:
        thread = threading.Thread(target=self._run, args=(gate, nice), daemon=True, name=name)
        thread.start()
        self._threads.append(thread)

    def _run(self, gate: Callable[[], bool] | None, nice: int) -> None:
        if nice:
            with contextlib.suppress(OSError, AttributeError):  # Linux: per thread
                tid = threading.get_native_id()  # like os.nice(nice), for this thread only
                os.setpriority(
                    os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice)
                )
        while True:
            with self._cv:
                while True:
                    if self._queue and (gate is None or gate() or self._closed):
                        fut, fn, args = self._queue.popleft()
                        break
                    if self._closed:
                        return
                    # work held back by its gate (an Event): looked at again every 50 ms;
                    # no work: asleep until submit or shutdown notifies (an idle writer
                    # costs no CPU: its threads would otherwise wake 20 times a second)
                    self._cv.wait(0.05 if self._queue else None)
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:
                fut.set_exception(exc)

    def submit(self, fn: Callable[..., T], *args: Any, first: bool = False) -> Future[T]:
        fut: Future[T] = Future()
        with self._cv:
            if self._closed:
                raise RuntimeError("the writer is closed")
            item = (fut, fn, args)
            if first:
                self._queue.appendleft(item)
            else:
                self._queue.append(item)
            self._cv.notify_all()
        return fut

    def shutdown(self) -> None:
        """Cancel what has not started, wait for what has."""
        with self._cv:
            self._closed = True
            for fut, _, _ in self._queue:
                fut.cancel()
            self._queue.clear()
            self._cv.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()
