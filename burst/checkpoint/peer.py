"""Memory tiers: a process that holds checkpoints in its memory, served over TCP.

A checkpoint's memory tiers (docs/checkpoints.md, "Tiers") are ``PeerServer`` processes:
the one on this rank's own node (``local``) and one on another node (``peer``). Each holds,
in its RAM, objects under the keys of the store layout (``chunks/<blake3>``,
``manifests/<step>.<tier>.json``, ``pending/<token>.json``, ``latest.json``, below a
per-rank prefix), so the checkpoint worker writes to it with the same ``CheckpointWriter``
(chunks, then the manifest) and a restore reads it with the same restore loop, through
``PeerStore``, an ``ObjectStore`` speaking a plain length-prefixed protocol over one TCP
connection per thread.

What the server guarantees, whatever the sender does:

- a chunk is kept only if its bytes hash to the blake3 its key names (checked on arrival, as
  the replication to a second store checks each chunk);
- a manifest is kept only if its own checksum holds and every chunk it references is there
  (manifest-last, per tier): a sender that dies mid-replication leaves chunks and no manifest,
  nothing a restore can take for a checkpoint;
- it holds at most ``capacity`` bytes: to make room it drops the oldest checkpoints (never
  the newest of a prefix) and the chunks only they referenced; what still does not fit is
  refused (``peer memory full``), and the save goes on to the next tier.

Run one: ``python -m burst.checkpoint.peer --capacity 8G`` prints ``listening HOST:PORT``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3

from burst import checkout
from burst.checkpoint.manifest import MANIFEST_RE, Manifest
from burst.errors import BadInputError, CheckpointError
from burst.storage.base import ObjectInfo, ObjectMissing, ObjectStore, StoreError, check_key

log = logging.getLogger(__name__)

HEADER = struct.Struct(">I")
#: a request or reply header (JSON) larger than this is a broken peer, not a big one
MAX_HEADER = 16 << 20
#: seconds a peer gets to answer one call: a hung peer is a lost tier, not a hung restore
TIMEOUT_S = 10.0
KEY_RE = re.compile(r"^(?:(?P<ns>.*)/)?(?P<kind>chunks|manifests|pending)/(?P<name>[^/]+)$")


class PeerRefused(CheckpointError):
    """The peer refused an object (a corrupt chunk, a manifest before its chunks, full)."""


def _split(key: str) -> tuple[str, str, str]:
    """(prefix, kind, name) of a key of the store layout; kind "" for any other key."""
    m = KEY_RE.match(key)
    if m is None:
        return "", "", key
    return m.group("ns") or "", m.group("kind"), m.group("name")


def _join(ns: str, rest: str) -> str:
    return f"{ns}/{rest}" if ns else rest


@dataclass
class _Held:
    data: bytes
    mtime: float


class PeerMemory:
    """The objects a peer holds, at most ``capacity`` bytes; safe from several threads."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise BadInputError(f"peer memory capacity must be > 0 bytes, not {capacity}")
        self.capacity = capacity
        self.used = 0
        self._objects: dict[str, _Held] = {}
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes) -> None:
        ns, kind, name = _split(key)
        if kind == "chunks" and blake3.blake3(data).hexdigest() != name:
            raise PeerRefused(f"chunk {name[:16]} arrived corrupt (blake3 mismatch)", where=key)
        refs: set[str] = set()
        if kind == "manifests":
            manifest = Manifest.from_bytes(data, key)  # its own checksum
            refs = {_join(ns, f"chunks/{c.digest}") for c in manifest.chunks}
        with self._lock:
            missing = [k for k in refs if k not in self._objects]
            if missing:
                raise PeerRefused(
                    f"manifest refused: {len(missing)} of its chunks are not here "
                    f"(first {missing[0]})",
                    where=key,
                )
            old = self._objects.get(key)
            need = len(data) - (len(old.data) if old else 0)
            if self.used + need > self.capacity:
                self._evict(self.used + need - self.capacity, keep=key)
            if self.used + need > self.capacity:
                raise PeerRefused(
                    f"peer memory full: {self.used} of {self.capacity} bytes held, "
                    f"{len(data)} more asked",
                    where=key,
                )
            self._objects[key] = _Held(bytes(data), time.time())
            self.used += need

    def get(self, key: str) -> bytes | None:
        with self._lock:
            held = self._objects.get(key)
        return None if held is None else held.data

    def list(self, prefix: str) -> list[tuple[str, int, float]]:
        with self._lock:
            return [
                (k, len(h.data), h.mtime) for k, h in self._objects.items() if k.startswith(prefix)
            ]

    def delete(self, keys: Iterable[str]) -> None:
        with self._lock:
            for key in keys:
                held = self._objects.pop(key, None)
                if held is not None:
                    self.used -= len(held.data)

    def _evict(self, need: int, keep: str) -> None:
        """Drop the oldest checkpoints (never the newest of a prefix), stale pending records,
        and the chunks nothing left references, until ``need`` bytes are free or nothing
        more may go (called with the lock held)."""
        newest: dict[str, str] = {}
        manifests: list[tuple[float, str]] = []
        for key, held in self._objects.items():
            ns, kind, name = _split(key)
            if kind == "manifests" and MANIFEST_RE.match(f"manifests/{name}"):
                manifests.append((held.mtime, key))
                if key > newest.get(ns, ""):
                    newest[ns] = key
        freed = 0
        for _, key in sorted(manifests):
            if freed >= need:
                break
            if key == keep or newest.get(_split(key)[0]) == key:
                continue
            freed += len(self._objects.pop(key).data)
        self.used -= freed
        # pending records of a sender that is gone: older than the newest checkpoint
        for key in [k for k in self._objects if _split(k)[1] == "pending"]:
            ns = _split(key)[0]
            try:
                step = int(json.loads(self._objects[key].data).get("step", -1))
            except (ValueError, AttributeError):
                step = -1
            top = newest.get(ns)
            if top is not None and step <= int(top.rsplit("/", 1)[-1][:12]):
                self.used -= len(self._objects.pop(key).data)
        referenced: set[str] = set()
        for key, held in self._objects.items():
            ns, kind, _ = _split(key)
            if kind == "manifests":
                with contextlib.suppress(CheckpointError):
                    m = Manifest.from_bytes(held.data, key)
                    referenced |= {_join(ns, f"chunks/{c.digest}") for c in m.chunks}
            elif kind == "pending":
                with contextlib.suppress(ValueError, AttributeError, TypeError):
                    named = json.loads(held.data).get("chunks") or []
                    referenced |= {_join(ns, f"chunks/{d}") for d in named}
        for key in [k for k in self._objects if _split(k)[1] == "chunks"]:
            if key not in referenced and key != keep:
                self.used -= len(self._objects.pop(key).data)


