"""Leases in an object store: one trainer per run, and a heartbeat the reaper can read.

A lease is one small JSON object: who holds it (``holder``, a line naming the process and
host), a random ``token``, when it was renewed and when it expires. The live holder renews it
every ``renew_s`` (a quarter of the time to live); a lease not renewed for ``ttl_s`` has
lapsed and may be taken over. Nobody else ever takes a lease that has not lapsed.

Taking one works on every store burst uses, including ``rclone serve s3`` on loopback, which
accepts but ignores ``If-None-Match`` / ``If-Match`` on PUT (measured with rclone 1.75.2: a
second conditional PUT succeeds, so a conditional write alone cannot decide): read the
lease, refuse if a live one is held by another, write ours, wait ``settle_s``, read it
back. Two contenders that both saw the lease free both write; the store keeps the last
write, and both read it back after their own write plus the settle time, so exactly one sees
its own token, provided a PUT lands within ``settle_s`` (2 s, 0.2 s for the local store;
``BURST_LEASE_SETTLE_S``; S3 and the local store are read-after-write consistent). The
loser refuses, naming the winner.

Two kinds of lease:

* ``trainer`` in the run's checkpoint store (``lease/trainer.json``): taken by the train step
  before it reads or writes anything, renewed by it, released when it ends.
* the run's heartbeat (``<role>.json``) where the reaper looks for the run's state:
  the run directory (``runs/<run-id>/heartbeat/``) for the local state store, or the S3 state
  bucket (``burst/runs/<run-id>/heartbeat/``) when ``BURST_TF_STATE_BUCKET`` is set. The
  local runner (role ``driver``) and the train step (role ``trainer``) renew theirs; a run
  whose heartbeats have all lapsed has nobody driving it, and the reaper destroys it.

Time to live: ``BURST_LEASE_TTL_S`` (default 180 s); renewal every quarter of it.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burst.errors import PolicyRefusal
from burst.storage.base import ObjectMissing, ObjectStore, StoreError

log = logging.getLogger(__name__)

DEFAULT_TTL_S = 180.0
DEFAULT_SETTLE_S = 2.0
LOCAL_SETTLE_S = 0.2
TRAINER_KEY = "lease/trainer.json"
STATE_PREFIX = "burst/runs/"  # the S3 state store's layout (burst.infra.reaper)


def ttl_s() -> float:
    from burst.settings import current

    return float(current().lease_ttl_s)


def settle_s(store: ObjectStore | None = None) -> float:
    """The settle time: ``BURST_LEASE_SETTLE_S``, else 2 s for a remote store and 0.2 s for
    the local one (a rename lands in microseconds)."""
    from burst.settings import current
    from burst.storage.local import LocalStore

    given = current().lease_settle_s
    if given is not None:
        return float(given)
    return LOCAL_SETTLE_S if isinstance(store, LocalStore) else DEFAULT_SETTLE_S


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class LeaseHeld(PolicyRefusal):
    """Another live process holds the lease (exit 3): one line naming the holder."""


def describe_holder(role: str) -> str:
    return f"{role} pid {os.getpid()} on {socket.gethostname()}"


def read_lease(store: ObjectStore, key: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(store.get_bytes(key))
    except ObjectMissing:
        return None
    except ValueError:
        log.warning("%s/%s is not a lease document: treated as lapsed", store.url, key)
        return None
    return doc if isinstance(doc, dict) else None


def is_live(doc: dict[str, Any] | None, now: float | None = None) -> bool:
    if not doc:
        return False
    try:
        return float(doc.get("expires_at") or 0) > (time.time() if now is None else now)
    except (TypeError, ValueError):
        return False


def dead_here(doc: dict[str, Any] | None) -> bool:
    """The holder ran on this host and its process is gone: its lease is void at once."""
    if not doc or doc.get("host") != socket.gethostname():
        return False
    try:
        pid = int(doc.get("pid") or 0)
    except (TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a zombie (killed, not reaped yet) holds nothing
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def alive(doc: dict[str, Any] | None, now: float | None = None) -> bool:
    """A lease someone live holds: not lapsed, and its holder not known dead."""
    return is_live(doc, now) and not dead_here(doc)


def held_line(what: str, doc: dict[str, Any], where: str) -> str:
    renewed = iso(float(doc.get("renewed_at") or 0))
    expires = iso(float(doc.get("expires_at") or 0))
    return (
        f"{what} is held by {doc.get('holder', 'an unknown holder')} (renewed {renewed}, "
        f"expires {expires}; lease {where}): wait until it lapses, or stop that process"
    )


@dataclass
class Lease:
    store: ObjectStore
    key: str
    holder: str
    what: str  # for messages: "run X's trainer lease"
    ttl: float = DEFAULT_TTL_S
    settle: float = DEFAULT_SETTLE_S
    token: str = ""

    @classmethod
    def for_env(cls, store: ObjectStore, key: str, holder: str, what: str) -> Lease:
        return cls(store, key, holder, what, ttl_s(), settle_s(store))

    @property
    def where(self) -> str:
        return f"{self.store.url}/{self.key}"

    def _doc(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        now = time.time()
        return {
            "holder": self.holder,
            "token": self.token,
            "renewed_at": now,
            "expires_at": now + self.ttl,
            "ttl_s": self.ttl,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            **(extra or {}),
        }

    def acquire(self, extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """Take the lease, or raise LeaseHeld naming the live holder. Returns the lapsed
        lease taken over, if there was one."""
        current = read_lease(self.store, self.key)
        if alive(current) and current is not None and current.get("token") != self.token:
            raise LeaseHeld(held_line(self.what, current, self.where))
        self.token = self.token or secrets.token_hex(8)
        self.store.put_bytes(self.key, json.dumps(self._doc(extra)).encode())
        time.sleep(self.settle)
        back = read_lease(self.store, self.key)
        if back is None or back.get("token") != self.token:
            raise LeaseHeld(held_line(self.what, back or {}, self.where))
        if current is not None and current.get("released"):  # its holder let it go
            log.debug("took the %s %s released", self.what, current.get("holder"))
        elif current is not None:
            log.warning("took over the lapsed %s from %s", self.what, current.get("holder"))
        return current

    def take(self, extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """``acquire``, waiting for a holder that stopped renewing (a killed attempt on
        another node) to lapse; refused as soon as the holder renews (it is alive)."""
        first: float | None = None
        end = time.monotonic() + self.ttl + self.settle
        while True:
            try:
                return self.acquire(extra)
            except LeaseHeld:
                current = read_lease(self.store, self.key) or {}
                if current.get("host") == socket.gethostname():
                    raise  # a holder on this machine that is alive (else it was taken)
                renewed = float(current.get("renewed_at") or 0)
                if first is None:
                    first = renewed
                elif renewed != first or time.monotonic() > end:
                    raise
                log.warning(
                    "%s is held by %s: waiting to see whether it is renewed",
                    self.what,
                    current.get("holder"),
                )
                time.sleep(min(2.0, self.ttl / 8))

    def beat(self, extra: dict[str, Any] | None = None) -> None:
        """Write the lease whoever held it (a heartbeat, not a lock)."""
        self.token = self.token or secrets.token_hex(8)
        try:
            self.store.put_bytes(self.key, json.dumps(self._doc(extra)).encode())
        except StoreError as exc:
            log.warning("cannot write the %s: %s", self.what, exc.one_line())

    def renew(self, extra: dict[str, Any] | None = None) -> bool:
        """Renew; False when another holder has it now (ours lapsed and was taken over). A
        store that fails is logged and the lease kept: it lapses on its own if that lasts."""
        try:
            current = read_lease(self.store, self.key)
            if current is not None and current.get("token") != self.token:
                log.error("lost the %s to %s", self.what, current.get("holder"))
                return False
            self.store.put_bytes(self.key, json.dumps(self._doc(extra)).encode())
        except StoreError as exc:
            log.warning("cannot renew the %s: %s", self.what, exc.one_line())
        return True

    def release(self) -> None:
        """Let the lease lapse now (kept as a record: who held it and until when)."""
        try:
            current = read_lease(self.store, self.key)
            if current is not None and current.get("token") == self.token:
                doc = {**current, "expires_at": time.time(), "released": True}
                self.store.put_bytes(self.key, json.dumps(doc).encode())
        except StoreError as exc:
            log.warning("cannot release the %s: %s", self.what, exc.one_line())


class Renewer:
    """A daemon thread renewing leases every ``interval`` and calling ``tick`` (which may
    renew other things, such as the attempt record); ``lost`` is set when a lease is lost."""

    def __init__(
        self,
        leases: list[Lease],
        interval: float,
        tick: Callable[[], None] | None = None,
        beats: list[Lease] | None = None,
    ) -> None:
        self.leases = leases
        self.beats = beats or []
        self.interval = interval
        self.tick = tick
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="lease-renewer")

    def start(self) -> Renewer:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for lease in self.leases:
                if not lease.renew():
                    self.lost.set()
            for beat in self.beats:
                beat.beat()
            if self.tick is not None:
                try:
                    self.tick()
                except Exception:  # a progress record must never stop the renewals
                    log.exception("lease renewer tick failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


def heartbeat_store(run_id: str, run_dir: Path) -> ObjectStore:
    """Where the run's heartbeat lives: next to its Terraform state, where the reaper looks."""
    from burst.settings import current

    bucket = current().tf_state_bucket
    if bucket:
        from burst.storage.s3 import S3Store

        region = current().tf_state_region or None
        return S3Store(bucket, f"{STATE_PREFIX}{run_id}/heartbeat", region=region)
    return local_heartbeat_store(run_dir)


def local_heartbeat_store(run_dir: Path) -> ObjectStore:
    from burst.storage.local import LocalStore

    return LocalStore(run_dir / "heartbeat", fsync=False)


def heartbeat_key(role: str) -> str:
    return f"{role}.json"


def heartbeats(store: ObjectStore) -> dict[str, dict[str, Any]]:
    """Every heartbeat of a run, by role ({} when it has none, or they cannot be read)."""
    out: dict[str, dict[str, Any]] = {}
    try:
        for info in list(store.list("")):
            doc = read_lease(store, info.key) if info.key.endswith(".json") else None
            if doc is not None:
                out[info.key.removesuffix(".json")] = doc
    except StoreError as exc:
        log.warning("cannot read the heartbeats in %s: %s", store.url, exc.one_line())
    return out
