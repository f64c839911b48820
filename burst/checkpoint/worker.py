"""The background checkpoint process (``python -m burst.checkpoint.worker``).

It maps the trainer's host buffer read-only, and for each request on stdin (one JSON line)
hashes, uploads and commits a checkpoint, then answers one JSON line on stdout (before
it, during a save, at most one ``{"op": "trouble"}`` line: the store's first transient
failure, which starts the trainer's retry window while the store goes on retrying). It never
imports torch, and runs at a lower CPU priority than the training loop. Requests run one at
a time, so retention and GC never race a save of this worker.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from burst import faults
from burst.checkpoint.attached import AttachedBuffer
from burst.checkpoint.layout import ArrayEntry
from burst.checkpoint.manifest import Manifest
from burst.checkpoint.peer import PeerStore
from burst.checkpoint.retention import apply_retention, collect_garbage
from burst.checkpoint.sharded import ShardInfo, expire_manifests
from burst.checkpoint.writer import CheckpointWriter
from burst.errors import BurstError, CheckpointError, InfraError
from burst.settings import current
from burst.storage import LocalStore, store_from_spec

log = logging.getLogger("burst.checkpoint.worker")

#: seconds a memory tier that failed a save is left out of the saves that follow (a peer that
#: hangs costs each call its timeout: not every save's)
TIER_BACKOFF_S = 30.0


def background_uploads(concurrency: int) -> int:
    """Uploads in flight while nobody waits for the save: a quarter of the cores this
    process may use, at least 1, at most ``concurrency`` (all ``concurrency`` of them once
    someone waits). Each upload in flight keeps a sender and, with a store on the same host,
    a server thread busy: on 2 cores beside a one-thread training loop and a loopback S3
    server (272 MiB state, load ~5 from other jobs), 8 in flight slowed its steps 1.82x,
    2 in flight 1.45x, 1 in flight 1.41x."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(concurrency, cores // 4))


