"""The live processes of this machine, as argument vectors (from /proc; empty elsewhere)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def other_processes() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, argv) of every live process but this one."""
    proc = Path("/proc")
    if not proc.is_dir():
        return
    me = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        yield int(entry.name), argv
