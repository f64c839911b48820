"""The tier's service network: TCP forwarders whose listening end is in the pods' network
namespace and whose other end is this machine's loopback.

    python -m devtools.cluster.forward NETNS LISTEN=TARGET [LISTEN=TARGET ...]

``NETNS`` is a network namespace file (``/run/netns/<name>``); each ``LISTEN`` is
``address:port`` inside it (an address the tier put on that namespace's loopback, such as the
``kubernetes`` Service's cluster IP), each ``TARGET`` a ``127.0.0.1:port`` of this machine (the
API server, the object store). A socket keeps the namespace it was made in: the listeners are
made after ``setns`` into the pods' namespace, the process then returns to its own, and every
accepted connection is relayed to loopback. That is the part of kube-proxy the tier needs, and
nothing else: a pod reaches the listed services and no other address, and the machine's own
network namespace gets no address, route or rule.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (dst, src):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def _serve(listener: socket.socket, target: tuple[str, int]) -> None:
    while True:
        conn, _ = listener.accept()
        try:
            up = socket.create_connection(target, timeout=10)
            up.settimeout(None)
        except OSError:
            conn.close()
            continue
        for a, b in ((conn, up), (up, conn)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or any("=" not in a for a in argv[1:]):
        print("usage: python -m devtools.cluster.forward NETNS LISTEN=TARGET ...", file=sys.stderr)
        return 2
    pairs = [(_addr(a.split("=", 1)[0]), _addr(a.split("=", 1)[1])) for a in argv[1:]]
    for _, target in pairs:
        if target[0] != "127.0.0.1":
            print(f"forward: target {target[0]} is not loopback", file=sys.stderr)
            return 2
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    there = os.open(argv[0], os.O_RDONLY)
    _setns(there)
    listeners = []
    for listen, target in pairs:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(listen)
        s.listen(128)
        listeners.append((s, target))
    _setns(home)
    os.close(there)
    os.close(home)
    threads = [threading.Thread(target=_serve, args=(s, t), daemon=True) for s, t in listeners]
    for t in threads:
        t.start()
    print("forwarding", " ".join(argv[1:]), flush=True)
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