class Worker:
    def __init__(self, init: dict[str, Any]) -> None:
        self.store = store_from_spec(init["store"])
        if isinstance(self.store, LocalStore):
            self.store.on_midway = lambda key: faults.checkpoint(f"put-midway {key}")
        rate = init.get("upload_rate")
        concurrency = int(init.get("concurrency", 8))
        self.writer = CheckpointWriter(
            self.store,
            concurrency=concurrency,
            upload_rate=float(rate) if rate else None,
            background_concurrency=background_uploads(concurrency),
            nice=int(init.get("nice", 0)),
        )
        self.writer.trust(set(init.get("trust") or ()))
        # the memory tiers, fastest first ("local": this node's peer server, "peer": another
        # node's): each save goes to them before the store (docs/checkpoints.md, "Tiers")
        self.memory: list[tuple[str, CheckpointWriter]] = [
            (
                str(t["name"]),
                CheckpointWriter(
                    PeerStore(str(t["address"]), str(t.get("prefix") or "")),
                    concurrency=concurrency,
                    background_concurrency=background_uploads(concurrency),
                    nice=int(init.get("nice", 0)),
                ),
            )
            for t in init.get("memory") or []
        ]
        self.tier_down: dict[str, float] = {}  # memory tier -> monotonic time it is tried again
        self.keep_full = init.get("keep_full")
        self.keep_weights = init.get("keep_weights")
        self.buffer: AttachedBuffer | None = None

    def _attach(self, paths: list[str], size: int) -> AttachedBuffer:
        if self.buffer is None or self.buffer.paths != paths or self.buffer.size != size:
            if self.buffer is not None:
                self.buffer.close()
            self.buffer = AttachedBuffer(paths, size)
        return self.buffer

    def writers(self) -> list[CheckpointWriter]:
        return [self.writer, *(w for _, w in self.memory)]

    def save(self, req: dict[str, Any]) -> dict[str, Any]:
        buf = self._attach(list(req["buffer"]), int(req["size"]))
        entries = [ArrayEntry.from_json(a) for a in req["arrays"]]
        kwargs: dict[str, Any] = {
            "step": int(req["step"]),
            "tier": req["tier"],
            "chunk_size": int(req["chunk_size"]),
        }
        # Memory tiers first (each commits its own copy, manifest last); the bytes are hashed
        # once, by the first tier that takes them. A tier that fails is skipped: the save
        # goes on to the next one, and to the store if no memory tier holds it.
        hashes: list[tuple[bytes, str]] | None = None
        held: Manifest | None = None
        tiers: dict[str, dict[str, Any]] = {}
        for name, writer in self.memory:
            if time.monotonic() < self.tier_down.get(name, 0.0):
                tiers[name] = {"error": f"left out for {TIER_BACKOFF_S:g}s after a failure"}
                continue
            writer.known = None  # the peer may have dropped chunks to make room: list it
            try:
                m = writer.write(buf.view, entries, req["tree"], hashes=hashes, **kwargs)
            except BurstError as exc:
                log.warning("step %s not held in %s memory: %s", req["step"], name, exc.one_line())
                tiers[name] = {"error": exc.one_line()}
                if not isinstance(exc, CheckpointError):  # unreachable, not a refusal
                    self.tier_down[name] = time.monotonic() + TIER_BACKOFF_S
                continue
            hashes = [(bytes.fromhex(c.check or ""), c.digest) for c in m.chunks]
            held = held or m
            tiers[name] = {
                "seconds": m.stats.get("seconds"),
                "uploaded_bytes": m.stats.get("uploaded_bytes"),
            }
        if held is not None and not req.get("store", True):
            out = self._result(held)
            out.update(store=False, tiers=tiers)
            return out
        try:
            manifest = self.writer.write(
                buf.view,
                entries,
                req["tree"],
                shard=ShardInfo.from_json(req["shard"]) if req.get("shard") else None,
                hashes=hashes,
                **kwargs,
            )
        except BurstError as exc:
            if (
                held is None
                or self.writer.commit_by is None
                or time.time() <= self.writer.commit_by
            ):
                raise
            # a stop notice's window closed before the store commit: the memory tier's copy
            # is the save (the notice-time order: a peer's memory first, the store if it can)
            log.warning("step %s held in memory only: %s", req["step"], exc.one_line())
            out = self._result(held)
            out.update(store=False, tiers=tiers, store_error=exc.one_line())
            return out
        out = self._result(manifest)
        if self.memory:
            out.update(store=True, tiers=tiers)
        if req.get("shard") and (self.keep_full is not None or self.keep_weights is not None):
            # Sharded: other ranks' workers upload concurrently, trusting what they know the
            # store holds, so no chunk is deleted here; expired checkpoints stop existing and
            # their chunks go in a GC when every rank is idle (the end of the attempt).
            if manifest.stats.get("committed"):
                try:
                    gone = expire_manifests(
                        self.store, keep_full=self.keep_full, keep_weights=self.keep_weights
                    )
                except BurstError as exc:
                    log.warning("retention after step %d failed: %s", manifest.step, exc)
                    out["retention"] = {"error": exc.one_line()}
                else:
                    out["retention"] = {"deleted_manifests": gone, "deleted_chunks": 0}
        elif self.keep_full is not None or self.keep_weights is not None:
            # The checkpoint is committed: a retention failure is reported, not the save's.
            try:
                gc = apply_retention(
                    self.store, keep_full=self.keep_full, keep_weights=self.keep_weights, grace=0.0
                )
            except BurstError as exc:
                log.warning("retention after step %d failed: %s", manifest.step, exc.one_line())
                out["retention"] = {"error": exc.one_line()}
            else:
                self.writer.forget(gc.deleted_chunks)
                out["retention"] = {
                    "deleted_manifests": gc.deleted_manifests,
                    "deleted_chunks": len(gc.deleted_chunks),
                }
        return out

    @staticmethod
    def _result(manifest: Manifest) -> dict[str, Any]:
        return {
            "step": manifest.step,
            "tier": manifest.tier,
            "total_bytes": manifest.total_bytes,
            **manifest.stats,
        }

    def gc(self, req: dict[str, Any]) -> dict[str, Any]:
        if req.get("retention", True) and (
            self.keep_full is not None or self.keep_weights is not None
        ):
            res = apply_retention(
                self.store,
                keep_full=self.keep_full,
                keep_weights=self.keep_weights,
                grace=float(req["grace"]),
            )
        else:
            res = collect_garbage(self.store, grace=float(req["grace"]))
        self.writer.forget(res.deleted_chunks)
        return {
            "deleted_manifests": res.deleted_manifests,
            "deleted_chunks": len(res.deleted_chunks),
            "kept_chunks": res.kept_chunks,
        }

    def close(self) -> None:
        for writer in self.writers():
            writer.close()
            if writer is not self.writer:
                writer.store.close()
        if self.buffer is not None:
            self.buffer.close()
        self.store.close()


_SEND_LOCK = threading.Lock()  # replies and trouble reports come from several threads


