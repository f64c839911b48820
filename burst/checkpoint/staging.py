"""The host buffer a save copies tensors into, shared with the background worker.

The buffer is anonymous shared memory (``memfd_create``), which the worker maps through
``/proc/<pid>/fd/<n>``: it is not limited by the size of /dev/shm (64 MiB in a default
container), counts against the memory limit like any RAM, and is freed by the kernel when
the last process holding it exits, whatever kills them. Without memfd (or with
``BURST_CHECKPOINT_SHM_DIR`` set) it is a file in that directory, /dev/shm by default,
checked for free space first. Either way it is kept and reused between checkpoints: a fresh
allocation costs page faults on every save (~1.7 GB/s measured here), a reused one copies at
memory speed. It grows only when the state grows.

A memfd buffer is several memfds of one size, mapped side by side into one contiguous range
(``attached.map_side_by_side``), here and in the worker: the kernel lets one thread at a time
write to a shmem file (its inode lock), and a first save's pwrite of fresh pages is bound by
the allocation of each page, so two threads write two files at once (``write_fresh``).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import secrets
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from burst.checkpoint.attached import map_side_by_side
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
#: Most memfds one buffer is made of (``fresh_segments``).
SEGMENTS_MAX = 16


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


def fresh_segments() -> int:
    """Memfds a new buffer is made of: two for each thread that writes fresh bytes (a thread
    that finishes its file finds another one free), one where a single thread writes."""
    threads = fresh_threads()
    return 1 if threads <= 1 else min(SEGMENTS_MAX, 2 * threads)


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
    ``grow`` keeps the same descriptors (and ``token``): a worker that inherited them needs
    no restart, it maps the new size.

    ``segments``: how many memfds (``fresh_segments()`` by default; a file buffer is one
    file), each ``size / segments`` bytes rounded up to whole pages.
    """

    def __init__(
        self,
        size: int,
        directory: Path | None = None,
        *,
        prefault: bool = True,
        segments: int | None = None,
    ) -> None:
        size = max(size, mmap.PAGESIZE)
        self.memfds: tuple[int, ...] = ()  # the worker inherits them (pass_fds)
        self.token = secrets.token_hex(8)  # fd numbers are reused: this names the buffer
        use_memfd = (
            directory is None
            and shm_override() is None
            and hasattr(os, "memfd_create")
            and Path(f"/proc/{os.getpid()}/fd").is_dir()
        )
        self._directory: Path | None = None
        if use_memfd:
            count = max(1, fresh_segments() if segments is None else segments)
            fds: list[int] = []
            try:
                for _ in range(count):
                    fds.append(os.memfd_create("burst-ckpt", os.MFD_CLOEXEC))
            except BaseException:
                for fd in fds:
                    os.close(fd)
                raise
            self.memfds = tuple(fds)
            self.path = Path(f"/proc/{os.getpid()}/fd/{fds[0]}")
        else:
            directory = directory or shm_dir()
            self._directory = directory
            _check_room(directory, size)
            self.path = directory / f"burst-ckpt-{os.getpid()}-{secrets.token_hex(4)}"
            fds = [os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)]
        self._fds = fds  # kept open: pwrite and grow
        self.segment, self.size = _segment_size(size, len(fds))
        self.faulted = 0  # bytes from the start that this process's mapping has touched
        self._torch_view: Any = None
        try:
            for fd in fds:
                os.ftruncate(fd, self.segment)
            self._map()
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        if prefault:
            # fault every page in now, not during the first save
            self.populate(fresh_threads())
            if self.faulted < self.size:  # no MADV_POPULATE_WRITE: touch them (all zeros)
                self.array[:] = 0
                self.faulted = self.size

    def _map(self) -> None:
        if len(self._fds) == 1:
            self._mmap = mmap.mmap(self._fds[0], self.size)
        else:
            self._mmap = map_side_by_side(self._fds, self.segment, writable=True)
        self.array = np.frombuffer(self._mmap, dtype=np.uint8)
        self._torch_view = None

    def grow(self, size: int) -> None:
        """At least ``size`` bytes, the same descriptors; not faulted. One file: the bytes
        stay where they were and the new part is zeros. Several: each file grows at its end,
        so the bytes move; the caller writes every byte again (the manager does: a grown
        buffer has no layout, its gaps are zeroed)."""
        if size <= self.size:
            return
        if self._directory is not None:
            _check_room(self._directory, size - self.size)
        self._torch_view = None
        self.array = np.empty(0, dtype=np.uint8)
        with contextlib.suppress(BufferError, ValueError):
            self._mmap.close()
        self.segment, self.size = _segment_size(size, len(self._fds))
        for fd in self._fds:
            os.ftruncate(fd, self.segment)
        if len(self._fds) > 1:
            self.faulted = 0  # a new mapping of moved bytes
        self._map()

    def populate(self, threads: int = 1) -> None:
        """Map (fault in) the pages beyond ``faulted`` without changing a byte (what
        ``copy_in`` wrote with pwrite, or fresh zeros), so the next save copies at memory
        speed; releases the GIL (a background thread).

        ``threads``: that many at once, each taking a file of its own (a memfd buffer) or a
        range of the one file. A memfd's missing pages are allocated first (``fallocate``,
        one call, no copy; pages that exist are kept), then mapped (``MADV_POPULATE_WRITE``):
        measured here, 541 MiB of fresh pages took 0.19-0.20 s that way on two threads
        against 0.55-0.57 s for writing zeros through the mapping on one."""
        if self.faulted >= self.size:
            return
        start = self.faulted // mmap.PAGESIZE * mmap.PAGESIZE
        spans = self._populate_spans(start, max(1, threads))
        failed: list[bool] = []

        def fill(index: int) -> None:
            while True:
                try:
                    seg, lo, hi = spans[index]
                except IndexError:
                    return
                index += threads
                if seg is not None:
                    at = lo - seg * self.segment
                    with contextlib.suppress(OSError):  # only a head start for the next call
                        os.posix_fallocate(self._fds[seg], at, hi - lo)
                if not _populate_write(self.array, lo, hi - lo):
                    failed.append(True)
                    return

        helpers = [
            threading.Thread(target=fill, args=(i,), daemon=True, name=f"ckpt-populate-{i}")
            for i in range(1, min(threads, len(spans)))
        ]
        for t in helpers:
            t.start()
        fill(0)
        for t in helpers:
            t.join()
        if not failed:
            self.faulted = self.size

    def _populate_spans(self, start: int, threads: int) -> list[tuple[int | None, int, int]]:
        """``(file, lo, hi)`` byte ranges of the buffer from ``start`` to its end: one per
        memfd (their index, to allocate them), or ``threads`` page-aligned ranges of the one
        file (its index where it is a memfd; None for a file in a directory, which may not be
        RAM: no fallocate there)."""
        if self.memfds and len(self._fds) > 1:
            return [
                (i, max(start, i * self.segment), (i + 1) * self.segment)
                for i in range(len(self._fds))
                if (i + 1) * self.segment > start
            ]
        pages = -(-(self.size - start) // mmap.PAGESIZE)
        step = -(-pages // threads) * mmap.PAGESIZE
        seg = 0 if self.memfds else None
        return [(seg, lo, min(self.size, lo + step)) for lo in range(start, self.size, step)]

    @property
    def worker_paths(self) -> list[str]:
        """How the worker opens the buffer: its inherited copies of the memfds, or the file.
        The inherited descriptors stay valid even if the trainer dies before the worker
        maps the buffer."""
        if self.memfds:
            return [f"/proc/self/fd/{fd}" for fd in self.memfds]
        return [str(self.path)]

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
        """Write ``data`` at ``offset`` of the buffer, into the file(s) that hold it."""
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            pos = offset + done
            seg, at = divmod(pos, self.segment)
            n = min(len(view) - done, self.segment - at, 1 << 30)
            done += os.pwrite(self._fds[seg], view[done : done + n], at)

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
        a grown buffer): the first touch of a page (its allocation, and through the mapping
        a fault per 4 KiB page) costs several times the copy itself, and it is paid while
        the caller is blocked.

        With more than one core to use (``fresh_threads``) and enough bytes, the caller and
        helper threads take pieces (``piece`` bytes, never across two files) from per-file
        queues. A thread pwrites a piece of a file that no other thread is writing (pwrite
        allocates and fills each page, no fault: the cheapest first touch, but the kernel
        lets one writer at a time into a shmem file, its inode lock). Where every file with
        pieces left is taken, it takes a piece from the far end of the longest queue and
        writes it through the mapping, after populating its pages (``MADV_POPULATE_WRITE``:
        one call, not a fault per page; faults on disjoint pages run in parallel). Each
        thread releases the GIL; the first failure stops every thread and is raised here."""
        queues: dict[int, deque[tuple[np.ndarray, int]]] = {}
        total = 0
        for src, off in parts:
            lo = 0
            while lo < src.nbytes:
                seg, at = divmod(off + lo, self.segment)
                n = min(piece, src.nbytes - lo, self.segment - at)
                queues.setdefault(seg, deque()).append((src[lo : lo + n], off + lo))
                lo += n
            total += src.nbytes
        count = sum(len(q) for q in queues.values())
        n = fresh_threads() if threads is None else threads
        n = min(n, count, max(1, total // max(1, min_per_thread)))
        if n <= 1:
            for src, off in parts:
                self._pwrite(src, off)
            return
        lock = threading.Lock()
        busy: set[int] = set()  # files a thread is writing with pwrite now
        failed: list[BaseException] = []

        def take() -> tuple[np.ndarray, int, int | None] | None:
            """The next piece and its file's index if this thread may pwrite it, or None
            for the file: write it through the mapping."""
            with lock:
                if failed:
                    return None
                for seg, q in queues.items():
                    if q and seg not in busy:
                        busy.add(seg)
                        src, off = q.popleft()
                        return src, off, seg
                longest = max(queues.values(), key=len)
                if not longest:
                    return None
                src, off = longest.pop()
                return src, off, None

        def work() -> None:
            try:
                while (item := take()) is not None:
                    src, off, seg = item
                    if seg is None:
                        start = off // mmap.PAGESIZE * mmap.PAGESIZE
                        _populate_write(self.array, start, off + src.nbytes - start)
                        np.copyto(self.array[off : off + src.nbytes], src)
                        continue
                    try:
                        self._pwrite(src, off)
                    finally:
                        with lock:
                            busy.discard(seg)
            except BaseException as exc:  # raised on the caller's thread
                with lock:
                    failed.append(exc)

        helpers = [
            threading.Thread(target=work, daemon=True, name=f"ckpt-fresh-{i}") for i in range(n - 1)
        ]
        for t in helpers:
            t.start()
        try:
            work()
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
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []
        if self.memfds:
            self.memfds = ()
        else:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def _segment_size(size: int, files: int) -> tuple[int, int]:
    """(bytes of each file, bytes of the buffer) for at least ``size`` bytes in ``files``
    files: one file holds ``size`` exactly; several, whole pages each (they are mapped
    side by side)."""
    if files == 1:
        return size, size
    pages = -(-size // (files * mmap.PAGESIZE))
    return pages * mmap.PAGESIZE, pages * mmap.PAGESIZE * files


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