# -- the wire: a 4-byte length, a JSON header, then "size" raw bytes ---------------------


def _send(sock: socket.socket, header: dict[str, Any], payload: bytes | memoryview = b"") -> None:
    head = json.dumps(header, separators=(",", ":")).encode()
    sock.sendall(HEADER.pack(len(head)) + head)
    if len(payload):
        sock.sendall(payload)


def _recv_into(sock: socket.socket, out: memoryview) -> None:
    got = 0
    while got < len(out):
        n = sock.recv_into(out[got:])
        if n == 0:
            raise ConnectionError("connection closed mid-message")
        got += n


def _recv_header(sock: socket.socket) -> dict[str, Any]:
    raw = bytearray(HEADER.size)
    _recv_into(sock, memoryview(raw))
    (n,) = HEADER.unpack(raw)
    if n > MAX_HEADER:
        raise ConnectionError(f"header of {n} bytes")
    head = bytearray(n)
    _recv_into(sock, memoryview(head))
    doc = json.loads(head)
    if not isinstance(doc, dict):
        raise ConnectionError("header is not an object")
    return doc


def _drain(sock: socket.socket, size: int) -> None:
    piece = memoryview(bytearray(min(size, 1 << 20)))
    while size > 0:
        n = min(size, len(piece))
        _recv_into(sock, piece[:n])
        size -= n


