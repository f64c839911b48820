"""CheckpointManager: what a training script uses.

    mgr = CheckpointManager("s3://bucket/runs/run-1", keep_full=2, keep_weights=3)
    mgr.save(step, capture_state(model, opt, sched, data_position=pos), tier="full")
    ...
    restored = mgr.restore()            # newest complete checkpoint, falls back if corrupt
    apply_state(restored.state, model, opt, sched)
    mgr.close()

``save`` blocks only while the state is copied into a reused host buffer in shared memory;
a separate worker process hashes, uploads and commits it. At most one save is in flight: a
second ``save`` first waits for the first (or returns False at once with ``if_busy="skip"``).

Infrastructure faults never discard a save that ``wait`` waits for: a worker that dies (or
fails to start) is started again and the save sent again; a store that fails is retried with
backoff, for at most ``retry_s`` seconds (``BURST_CHECKPOINT_RETRY_S``, default 300). That
window is one budget from the first failure (a save's failed reply, or the first transient
store failure the worker reports while a try is still under way) until a save commits: every
save and every wait shares it, so a final save after a failed routine one gets what is left
of the window, not a fresh one, and no wait outlasts it for a try still in flight. A save
whose manifest reached the store counts as committed, whatever failed after it. When the
budget is spent ``wait`` raises ``StoreError`` (exit 4, infrastructure), never a bad-input
error; a corrupt or refused checkpoint stays a ``CheckpointError``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3

from burst import checkout
from burst.checkpoint.catalog import latest_checkpoint, list_checkpoints
from burst.checkpoint.layout import DEFAULT_CHUNK_SIZE, build_layout, layout_signature
from burst.checkpoint.manifest import CheckpointRef, check_tier, manifest_key
from burst.checkpoint.parts_restore import PartsRead
from burst.checkpoint.peer import PeerStore, parse_address
from burst.checkpoint.read_plan import restore_newest
from burst.checkpoint.replication import ReplicationResult, replicate
from burst.checkpoint.restore import Restored, restore_checkpoint, tier_catalog
from burst.checkpoint.sharded import ShardInfo
from burst.checkpoint.split_restore import Exchange, SplitRead, restore_split
from burst.checkpoint.staging import HostBuffer, fresh_threads
from burst.checkpoint.tree import flatten
from burst.checkpoint.verify import ChunkAudit
from burst.errors import CheckpointError
from burst.storage import ObjectStore, open_store
from burst.storage.base import StoreError

log = logging.getLogger(__name__)

RETRY_ENV = "BURST_CHECKPOINT_RETRY_S"
DEFAULT_RETRY_S = 300.0
#: Failures worth trying again: the worker process died or did not start, the store failed.
RETRYABLE = frozenset({"worker", "store"})
#: The least time the question "did the failed save's manifest commit?" gets (a live store
#: answers in milliseconds; a dead one is not waited for past the retry window plus this).
MANIFEST_CHECK_S = 5.0
#: Attempts to start a worker before a save counts as failed (kind "worker").
WORKER_STARTS = 3
#: Signals a trainer's process group receives on a preemption or a Ctrl-C: the worker starts
#: with them blocked (it exits when the trainer's pipe closes, after the save in hand).
NOTICE_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def retry_budget_s() -> float:
    from burst.settings import current

    return float(current().checkpoint_retry_s)


def tier_name(url: str, shard: ShardInfo | None = None) -> str:
    """A rank's name in memory tiers that several runs and ranks share: the store's URL
    (hashed), and the rank of a sharded manager."""
    name = blake3.blake3(url.encode()).hexdigest()[:16]
    # a sharded rank's part is one of ``world``: a restore on another world size finds none
    return f"{name}/world-{shard.world}/rank-{shard.rank}" if shard is not None else name


class WorkerStartError(StoreError):
    """The checkpoint worker process could not be started (infrastructure, exit 4)."""


@dataclass
class SaveResult:
    """One committed save: what the engine reports and the training loop plans from (the
    one type for it; ``burst.train.checkpoints`` passes these on)."""

    step: int
    tier: str
    stall_seconds: float  # time save() blocked the caller
    total_bytes: int = 0  # size of the checkpoint
    uploaded_bytes: int = 0  # what the upload sent (chunks the store did not hold yet)
    uploaded_chunks: int = 0
    reused_chunks: int = 0
    seconds: float = 0.0  # background time from request to commit
    committed_at: float = 0.0  # time.time() when the commit was reported
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckpointStatus:
    in_flight: int | None  # step being written, if any
    last_committed: SaveResult | None
    last_error: str | None
    worker_pid: int | None


class CheckpointManager:
    def __init__(
        self,
        store: ObjectStore | str,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        keep_full: int | None = None,
        keep_weights: int | None = None,
        concurrency: int = 8,
        upload_rate: float | None = None,
        nice: int = 19,
        buffer_dir: Path | None = None,
        worker_env: dict[str, str] | None = None,
        retry_s: float | None = None,
        shard: ShardInfo | None = None,
        start_worker: bool = True,
        local: str | None = None,
        peers: Sequence[str] = (),
        tier_prefix: str | None = None,
        store_every: int = 1,
        rank_tiers: Sequence[Sequence[tuple[str, str]]] | None = None,
    ) -> None:
        """``start_worker``: start the background worker process now, in a thread, so that
        the first save does not wait for it (False: the first save starts it; a manager that
        only restores). A save made while it still starts waits only for the process to
        exist (its request goes into the worker's stdin, read once it is up), not for it to
        be ready.

        Memory tiers (docs/checkpoints.md, "Tiers"): ``local``, the ``HOST:PORT`` of this
        node's peer server (``burst.checkpoint.peer``), and ``peers``, those of other nodes';
        each save is committed to them, in that order, before the store, and a restore reads
        the newest checkpoint from the fastest that holds it whole. ``tier_prefix``: this
        rank's name in their memory (default: from the store's URL and the shard's rank).
        ``store_every``: every how many saves also go to the store (1: each; the others
        only to the memory tiers, and to the store when no memory tier takes them).

        Sharded (``shard=``) with memory tiers: each save commits this rank's part to them
        (``burst.checkpoint.parts_restore``); ``rank_tiers[q]``, the memory tiers (name,
        ``HOST:PORT``) of rank q, fastest first, for every rank of the world, lets
        ``restore_split`` read every part from memory (without it: this rank's own only, so
        a world of more than one reads the store)."""
        self.store = open_store(store) if isinstance(store, str) else store
        if store_every < 1:
            raise CheckpointError(f"store_every must be >= 1, not {store_every}")
        if rank_tiers is not None and (shard is None or len(rank_tiers) != shard.world):
            raise CheckpointError(
                "rank_tiers= names the memory tiers of each rank of a sharded manager's world"
            )
        self.store_every = store_every
        self._saves = 0
        self.tier_prefix = tier_prefix or tier_name(self.store.url, shard)
        self.memory: list[tuple[str, str]] = [
            *((("local", local),) if local else ()),
            *(("peer", p) for p in peers),
        ]
        self.rank_tiers: list[list[tuple[str, str]]] = (
            [list(t) for t in rank_tiers]
            if rank_tiers is not None
            else [list(self.memory) if q == shard.rank else [] for q in range(shard.world)]
            if shard is not None
            else []
        )
        for _, address in [*self.memory, *(t for ts in self.rank_tiers for t in ts)]:
            parse_address(address)  # a bad one is the caller's mistake, said here
        self.chunk_size = chunk_size
        self.keep_full = keep_full
        self.keep_weights = keep_weights
        self.concurrency = concurrency
        self.upload_rate = upload_rate
        self.nice = nice
        self.buffer_dir = buffer_dir
        self.worker_env = worker_env or {}
        self.retry_s = retry_budget_s() if retry_s is None else retry_s
        # the newest save request, until it commits or a newer one replaces it: sent again
        # after an infrastructure fault
        self._last_save: tuple[dict[str, Any], dict[str, Any]] | None = None
        self.retries: list[str] = []  # what was retried, one line each (for the records)
        # one rank of a sharded checkpoint (burst.checkpoint.sharded): a save writes this
        # rank's shard; rank 0's worker also commits the global manifest
        self.shard = shard
        self._buffer: HostBuffer | None = None
        self._layout_sig: str | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._commit_by: float | None = None  # a stop notice's deadline (commit_by)
        self._reader: threading.Thread | None = None
        self._worker_buffer: str | None = None  # token of the memfd buffer the worker inherited
        self._cond = threading.Condition()
        self._seq = 0
        self._inflight: dict[str, Any] | None = None  # {"id", "op", "step", "tier", "stall"}
        self._results: dict[int, dict[str, Any]] = {}
        self._last: SaveResult | None = None
        self._error: str | None = None
        self._unwaited_error: str | None = None  # failure of the newest save, until wait()
        self._unwaited_kind: str | None = None  # "worker", "store", "checkpoint", "error"
        # the retry window (monotonic start, and the first failure in words): from the first
        # failure of a save until one commits, shared by every save and wait (RETRY_ENV)
        self._failing_since: float | None = None
        self._first_failure: str | None = None
        self._window_by: int | None = None  # the request whose trouble report opened it
        self._trouble_error: str | None = None  # the last_error a trouble report set
        self._closed = False
        self._warming: threading.Thread | None = None  # warm(): buffer + worker, ahead
        self._starting: threading.Thread | None = None  # the worker's start at construction
        self._spawned = threading.Event()  # set once that start has a process (or failed)
        self._start_lock = threading.Lock()  # one worker start at a time
        # What restores here found: sound chunks (the worker need not read them again) and
        # corrupt ones (quarantined; the worker must upload them again).
        self._audit = ChunkAudit()
        if start_worker:
            # The worker process starts now, in the background (a Python start and its
            # imports, 0.3 s or more of a save's stall otherwise), with an empty buffer that
            # the first save grows in place (the worker maps the new size; no restart).
            try:
                self._buffer = HostBuffer(0, self.buffer_dir, prefault=False)
            except (CheckpointError, OSError) as exc:
                log.warning("checkpoint buffer not created (the first save tries again): %s", exc)
            self._starting = threading.Thread(
                target=self._start_empty, daemon=True, name="ckpt-start"
            )
            self._starting.start()
        else:
            self._spawned.set()

    def _start_empty(self) -> None:
        """The construction's worker start: a save may write its request into the process's
        stdin as soon as it exists (``_spawned``); if the process then never gets ready, that
        save fails as one whose worker died (``wait`` sends it again)."""
        proc: subprocess.Popen[str] | None = None
        try:
            with self._start_lock:
                fds, self._worker_buffer = self._buffer_fds()
                proc = self._spawn(fds)
                with self._cond:
                    self._proc = proc
                self._spawned.set()
                self._confirm(proc)
        except (StoreError, CheckpointError, OSError) as exc:
            log.warning("checkpoint worker start failed (the first save tries again): %s", exc)
            with self._cond:
                if proc is not None and self._proc is proc:
                    self._proc = None
                    self._worker_failed(f"checkpoint worker did not start: {exc}")
        finally:
            self._spawned.set()

    def _background(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` in a thread after whatever runs in the background already; ``save``
        and the other calls that touch the buffer or the worker wait for it (``_warmed``)."""
        before = self._warming

        def run() -> None:
            if before is not None:
                before.join()
            fn()

        self._warming = threading.Thread(target=run, daemon=True, name="ckpt-warm")
        self._warming.start()

    # -- worker process -------------------------------------------------------------------

    def _ensure_worker(self) -> subprocess.Popen[str]:
        with self._start_lock:
            return self._ensure_worker_locked()

    def _buffer_fds(self) -> tuple[tuple[int, ...], str | None]:
        """The memfds a new worker inherits, and the token of their buffer (None: none)."""
        fds = self._buffer.memfds if self._buffer is not None else ()
        return fds, self._buffer.token if fds and self._buffer is not None else None

    def _ensure_worker_locked(self) -> subprocess.Popen[str]:
        fds, token = self._buffer_fds()
        if self._proc is not None and self._proc.poll() is None:
            if token is None or token == self._worker_buffer:
                return self._proc
            self._stop_worker()  # the buffer was replaced: a new worker inherits the new one
        self._worker_buffer = token
        problems: list[str] = []
        for attempt in range(1, WORKER_STARTS + 1):
            try:
                return self._start_worker(fds)
            except WorkerStartError as exc:
                problems.append(exc.message)
                log.warning(
                    "checkpoint worker start %d/%d failed: %s", attempt, WORKER_STARTS, exc.message
                )
                time.sleep(0.2 * attempt)
        raise WorkerStartError(
            f"checkpoint worker did not start in {WORKER_STARTS} tries: {problems[-1]}",
            where=self.store.url,
        )

    def _start_worker(self, fds: tuple[int, ...]) -> subprocess.Popen[str]:
        proc = self._spawn(fds)
        self._confirm(proc)
        if self._commit_by is not None:  # started after a notice: it keeps its deadline
            self._tell_deadline(proc)
        return proc

    def _spawn(self, fds: tuple[int, ...]) -> subprocess.Popen[str]:
        """The worker process, its settings written to its stdin; requests may follow at
        once (it reads them after its start)."""
        env = dict(os.environ)
        pkg_root = str(checkout.ROOT)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
        env.update(self.worker_env)
        # A session of its own: a Ctrl-C or a SIGTERM sent to the trainer's process group
        # (a preemption notice) does not kill an upload in flight; the worker exits when the
        # trainer closes its stdin (or dies) and the request in hand is done.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, NOTICE_SIGNALS)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "burst.checkpoint.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                bufsize=1,
                start_new_session=True,
                pass_fds=fds,
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        init = {
            "store": self.store.spec(),
            "concurrency": self.concurrency,
            "nice": self.nice,
            "upload_rate": self.upload_rate,
            "keep_full": self.keep_full,
            "keep_weights": self.keep_weights,
            "trust": sorted(self._audit.sound - self._audit.corrupt),
            "memory": [
                {"name": name, "address": address, "prefix": self.tier_prefix}
                for name, address in self.memory
            ],
        }
        assert proc.stdin is not None and proc.stdout is not None
        with contextlib.suppress(OSError):  # room for a request while the worker starts
            fcntl.fcntl(proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
        try:
            proc.stdin.write(json.dumps(init) + "\n")
            proc.stdin.flush()
        except OSError:
            proc.kill()
            proc.wait()
            raise WorkerStartError(
                f"checkpoint worker failed to start (exit code {proc.returncode})",
                where=self.store.url,
            ) from None
        return proc

    def _confirm(self, proc: subprocess.Popen[str]) -> None:
        """Wait for the worker's "ready", then read its replies in a thread."""
        assert proc.stdout is not None
        try:
            ready = proc.stdout.readline()
        except OSError:
            ready = ""
        if not ready:
            proc.kill()
            proc.wait()
            raise WorkerStartError(
                f"checkpoint worker failed to start (exit code {proc.returncode})",
                where=self.store.url,
            )
        self._proc = proc
        self._reader = threading.Thread(
            target=self._read_replies, args=(proc,), daemon=True, name="ckpt-replies"
        )
        self._reader.start()

    def _read_replies(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                if doc.get("op") in ("trouble", "recovered"):
                    self._trouble(doc)
                else:
                    self._finish(doc)
        code = proc.wait()
        with self._cond:
            if self._inflight is not None and self._proc is proc:
                what = self._inflight
                msg = (
                    f"checkpoint worker died (exit code {code}) during {what['op']}"
                    + (f" of step {what['step']}" if what.get("step") is not None else "")
                    + "; the previous checkpoint is intact"
                )
                self._worker_failed(msg)

    def _worker_failed(self, message: str) -> None:
        """The request in flight fails as one whose worker died (``wait`` starts another and
        sends it again); called with the lock held."""
        if self._inflight is not None:
            doc = {"op": "error", "id": self._inflight["id"], "message": message, "kind": "worker"}
            self._finish(doc)

    def _trouble(self, doc: dict[str, Any]) -> None:
        """The worker's report of a transient store failure during the save in flight (it
        goes on trying): the retry window starts here, and ``status().last_error`` says it
        (called with the lock held)."""
        inflight = self._inflight
        if inflight is None or doc.get("id") != inflight["id"] or inflight["op"] != "save":
            return
        if doc["op"] == "recovered":  # the store answers again: a window this try opened ends
            if self._window_by == inflight["id"]:
                self._failing_since = self._first_failure = self._window_by = None
                log.info("checkpoint save of step %s: the store answers again", inflight["step"])
            if self._error is not None and self._error == self._trouble_error:
                self._error = None
            self._trouble_error = None
            self._cond.notify_all()
            return
        message = str(doc.get("message") or "the store failed")
        if self._failing_since is None:
            self._window_by = inflight["id"]
        self._failed_save(inflight, message)
        if self._error is None:
            self._error = self._trouble_error = message
        self._cond.notify_all()

    def _failed_save(self, inflight: dict[str, Any], message: str) -> None:
        """Start the retry window at a save's first failure (none started since the last
        commit); called with the lock held."""
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            self._first_failure = f"the save of step {inflight.get('step')}: {message}"
            log.warning(
                "checkpoint save failing (%s): retried for at most %gs from now (%s)",
                self._first_failure,
                self.retry_s,
                RETRY_ENV,
            )

    def window_left(self) -> float | None:
        """Seconds left of the retry window (never negative); None while no save fails."""
        with self._cond:
            since = self._failing_since
        return None if since is None else max(0.0, since + self.retry_s - time.monotonic())

    def _window_spent(self, step: Any, err: str | None) -> StoreError:
        """The error of a spent retry window; the store is down from here on: its calls are
        tried once (``fail_fast``), so what the trainer still records does not wait again."""
        with self._cond:
            first = self._first_failure or "unknown"
        self.store.fail_fast()
        return StoreError(
            f"checkpoint of step {step} not committed: the store failed every save for the "
            f"retry window ({self.retry_s:g}s, {RETRY_ENV}) from its first failure ({first})"
            + (f"; last: {err}" if err and err not in first else ""),
            where=self.store.url,
        )

    def _register(self, req: dict[str, Any], inflight: dict[str, Any]) -> None:
        """Make ``req`` the request in flight (called with the lock held)."""
        self._seq += 1
        req["id"] = inflight["id"] = self._seq
        self._inflight = inflight

    def _finish(self, doc: dict[str, Any]) -> None:
        """Record a reply (called with the lock held)."""
        inflight = self._inflight
        if inflight is None or doc.get("id") != inflight["id"]:
            return
        self._inflight = None
        self._results[inflight["id"]] = doc
        if doc["op"] == "done" and inflight["op"] == "save":
            r = doc["result"]
            self._last = SaveResult(
                step=r["step"],
                tier=r["tier"],
                stall_seconds=inflight["stall"],
                total_bytes=r["total_bytes"],
                uploaded_bytes=r["uploaded_bytes"],
                uploaded_chunks=r["uploaded_chunks"],
                reused_chunks=r["reused_chunks"],
                seconds=r.get("seconds", doc.get("seconds", 0.0)),
                committed_at=time.time(),
                extra={
                    k: v
                    for k, v in r.items()
                    if k in ("retention", "committed", "ranks", "store", "tiers", "store_error")
                },
            )
            self._error = self._unwaited_error = self._unwaited_kind = None
            self._last_save = None
            self._failing_since = self._first_failure = self._window_by = None  # committed
            self._trouble_error = None
        elif doc["op"] == "error":
            self._error = doc["message"]
            if inflight["op"] == "save":
                self._unwaited_error = doc["message"]
                self._unwaited_kind = str(doc.get("kind") or "error")
                self._failed_save(inflight, str(doc["message"]))
                self._window_by = self._trouble_error = None  # a failed save keeps it open
            log.error("checkpoint %s failed: %s", inflight["op"], doc["message"])
        self._cond.notify_all()

    def _send(self, req: dict[str, Any], inflight: dict[str, Any]) -> None:
        self._warmed()
        starting = self._starting
        if starting is not None and starting.is_alive():
            # the construction's worker start: write into its stdin once the process exists
            self._spawned.wait()
            buffer = self._buffer
            # a buffer made since (the one of the construction failed) is not the worker's
            inherited = buffer is None or not buffer.memfds or buffer.token == self._worker_buffer
            with self._cond:
                proc = self._proc
                if proc is not None and proc.poll() is None and inherited:
                    self._register(req, inflight)
                else:
                    proc = None
            if proc is not None:
                self._write(proc, req)
                return
        try:
            proc = self._ensure_worker()
        except WorkerStartError as exc:
            # the request fails like one whose worker died: wait() starts another and retries
            with self._cond:
                self._register(req, inflight)
                self._worker_failed(exc.one_line())
            return
        with self._cond:
            self._register(req, inflight)
        self._write(proc, req)

    def _write(self, proc: subprocess.Popen[str], req: dict[str, Any]) -> None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(req, separators=(",", ":")) + "\n")
            proc.stdin.flush()
        except (OSError, ValueError):
            # the reader thread (or a start that failed) reports the dead worker as this
            # request's failure
            pass

    @property
    def worker_pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    # -- the API --------------------------------------------------------------------------

    def busy(self) -> bool:
        with self._cond:
            return self._inflight is not None

    def warm(self, state: Any = None, *, nbytes: int | None = None, wait: bool = False) -> None:
        """Make the first save as quick as a steady one: allocate (and fault in) the host
        buffer for ``state`` (its exact layout) or for ``nbytes`` of arrays (with headroom
        for the alignment), and start the worker process with it, in a background thread
        (``wait``: here). The next ``save`` waits for it. Nothing is lost if it fails: it is
        logged, and the save does the same work itself. Call it once the state has its
        final shape (an optimizer's moments exist after the first step)."""
        if self._closed or self.busy():
            return
        sig: str | None = None
        if state is not None:
            entries, total = build_layout(flatten(state)[1], self.chunk_size)
            sig = layout_signature(entries, self.chunk_size)
        elif nbytes is not None:
            total = nbytes + nbytes // 64 + (1 << 20)
        else:
            raise CheckpointError("warm() needs a state or a size")

        def run() -> None:
            t0 = time.perf_counter()
            try:
                if self._buffer is None:
                    self._buffer = HostBuffer(total, self.buffer_dir)
                    # a fresh buffer is all zeros: the first save need not zero it again
                    self._layout_sig = sig
                elif self._buffer.size < total or self._buffer.faulted < total:
                    if self._buffer.size < total:
                        self._layout_sig = None  # the bytes may move (HostBuffer.grow)
                    self._buffer.grow(total)  # same descriptors: the worker keeps them
                    self._buffer.populate(fresh_threads())
                self._ensure_worker()
            except (StoreError, CheckpointError, OSError) as exc:
                log.warning("checkpoint warm-up failed (the first save does it): %s", exc)
                return
            log.info(
                "checkpoint buffer (%d bytes) and worker ready in %.2fs",
                total,
                time.perf_counter() - t0,
            )

        if wait:
            self._warmed()
            run()
            return
        self._background(run)

    def _warmed(self) -> None:
        """Wait for a warm-up in progress (before the buffer or the worker is touched)."""
        thread = self._warming
        if thread is not None:
            thread.join()
            self._warming = None

    def save(
        self,
        step: int,
        state: Any,
        tier: str = "full",
        *,
        if_busy: str = "wait",
        store: bool | None = None,
    ) -> bool:
        """Stage ``state`` and hand it to the background worker. Returns False if skipped.

        With memory tiers, ``store``: whether this save also goes to the object store
        (None: every ``store_every``-th save does, and every save after a stop notice
        (``commit_by``): the memory tiers first, then the store if the window allows)."""
        if self._closed:
            raise CheckpointError("save() after close()")
        self._warmed()
        check_tier(tier)
        if if_busy not in ("wait", "skip"):
            raise CheckpointError(f"if_busy must be 'wait' or 'skip', not {if_busy!r}")
        if self.busy():
            if if_busy == "skip":
                return False
            self._wait_idle()
        t0 = time.perf_counter()
        tree, arrays = flatten(state)
        entries, total = build_layout(arrays, self.chunk_size)
        if self._buffer is None:
            self._buffer = HostBuffer(total, self.buffer_dir, prefault=False)
            self._layout_sig = None
        elif self._buffer.size < total:
            self._buffer.grow(total)  # same descriptors: the worker maps the new size
            self._layout_sig = None
        sig = layout_signature(entries, self.chunk_size)
        if sig != self._layout_sig:
            # padding between arrays must not carry stale bytes
            self._buffer.zero_gaps(entries, total)
            self._layout_sig = sig
        self._buffer.copy_in(arrays, entries)
        stall = time.perf_counter() - t0
        req = {
            "op": "save",
            "step": int(step),
            "tier": tier,
            "buffer": self._buffer.worker_paths,
            "size": self._buffer.size,
            "arrays": [e.to_json() for e in entries],
            "tree": tree,
            "chunk_size": self.chunk_size,
        }
        if self.shard is not None:
            req["shard"] = self.shard.to_json()
        if self.memory:
            if store is None:
                store = self._commit_by is not None or self._saves % self.store_every == 0
            req["store"] = bool(store)
        self._saves += 1
        inflight = {"op": "save", "step": int(step), "tier": tier, "stall": stall}
        self._last_save = (req, dict(inflight))
        self._send(req, inflight)
        if self._buffer.faulted < self._buffer.size:
            # written with pwrite (first touch): map it in the background for the next save
            self._background(self._buffer.populate)
        return True

    def commit_by(self, at: float | None) -> None:
        """A stop notice's deadline (time.time(); None: none): the worker commits nothing
        past it, the save in flight included (at the deadline, what is committed counts)."""
        self._commit_by = at
        self._tell_deadline()

    def _tell_deadline(self, proc: subprocess.Popen[str] | None = None) -> None:
        proc = proc or self._proc
        if proc is None or proc.stdin is None or proc.poll() is not None:
            return
        with contextlib.suppress(OSError, ValueError):
            proc.stdin.write(json.dumps({"op": "deadline", "at": self._commit_by}) + "\n")
            proc.stdin.flush()

    def _hurry(self) -> None:
        """Tell the worker someone waits: it lifts the pacing of the save in progress."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.poll() is not None:
            return
        with contextlib.suppress(OSError, ValueError):
            proc.stdin.write('{"op":"hurry"}\n')
            proc.stdin.flush()

    def idle(self, timeout: float | None = None) -> bool:
        """Wait until no request is in flight, at most ``timeout`` seconds; False if one
        still is then (whether it succeeded is ``wait``'s to say)."""
        return self._wait_idle(timeout)

    def _wait_idle(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.busy():
            self._hurry()
        with self._cond:
            while self._inflight is not None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(1.0 if left is None else min(left, 1.0))
                self._check_worker_alive()
        return True

    def _wait_try(self, end: float | None, *, window: bool) -> str | None:
        """Wait for the request in flight: None once there is none; "window" when the retry
        window ends first (``window``: it may start while waiting, at a reported failure),
        "timeout" when ``end`` (monotonic) passes."""
        if self.busy():
            self._hurry()
        with self._cond:
            while self._inflight is not None:
                now = time.monotonic()
                closes = (
                    self._failing_since + self.retry_s
                    if window and self._failing_since is not None
                    else None
                )
                if closes is not None and now >= closes and (end is None or closes <= end):
                    return "window"
                if end is not None and now >= end:
                    return "timeout"
                nap = min([1.0, *(t - now for t in (closes, end) if t is not None)])
                self._cond.wait(max(nap, 0.01))
                self._check_worker_alive()
        return None

    def _check_worker_alive(self) -> None:
        """A worker that died before its request was registered (called with the lock)."""
        proc, reader = self._proc, self._reader
        if (
            self._inflight is not None
            and proc is not None
            and proc.poll() is not None
            and reader is not None
            and not reader.is_alive()
        ):
            self._worker_failed(f"checkpoint worker died (exit code {proc.returncode})")

    def wait(self, timeout: float | None = None, *, retry: bool = True) -> SaveResult | None:
        """Wait for the save in flight to commit.

        With ``retry`` (the default) a save that failed for an infrastructure reason (its
        worker died or did not start, the store failed) is sent again, with backoff, within
        ``timeout`` and what is left of the retry window (``retry_s`` from the first failure
        since the last commit, not from this call; a try still in flight is waited for only
        that long). Raises ``StoreError`` (exit 4) when the window is spent,
        ``CheckpointError`` for any other failure or when ``timeout`` passes."""
        end = None if timeout is None else time.monotonic() + timeout
        delay = 0.5
        tries = 0
        while True:
            ended = self._wait_try(end, window=retry)
            if ended == "window":
                status = self.status()
                raise self._window_spent(status.in_flight, status.last_error)
            if ended == "timeout":
                raise CheckpointError(
                    f"checkpoint of step {self.status().in_flight} still in flight after "
                    f"{timeout}s",
                    where=self.store.url,
                )
            with self._cond:
                err, self._unwaited_error = self._unwaited_error, None
                kind, self._unwaited_kind = self._unwaited_kind, None
                self._results.clear()
                last_save = self._last_save
            if not err:
                return self._last
            if kind not in RETRYABLE or last_save is None:
                raise CheckpointError(err, where=self.store.url)
            req, inflight = last_save
            if self._manifest_committed(req["step"], req["tier"]):
                log.warning(
                    "checkpoint step %d: the manifest is in the store, the save committed (%s)",
                    req["step"],
                    err,
                )
                self.retries.append(f"step {req['step']}: committed before: {err}")
                with self._cond:
                    self._failing_since = self._first_failure = self._window_by = None
                    self._last = SaveResult(
                        step=int(req["step"]),
                        tier=str(req["tier"]),
                        stall_seconds=float(inflight.get("stall") or 0.0),
                        total_bytes=int(req.get("size") or 0),
                        extra={"recovered": err},
                    )
                    self._last_save = None
                return self._last
            if not retry:
                raise CheckpointError(err, where=self.store.url)
            now = time.monotonic()
            window = self.window_left()
            window_end = now + (self.retry_s if window is None else window)
            if now + delay > window_end:
                raise self._window_spent(req["step"], err)
            if end is not None and now + delay > end:
                raise StoreError(
                    f"checkpoint of step {req['step']} not committed after {tries + 1} "
                    f"tries within {timeout:g}s: {err}",
                    where=self.store.url,
                )
            tries += 1
            self.retries.append(f"step {req['step']}: try {tries + 1} after: {err}")
            log.warning(
                "checkpoint step %d failed (%s): try %d in %.1fs",
                req["step"],
                err,
                tries + 1,
                delay,
            )
            time.sleep(delay)
            delay = min(delay * 2, 8.0)
            self._send(dict(req), dict(inflight))

    def _manifest_committed(self, step: int, tier: str) -> bool:
        """Whether the save's manifest is in the store; asked for no longer than what is left
        of the retry window (a store that is down answers nothing: not committed)."""
        found: list[bool] = []

        def ask() -> None:
            try:
                found.append(self.store.exists(manifest_key(int(step), str(tier))))
            except StoreError:
                found.append(False)

        asking = threading.Thread(target=ask, daemon=True, name="ckpt-manifest-check")
        asking.start()
        left = self.window_left()
        asking.join(None if left is None else max(left, MANIFEST_CHECK_S))
        return bool(found and found[0])

    def status(self) -> CheckpointStatus:
        with self._cond:
            step = self._inflight.get("step") if self._inflight else None
            return CheckpointStatus(step, self._last, self._error, self.worker_pid)

    def checkpoints(self, tier: str | None = None) -> list[CheckpointRef]:
        """Committed checkpoints, oldest first: the store's, and with memory tiers also those
        only they hold (``burst.checkpoint.restore.tier_catalog``)."""
        if not self.memory:
            return list_checkpoints(self.store, tier)
        faster = self.memory_stores()
        try:
            held = tier_catalog(self.store, faster, tier)
        finally:
            for _, tier_store in faster:
                tier_store.close()
        return sorted(set().union(*held.values()), key=lambda r: (r.step, r.tier == "full"))

    def latest(self, tier: str | None = None) -> CheckpointRef | None:
        if not self.memory:
            return latest_checkpoint(self.store, tier)
        refs = self.checkpoints(tier)
        return refs[-1] if refs else None

    def restore(
        self,
        step: int | None = None,
        *,
        tier: str | None = None,
        into: Any = None,
        fallback: bool | None = None,
    ) -> Restored:
        """Load a committed checkpoint (newest by default), verifying every chunk."""
        audit = ChunkAudit()
        # a sharded rank's memory tiers hold its part, not a whole checkpoint (restore_split)
        faster = self.memory_stores() if self.shard is None else []
        try:
            return restore_checkpoint(
                self.store,
                step,
                tier=tier,
                into=into,
                fallback=fallback,
                concurrency=self.concurrency,
                audit=audit,
                faster=faster,
            )
        finally:
            for _, tier_store in faster:
                tier_store.close()
            self._absorb(audit)

    def memory_stores(self) -> list[tuple[str, ObjectStore]]:
        """This rank's memory tiers as stores (name, store), fastest first."""
        return [(name, PeerStore(address, self.tier_prefix)) for name, address in self.memory]

    def restore_split(
        self, ex: Exchange, tier: str = "full", *, share: bool = False, into: Any = None
    ) -> Restored | None:
        """The newest checkpoint of ``tier`` that restores, read by W ranks each reading only
        its part (see burst.checkpoint.split_restore); None if there is none. ``into``: a
        whole state whose tensors receive the bytes in place where they fit."""
        audit = ChunkAudit()
        try:
            if self.shard is None or not self.memory:
                return restore_split(
                    self.store,
                    self.checkpoints(tier) if ex.rank == 0 else [],
                    ex,
                    share=share,
                    into=into,
                    concurrency=self.concurrency,
                    audit=audit,
                )
            return self._restore_parts(ex, tier, share=share, into=into, audit=audit)
        finally:
            self._absorb(audit)

    def _restore_parts(
        self, ex: Exchange, tier: str, *, share: bool, into: Any, audit: ChunkAudit
    ) -> Restored | None:
        """``restore_split`` of a sharded manager with memory tiers: every part from memory
        where every rank reads them all, else the store (burst.checkpoint.parts_restore)."""
        assert self.shard is not None
        shard = self.shard
        opened: list[ObjectStore] = []

        def tiers_of(q: int) -> list[tuple[str, ObjectStore]]:
            prefix = tier_name(self.store.url, dataclasses.replace(shard, rank=q))
            if q == shard.rank and self.tier_prefix != tier_name(self.store.url, shard):
                prefix = self.tier_prefix
            out: list[tuple[str, ObjectStore]] = []
            for name, address in self.rank_tiers[q]:
                peer = PeerStore(address, prefix)
                opened.append(peer)
                out.append((name, peer))
            return out

        try:
            refs: list[CheckpointRef] = []
            in_store: set[tuple[int, str]] = set()
            if ex.rank == 0:
                held = tier_catalog(self.store, tiers_of(0), tier)
                refs = sorted(set().union(*held.values()), key=lambda r: (r.step, r.tier == "full"))
                in_store = {(r.step, r.tier) for r in held["store"]}
            agreed = ex.decide(lambda: sorted(in_store))  # rank 0's, on every rank
            in_store = {(int(step), str(kind)) for step, kind in agreed}
            split = SplitRead(
                self.store, ex, share=share, into=into, concurrency=self.concurrency, audit=audit
            )
            plan = PartsRead(ex, shard.world, tiers_of, split, in_store, self.concurrency, into)
            return restore_newest(refs, plan, where=self.store.url, ex=ex)
        finally:
            for peer in opened:
                peer.close()

    def _absorb(self, audit: ChunkAudit) -> None:
        self._audit.sound |= audit.sound - audit.corrupt
        self._audit.sound -= audit.corrupt
        self._audit.corrupt |= audit.corrupt
        if self._proc is not None and self._proc.poll() is None:
            self._tell_worker(audit)

    def _tell_worker(self, audit: ChunkAudit) -> None:
        """A running worker learns what a restore found (acted on at once, like "hurry")."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        req = {"op": "audit", "sound": sorted(audit.sound), "corrupt": sorted(audit.corrupt)}
        with contextlib.suppress(OSError, ValueError):
            proc.stdin.write(json.dumps(req, separators=(",", ":")) + "\n")
            proc.stdin.flush()

    def collect_garbage(self, grace: float = 0.0, *, retention: bool = True) -> dict[str, Any]:
        """Apply retention and delete unreferenced chunks, in the worker, after the save."""
        self._wait_idle()
        self._send({"op": "gc", "grace": grace, "retention": retention}, {"op": "gc"})
        with self._cond:
            inflight = self._inflight
        self._wait_idle()
        doc = self._results.pop(inflight["id"], {}) if inflight else {}
        if doc.get("op") != "done":
            raise CheckpointError(
                doc.get("message", "garbage collection failed"), where=self.store.url
            )
        return dict(doc["result"])

    def replicate_to(
        self, dst: ObjectStore | str, steps: list[int] | None = None
    ) -> ReplicationResult:
        """Copy committed checkpoints to a second store, verified on arrival."""
        self._wait_idle()
        target = open_store(dst) if isinstance(dst, str) else dst
        return replicate(self.store, target, steps, concurrency=self.concurrency)

    def close(self, timeout: float | None = None) -> None:
        """Wait for the save in flight (at most ``timeout`` seconds), stop the worker, free
        the buffer. A save still in flight after ``timeout`` is left to the worker, which
        finishes it and exits (its manifest is the commit: it commits whole or not at all)."""
        if self._closed:
            return
        self._closed = True
        self._warmed()
        if self._starting is not None:
            self._starting.join()
        idle = False
        try:
            idle = self._wait_idle(timeout)
        finally:
            self._stop_worker(wait=idle)
            if self._buffer is not None:
                self._buffer.close()
                self._buffer = None

    def _stop_worker(self, wait: bool = True) -> None:
        """Ask the worker to exit once the request in hand is done; ``wait``: for it to (kill
        it if it does not within 30 s), else leave it to finish on its own."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.write('{"op":"exit"}\n')
            proc.stdin.close()
            if wait:
                proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