def _send(out: IO[str], doc: dict[str, Any]) -> None:
    """One reply; a trainer that is gone (its pipe closed) cannot read it: not an error."""
    try:
        line = json.dumps(doc) + "\n"
        with _SEND_LOCK:
            out.write(line)
            out.flush()
    except (BrokenPipeError, ValueError, OSError):
        log.debug("the trainer is gone: reply %s not delivered", doc.get("op"))


def _trouble_reporter(out: IO[str], request: int) -> Callable[[str | None], None]:
    """The store's ``on_trouble`` during a save: a first transient failure goes to the
    trainer at once (``{"op": "trouble"}``), while the store goes on retrying, so that its
    retry window starts at the store's first failure, not when this try gives up; the next
    call that succeeds after it is ``{"op": "recovered"}`` (the store answers: a slow save
    of a live store is not a dead one)."""
    lock = threading.Lock()
    failing = False

    def report(message: str | None) -> None:
        nonlocal failing
        with lock:
            if (message is not None) == failing:
                return  # no change
            failing = message is not None
        if message is not None:
            _send(out, {"op": "trouble", "id": request, "message": message})
        else:
            _send(out, {"op": "recovered", "id": request})

    return report


def main() -> int:
    # stdout carries the protocol; anything else printed goes to stderr.
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    logging.basicConfig(
        level=current().checkpoint_log_level,
        format="%(asctime)s ckpt-worker %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    line = sys.stdin.readline()
    if not line:
        return 0
    init = json.loads(line)
    # "nice" is the priority of the writer's background threads, not of this process: the
    # threads that join in when someone waits for the save (and this one, which mostly
    # waits) run at the trainer's priority (an unprivileged process cannot raise its own
    # priority again once it has lowered it)
    worker = Worker(init)
    faults.checkpoint("worker-start")
    _send(proto, {"op": "ready", "pid": os.getpid()})
    requests: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def read_requests() -> None:
        # "hurry" acts at once (it lifts the pacing of the save in progress), and so does
        # "audit" (chunks a restore verified or quarantined); the others queue.
        for line in sys.stdin:
            req = json.loads(line)
            if req.get("op") == "hurry":
                for writer in worker.writers():
                    writer.hurry.set()
                continue
            if req.get("op") == "deadline":  # a stop notice's: no commit past it
                at = req.get("at")
                for writer in worker.writers():
                    writer.commit_by = None if at is None else float(at)
                    writer.hurry.set()
                continue
            if req.get("op") == "audit":  # what a restore in the trainer found
                worker.writer.forget(set(req.get("corrupt") or ()))
                worker.writer.trust(set(req.get("sound") or ()))
                continue
            if req.get("op") == "save":
                for writer in worker.writers():
                    writer.hurry.clear()
            requests.put(req)
        worker.writer.abandoned.set()  # a sharded commit waits only briefly now
        requests.put(None)  # stdin closed: the trainer is gone or done

    threading.Thread(target=read_requests, daemon=True, name="ckpt-requests").start()
    orderly = False
    try:
        while (req := requests.get()) is not None:
            op = req.get("op")
            if op == "exit":
                orderly = True
                break
            t0 = time.perf_counter()
            if op == "save":
                worker.store.on_trouble = _trouble_reporter(proto, req["id"])
            try:
                result = worker.save(req) if op == "save" else worker.gc(req)
                _send(
                    proto,
                    {
                        "op": "done",
                        "id": req["id"],
                        "result": result,
                        "seconds": time.perf_counter() - t0,
                    },
                )
            except BurstError as exc:
                # a store failure is worth retrying; a refused or corrupt checkpoint is not
                kind = "store" if isinstance(exc, InfraError) else "checkpoint"
                _send(
                    proto,
                    {"op": "error", "id": req["id"], "message": exc.one_line(), "kind": kind},
                )
            except Exception as exc:  # a bug or an unexpected failure: report, keep serving
                log.exception("checkpoint request failed")
                _send(
                    proto,
                    {
                        "op": "error",
                        "id": req["id"],
                        "message": f"{type(exc).__name__}: {exc}",
                        "kind": "store" if isinstance(exc, OSError) else "error",
                    },
                )
            finally:
                worker.store.on_trouble = None
    finally:
        buffer_path = worker.buffer.path if worker.buffer is not None else None
        worker.close()
        if not orderly and buffer_path and not buffer_path.startswith("/proc/"):
            # the trainer is gone (stdin closed without "exit"): nobody else frees its buffer
            # file (a memfd buffer is freed by the kernel when this process exits)
            with contextlib.suppress(OSError):
                os.unlink(buffer_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