class _Handler(socketserver.BaseRequestHandler):
    server: PeerServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        memory = self.server.memory
        while True:
            try:
                req = _recv_header(sock)
            except (ConnectionError, OSError, ValueError):
                return
            op, key = req.get("op"), str(req.get("key") or "")
            try:
                if op == "put":
                    size = int(req["size"])
                    if size > memory.capacity:
                        _drain(sock, size)  # read and dropped, a piece at a time
                        _send(sock, {"ok": False, "error": f"{size} bytes exceed the capacity"})
                        continue
                    data = bytearray(size)
                    _recv_into(sock, memoryview(data))
                    memory.put(key, bytes(data))
                    _send(sock, {"ok": True})
                elif op == "get":
                    found = memory.get(key)
                    if found is None:
                        _send(sock, {"ok": False, "missing": True})
                    else:
                        _send(sock, {"ok": True, "size": len(found)}, found)
                elif op == "list":
                    _send(sock, {"ok": True, "items": memory.list(key)})
                elif op == "delete":
                    memory.delete(str(k) for k in req.get("keys") or [])
                    _send(sock, {"ok": True})
                elif op == "stats":
                    _send(sock, {"ok": True, "used": memory.used, "capacity": memory.capacity})
                else:
                    _send(sock, {"ok": False, "error": f"unknown op {op!r}"})
            except PeerRefused as exc:
                log.warning("refused %s: %s", key, exc.message)
                _send(sock, {"ok": False, "error": exc.message})
            except (ConnectionError, OSError):
                return


class PeerServer(socketserver.ThreadingTCPServer):
    """Serves a ``PeerMemory`` on ``host:port`` (0: a free port), a thread per connection."""

    daemon_threads = True
    allow_reuse_address = True
    # every restore thread of every rank connects at once: a backlog of 5 (the default)
    # drops the other SYNs, and each dropped one costs a 1 s retransmission
    request_queue_size = 256

    def __init__(self, capacity: int, host: str = "127.0.0.1", port: int = 0) -> None:
        self.memory = PeerMemory(capacity)
        super().__init__((host, port), _Handler)

    @property
    def address(self) -> str:
        host, port = self.server_address[:2]
        return f"{host!s}:{port}"


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise BadInputError(f"peer address {address!r} is not HOST:PORT")
    return host, int(port)


