"""The host buffer a save copies tensors into, shared with the background worker.

The buffer is anonymous shared memory (``memfd_create``), which the worker maps through
``/proc/<pid>/fd/<n>``: it is not limited by the size of /dev/shm (64 MiB in a default
container), counts against the memory limit like any RAM, and is freed by the kernel when
the last process holding it exits, whatever kills them. Without memfd (or with
``BURST_CHECKPOINT_SHM_DIR`` set) it is a file in that directory, /dev/shm by default,
checked for free space first. Either way it is kept and reused between checkpoints: a fresh
allocation costs page faults on every save (~1.7 GB/s measured here), a reused one copies at
memory speed. It grows only when the state grows.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import secrets
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from burst.checkpoint.layout import ArrayEntry
from burst.errors import CheckpointError

log = logging.getLogger(__name__)
SHM_DIR_ENV = "BURST_CHECKPOINT_SHM_DIR"
#: Fresh bytes are written in pieces of this size, taken from one queue by every thread.
FRESH_PIECE = 16 << 20
#: At least this many fresh bytes per thread: below it, starting threads costs more.
FRESH_PARALLEL_MIN = 32 << 20
#: Most threads a first save writes with (memory bandwidth, not cores, bounds it beyond).
FRESH_THREADS_MAX = 8


def fresh_threads() -> int:
    """Threads that write a save's fresh bytes: the cores this process may run on, shared
    among the ranks of its node (``LOCAL_WORLD_SIZE``, set by torchrun), at most
    ``FRESH_THREADS_MAX``. The caller is blocked meanwhile: its own core is one of them."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE") or 1))
    except ValueError:
        local = 1
    return max(1, min(FRESH_THREADS_MAX, cores // local))


def shm_override() -> Path | None:
    from burst.settings import current

    return current().checkpoint_shm_dir


def shm_dir() -> Path:
    from burst.settings import current

    env = current().checkpoint_shm_dir
    if env is not None:
        return env
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


class HostBuffer:
    """A shared, reusable byte buffer in RAM that grows in place.

    ``prefault``: touch every page now (a warm-up, off the training thread). Without it the
    buffer starts unmapped: ``copy_in`` writes what lies beyond the faulted part with
    ``pwrite`` (the kernel allocates each page and fills it, no zeroing pass and no page
    fault in this process: about twice as fast as the first write through the mapping, which
    pays both), helped by threads on the other cores (``write_fresh``), and ``populate`` maps
    it afterwards, in the background, for the next save.
    ``grow`` keeps the same descriptor (and ``token``): a worker that inherited it needs no
    restart, it maps the new size.
    """

    def __init__(self, size: int, directory: Path | None = None, *, prefault: bool = True) -> None:
        self.size = max(size, mmap.PAGESIZE)
        self.memfd: int | None = None  # the worker inherits it (pass_fds) when set
        self.token = secrets.token_hex(8)  # fd numbers are reused: this names the buffer
        use_memfd = (
            directory is None
            and shm_override() is None
            and hasattr(os, "memfd_create")
            and Path(f"/proc/{os.getpid()}/fd").is_dir()
        )
        self._directory: Path | None = None
        if use_memfd:
            fd = os.memfd_create("burst-ckpt", os.MFD_CLOEXEC)
            self.memfd = fd
            self.path = Path(f"/proc/{os.getpid()}/fd/{fd}")
        else:
            directory = directory or shm_dir()
            self._directory = directory
            _check_room(directory, self.size)
            self.path = directory / f"burst-ckpt-{os.getpid()}-{secrets.token_hex(4)}"
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        self._fd = fd  # kept open: pwrite and grow
        self.faulted = 0  # bytes from the start that this process's mapping has touched
        self._torch_view: Any = None
        try:
            os.ftruncate(fd, self.size)
            self._map()
        except BaseException:
            os.close(fd)
            raise
        if prefault:
            self.array[:] = 0  # fault every page in now, not during the first save
            self.faulted = self.size

    def _map(self) -> None:
        self._mmap = mmap.mmap(self._fd, self.size)
        self.array = np.frombuffer(self._mmap, dtype=np.uint8)
        self._torch_view = None

    def grow(self, size: int) -> None:
        """At least ``size`` bytes, the same descriptor; the new part is zeros, not faulted."""
        if size <= self.size:
            return
        if self._directory is not None:
            _check_room(self._directory, size - self.size)
        self._torch_view = None
        self.array = np.empty(0, dtype=np.uint8)
        with contextlib.suppress(BufferError, ValueError):
            self._mmap.close()
        os.ftruncate(self._fd, size)
        self.size = size
        self._map()

    def populate(self) -> None:
        """Map (fault in) the part ``copy_in`` wrote with pwrite, without writing to it, so
        the next save copies at memory speed; releases the GIL (a background thread)."""
        if self.faulted >= self.size:
            return
        start = self.faulted // mmap.PAGESIZE * mmap.PAGESIZE
        if _populate_write(self.array, start, self.size - start):
            self.faulted = self.size

    @property
    def worker_path(self) -> str:
        """How the worker opens the buffer: its inherited copy of the memfd, or the file.
        The inherited descriptor stays valid even if the trainer dies before the worker
        maps the buffer."""
        return f"/proc/self/fd/{self.memfd}" if self.memfd is not None else str(self.path)

    def torch_bytes(self) -> Any:
        """The buffer as a torch uint8 tensor (shares memory)."""
        if self._torch_view is None:
            import torch

            self._torch_view = torch.from_numpy(self.array)
        return self._torch_view

    def zero(self) -> None:
        self.array[:] = 0
        self.faulted = self.size

    def zero_gaps(self, entries: list[ArrayEntry], total: int) -> None:
        """Zero the bytes of ``[0, total)`` that no array covers (alignment padding), so no
        stale bytes of an earlier layout reach a chunk; written with pwrite (never faults
        pages in)."""
        pos = 0
        for e in sorted(entries, key=lambda e: e.offset):
            if e.offset > pos:
                self._pwrite(bytes(e.offset - pos), pos)
            pos = max(pos, e.offset + e.nbytes)
        if total > pos:
            self._pwrite(bytes(total - pos), pos)

    def _pwrite(self, data: Any, offset: int) -> None:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += os.pwrite(self._fd, view[done : done + (1 << 30)], offset + done)

    def copy_in(self, arrays: list[Any], entries: list[ArrayEntry]) -> None:
        """Copy each array into its slot (a tensor on any device is copied to host).

        Host tensors are copied as bytes through numpy (one memcpy on the calling thread):
        torch's multi-threaded copy_ measured 15-50x slower than that on a busy machine, its
        worker threads waiting for cores that the training loop or other jobs hold. Into a
        part of the buffer not faulted in yet they are written with pwrite (see the class).
        """
        buf = None
        fresh_parts: list[tuple[np.ndarray, int]] = []
        for a, e in zip(arrays, entries, strict=True):
            if e.nbytes == 0:
                continue
            fresh = e.offset + e.nbytes > self.faulted
            if isinstance(a, np.ndarray):
                src = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
            elif a.device.type == "cpu":
                src = a.detach().reshape(-1).view(_torch_uint8()).numpy()
            else:
                if buf is None:
                    buf = self.torch_bytes()
                dst_t = buf[e.offset : e.offset + e.nbytes].view(a.dtype).view(a.shape)
                dst_t.copy_(a.detach())
                continue
            if fresh:
                fresh_parts.append((src, e.offset))
            else:
                np.copyto(self.array[e.offset : e.offset + e.nbytes], src)
        if fresh_parts:
            self.write_fresh(fresh_parts)

    def write_fresh(
        self,
        parts: list[tuple[np.ndarray, int]],
        threads: int | None = None,
        piece: int = FRESH_PIECE,
        min_per_thread: int = FRESH_PARALLEL_MIN,
    ) -> None:
        """Write ``(bytes, offset)`` parts into pages nobody has touched yet (a first save,
        a grown buffer): the first touch of a page (allocation, and a fault per 4 KiB page
        through the mapping) costs several times the copy itself, and it is paid while the
        caller is blocked. The caller writes pieces with pwrite, and, with more than one
        core to use (``fresh_threads``) and enough bytes, helper threads take pieces from
        the same queue and write them through the mapping after populating their pages
        (``MADV_POPULATE_WRITE``: one call per piece, not one fault per page). Helpers do
        not pwrite: the kernel serialises writes to one shmem file (its inode lock), while
        page faults on disjoint pages run in parallel. Each thread releases the GIL."""
        pieces = [
            (src[lo : lo + piece], off + lo)
            for src, off in parts
            for lo in range(0, src.nbytes, piece)
        ]
        total = sum(p.nbytes for p, _ in pieces)
        n = fresh_threads() if threads is None else threads
        n = min(n, len(pieces), max(1, total // max(1, min_per_thread)))
        if n <= 1:
            for src, off in parts:
                self._pwrite(src, off)
            return
        lock = threading.Lock()
        queue = iter(pieces)
        failed: list[BaseException] = []

        def take() -> tuple[np.ndarray, int] | None:
            with lock:
                return None if failed else next(queue, None)

        def helper() -> None:
            try:
                while (item := take()) is not None:
                    src, off = item
                    start = off // mmap.PAGESIZE * mmap.PAGESIZE
                    _populate_write(self.array, start, off + src.nbytes - start)
                    np.copyto(self.array[off : off + src.nbytes], src)
            except BaseException as exc:  # re-raised on the caller's thread
                with lock:
                    failed.append(exc)

        helpers = [
            threading.Thread(target=helper, daemon=True, name=f"ckpt-fresh-{i}")
            for i in range(n - 1)
        ]
        for t in helpers:
            t.start()
        try:
            while (item := take()) is not None:
                self._pwrite(*item)
        finally:
            for t in helpers:
                t.join()
        if failed:
            raise failed[0]

    def close(self) -> None:
        self._torch_view = None
        self.array = np.empty(0, dtype=np.uint8)
        with contextlib.suppress(BufferError, ValueError):
            self._mmap.close()
        with contextlib.suppress(OSError):
            os.close(self._fd)
        if self.memfd is not None:
            self.memfd = None
        else:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def _check_room(directory: Path, size: int) -> None:
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    if free < size:
        raise CheckpointError(
            f"the checkpoint buffer needs {size} bytes, {directory} has {free} free;"
            f" point {SHM_DIR_ENV} at a larger RAM-backed directory",
            where=str(directory),
        )


MADV_POPULATE_WRITE = 23  # Linux 5.14


def _populate_write(array: np.ndarray, start: int, length: int) -> bool:
    """madvise(MADV_POPULATE_WRITE) over ``array[start:start+length]`` through ctypes (which
    releases the GIL for the call); False where the kernel or libc cannot."""
    import ctypes
    import ctypes.util

    if length <= 0:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        addr = ctypes.c_void_p(array.ctypes.data + start)
        return int(libc.madvise(addr, ctypes.c_size_t(length), MADV_POPULATE_WRITE)) == 0
    except (OSError, AttributeError):
        return False


def _torch_uint8() -> Any:
    import torch

    return torch.uint8
