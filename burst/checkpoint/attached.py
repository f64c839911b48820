"""The checkpoint worker's read-only mapping of the trainer's host buffer (staging.HostBuffer).

A module of its own so that the worker, started for every manager, imports neither numpy
nor torch: it reads the buffer through a memoryview.

A buffer may be several files (memfds) of one size each, mapped side by side into one
contiguous range (``map_side_by_side``) in the trainer and here alike: two threads can then
write fresh pages at the same time, where one shmem file takes one writer at a time.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import os
from collections.abc import Sequence
from functools import cache
from typing import Any

_PROT_READ, _PROT_WRITE = 0x1, 0x2
_MAP_SHARED, _MAP_FIXED, _MAP_NORESERVE = 0x01, 0x10, 0x4000


@cache
def _libc() -> Any:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    return libc


def map_side_by_side(fds: Sequence[int], segment: int, *, writable: bool) -> mmap.mmap:
    """One contiguous shared mapping of ``segment`` bytes of each file in ``fds``, in order
    (``segment`` a multiple of the page size, each file at least that long).

    The range is reserved as an anonymous private mapping (no memory until touched), whose
    pages are then replaced, file by file, with ``MAP_FIXED``; the returned mmap object owns
    the whole range: closing it unmaps every file, and it refuses to close while a view of it
    (numpy, torch, memoryview) is alive, as any mmap does."""
    if segment <= 0 or segment % mmap.PAGESIZE:
        raise ValueError(f"segment {segment} is not a positive multiple of the page size")
    reserve = mmap.mmap(-1, segment * len(fds), flags=mmap.MAP_PRIVATE | _MAP_NORESERVE)
    try:
        anchor = ctypes.c_char.from_buffer(reserve)
        base = ctypes.addressof(anchor)
        del anchor  # the export ends here: the mmap object can be closed later
        prot = _PROT_READ | (_PROT_WRITE if writable else 0)
        libc = _libc()
        for i, fd in enumerate(fds):
            want = base + i * segment
            got = libc.mmap(want, segment, prot, _MAP_SHARED | _MAP_FIXED, fd, 0)
            if got != want:
                err = ctypes.get_errno()
                raise OSError(err, f"mmap of buffer segment {i}: {os.strerror(err)}")
    except BaseException:
        reserve.close()
        raise
    return reserve


class AttachedBuffer:
    """The worker's read-only mapping of a HostBuffer: its files (``paths``), each
    ``size / len(paths)`` bytes, side by side."""

    def __init__(self, paths: Sequence[str], size: int) -> None:
        self.paths = list(paths)
        self.path = self.paths[0]
        self.size = size
        fds: list[int] = []
        try:
            for p in self.paths:
                fds.append(os.open(p, os.O_RDONLY))
            if len(fds) == 1:
                self._mmap = mmap.mmap(fds[0], size, prot=mmap.PROT_READ)
            else:
                self._mmap = map_side_by_side(fds, size // len(fds), writable=False)
        finally:
            for fd in fds:
                os.close(fd)
        self._whole = memoryview(self._mmap)
        self.view = self._whole.toreadonly()

    def close(self) -> None:
        self.view.release()
        self._whole.release()
        with contextlib.suppress(BufferError):
            self._mmap.close()