class PeerStore(ObjectStore):
    """An ``ObjectStore`` whose objects are in a ``PeerServer``'s memory, under ``prefix``.

    Any failure to reach or hear the peer is a ``StoreError`` at once (no retries: a tier
    that does not answer is skipped for the next one); a refused object is a
    ``CheckpointError``."""

    def __init__(self, address: str, prefix: str = "", *, timeout: float = TIMEOUT_S) -> None:
        self.address = address
        self._host, self._port = parse_address(address)
        self.prefix = prefix.strip("/")
        self.timeout = timeout
        self._local = threading.local()
        self._socks: list[socket.socket] = []
        self._socks_lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"peer://{self.address}" + (f"/{self.prefix}" if self.prefix else "")

    def spec(self) -> dict[str, Any]:
        return {"kind": "peer", "address": self.address, "prefix": self.prefix}

    def _full(self, key: str) -> str:
        check_key(key)
        return _join(self.prefix, key)

    def _sock(self) -> socket.socket:
        sock: socket.socket | None = getattr(self._local, "sock", None)
        if sock is None:
            sock = socket.create_connection((self._host, self._port), timeout=self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._local.sock = sock
            with self._socks_lock:
                self._socks.append(sock)
        return sock

    def _drop(self) -> None:
        sock = getattr(self._local, "sock", None)
        self._local.sock = None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _call(
        self, req: dict[str, Any], payload: bytes | memoryview = b"", out: memoryview | None = None
    ) -> tuple[dict[str, Any], bytes | None]:
        where = f"peer://{self.address}/{req.get('key', '')}".rstrip("/")
        try:
            sock = self._sock()
            _send(sock, req, payload)
            head = _recv_header(sock)
            data: bytes | None = None
            if head.get("ok") and "size" in head:
                size = int(head["size"])
                if out is not None:
                    if size != len(out):
                        self._drop()  # the payload is not read: the connection goes
                        raise StoreError(
                            f"object has {size} bytes, expected {len(out)}", where=where
                        )
                    _recv_into(sock, out)
                else:
                    buf = bytearray(size)
                    _recv_into(sock, memoryview(buf))
                    data = bytes(buf)
        except (OSError, ValueError) as exc:
            self._drop()
            raise StoreError(f"peer memory at {self.address} failed: {exc}", where=where) from exc
        if head.get("missing"):
            raise ObjectMissing(f"{req.get('key')} is not in peer memory", where=where)
        if not head.get("ok"):
            raise PeerRefused(str(head.get("error") or "refused"), where=where)
        return head, data

    def put_bytes(self, key: str, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B") if isinstance(data, memoryview) else data
        self._call({"op": "put", "key": self._full(key), "size": len(view)}, view)

    def put_file(self, key: str, path: Path) -> None:
        self.put_bytes(key, path.read_bytes())

    def get_bytes(self, key: str) -> bytes:
        _, data = self._call({"op": "get", "key": self._full(key)})
        assert data is not None
        return data

    def get_into(self, key: str, out: memoryview) -> None:
        self._call({"op": "get", "key": self._full(key)}, out=out.cast("B"))

    def get_file(self, key: str, path: Path) -> None:
        path.write_bytes(self.get_bytes(key))

    def exists(self, key: str) -> bool:
        full = self._full(key)
        head, _ = self._call({"op": "list", "key": full})
        return any(item[0] == full for item in head.get("items") or [])

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        full = _join(self.prefix, prefix) if self.prefix else prefix
        head, _ = self._call({"op": "list", "key": full})
        cut = len(self.prefix) + 1 if self.prefix else 0
        for key, size, mtime in head.get("items") or []:
            yield ObjectInfo(str(key)[cut:], int(size), float(mtime))

    def delete(self, keys: Iterable[str]) -> None:
        self._call({"op": "delete", "keys": [self._full(k) for k in keys]})

    def stats(self) -> dict[str, int]:
        head, _ = self._call({"op": "stats"})
        return {"used": int(head["used"]), "capacity": int(head["capacity"])}

    def close(self) -> None:
        with self._socks_lock:
            socks, self._socks = self._socks, []
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.close()
        self._local = threading.local()


def start_peer(
    capacity: int, host: str = "127.0.0.1", *, with_parent: bool = False
) -> tuple[subprocess.Popen[str], str]:
    """A peer server in a process of its own (a "node" of a local run or a test): the
    process and its ``HOST:PORT``. ``with_parent``: it exits when this process does, even
    killed (the train step's servers)."""
    env_path = str(checkout.ROOT)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "burst.checkpoint.peer",
            "--capacity",
            str(capacity),
            "--host",
            host,
            *(["--parent", str(os.getpid())] if with_parent else []),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": env_path},
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if len(line) != 2 or line[0] != "listening":
        proc.kill()
        proc.wait()
        raise StoreError(f"peer memory server did not start (exit code {proc.returncode})")
    return proc, line[1]


#: how often a server started ``with_parent`` checks that its parent lives
PARENT_POLL_S = 0.5

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if m is None:
        raise BadInputError(f"size {text!r} is not a number of bytes (e.g. 512M, 8G)")
    return int(m.group(1)) * _UNITS[m.group(2)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burst.checkpoint.peer", description=__doc__)
    ap.add_argument("--capacity", required=True, help="bytes held at most (e.g. 8G)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--parent", type=int, default=0, help="exit when this process is gone")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s peer %(levelname)s %(message)s")
    try:
        server = PeerServer(parse_size(args.capacity), args.host, args.port)
    except BadInputError as exc:
        print(exc.one_line(), file=sys.stderr)
        return 2
    print(f"listening {server.address}", flush=True)
    if args.parent:
        threading.Thread(
            target=_exit_with, args=(args.parent, server), daemon=True, name="peer-parent"
        ).start()
    with server:
        server.serve_forever()
    return 0


def _exit_with(parent: int, server: PeerServer) -> None:
    """Stop ``server`` once ``parent`` is gone (this process is re-parented)."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    log.warning("the process that started this peer server (%d) is gone: exiting", parent)
    server.shutdown()


if __name__ == "__main__":
    sys.exit(main())
