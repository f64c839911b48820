"""Stale state locks: a killed ``terraform apply`` can leave its lock in a remote backend (the
S3 backend's ``.tflock`` object, an HTTP backend's lock). Teardown must not wait on it forever,
nor break a lock that a live process still holds.

The holder of a lock on a run's state is a Terraform process working in the run's directory
(``-chdir=<workdir>``), on this machine or in the same workflow; when no such process is alive,
the lock is stale and is released with ``terraform force-unlock``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from burst.infra.procs import other_processes

log = logging.getLogger(__name__)

LOCK_ERROR = re.compile(r"Error acquiring the state lock", re.IGNORECASE)
LOCK_ID = re.compile(r"\bID:\s+([0-9A-Za-z-]+)")
LOCK_WHO = re.compile(r"\bWho:\s+(\S+)")


@dataclass(frozen=True)
class LockInfo:
    id: str
    who: str | None


def parse_lock_error(text: str) -> LockInfo | None:
    """The lock named in Terraform's 'Error acquiring the state lock' message, if it is one."""
    if not LOCK_ERROR.search(text):
        return None
    m = LOCK_ID.search(text)
    if m is None:
        return None
    who = LOCK_WHO.search(text)
    return LockInfo(m.group(1), who.group(1) if who else None)


def holders(workdir: Path) -> list[int]:
    """PIDs of live processes running Terraform in ``workdir`` (other than this one)."""
    needle = f"-chdir={Path(workdir).resolve()}".encode()
    return [pid for pid, argv in other_processes() if needle in argv]
