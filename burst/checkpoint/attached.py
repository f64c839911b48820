"""The checkpoint worker's read-only mapping of the trainer's host buffer (staging.HostBuffer).

A module of its own so that the worker, started for every manager, imports neither numpy
nor torch: it reads the buffer through a memoryview.
"""

from __future__ import annotations

import contextlib
import mmap
import os


class AttachedBuffer:
    """The worker's read-only mapping of a HostBuffer, by path."""

    def __init__(self, path: str, size: int) -> None:
        self.path = path
        self.size = size
        fd = os.open(path, os.O_RDONLY)
        try:
            self._mmap = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self.view = memoryview(self._mmap)

    def close(self) -> None:
        self.view.release()
        with contextlib.suppress(BufferError):
            self._mmap.close()
