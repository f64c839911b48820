"""The contract between burst and a user's own training program (``training.command``).

burst starts the program with these environment variables; the framework adapters
(``burst.adapters``) and a plain script read them. Names follow torchrun's conventions for the
distributed ones and SkyPilot's for the cluster ones, so a script written for either runs as is.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

# burst's own
RUN_ID = "BURST_RUN_ID"
CHECKPOINT_DIR = "BURST_CHECKPOINT_DIR"  # node-local directory the program saves into
RESUME_FROM = "BURST_RESUME_FROM"  # set only on a resume: the restored checkpoint's path
NOTICE_FILE = "BURST_NOTICE_FILE"  # appears (JSON, see Notice) when a preemption notice arrives
NOTICE_SIGNAL = "BURST_NOTICE_SIGNAL"  # the signal's name burst sends on a notice (SIGUSR1)
STEP_DEADLINE = "BURST_STEP_DEADLINE"  # unix seconds by which the train step must end

# files an adapter writes for burst beside BURST_NOTICE_FILE (burst's own directory, not the
# program's checkpoint directory: what the framework wrote there stays as it wrote it)
RESUMED_FILE = "resumed.json"  # {"step", "framework"}: the step training resumed at
STORED_FILE = "stored.json"  # {"step", "store"}: committed straight into a store (DCP adapter)

# torchrun's
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
NODE_RANK = "NODE_RANK"
NNODES = "NNODES"
NPROC_PER_NODE = "NPROC_PER_NODE"

# SkyPilot's
SKYPILOT_NODE_RANK = "SKYPILOT_NODE_RANK"
SKYPILOT_NUM_NODES = "SKYPILOT_NUM_NODES"
SKYPILOT_NUM_GPUS_PER_NODE = "SKYPILOT_NUM_GPUS_PER_NODE"
SKYPILOT_TASK_ID = "SKYPILOT_TASK_ID"


@dataclass(frozen=True)
class Notice:
    """A preemption notice as the program sees it."""

    deadline_unix: float  # the program should have saved and exited before this
    reason: str


def notice_from_env(environ: dict[str, str] | None = None) -> Notice | None:
    """The notice burst has written for this program, or None when there is none (yet)."""
    from burst.settings import Settings

    path = Settings.from_env(environ).program_notice_file
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text())
        return Notice(deadline_unix=float(doc["deadline_unix"]), reason=str(doc["reason"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        # A notice file that exists but cannot be read is still a notice: save now.
        return Notice(deadline_unix=0.0, reason="unreadable notice file")


def write_notice(path: Path, notice: Notice) -> None:
    """Write the notice file atomically (a program polling it never reads half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"deadline_unix": notice.deadline_unix, "reason": notice.reason}))
    os.replace(tmp, path)


def report_path(name: str, environ: dict[str, str] | None = None) -> Path | None:
    """Where an adapter writes ``name`` for burst (beside the notice file); None outside
    burst."""
    from burst.settings import Settings

    notice = Settings.from_env(environ).program_notice_file
    return None if notice is None else notice.parent / name


def write_report(path: Path, doc: dict[str, object]) -> None:
    """Write one of the adapters' files for burst (``RESUMED_FILE``, ``STORED_FILE``)
    atomically."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def read_report(path: Path) -> dict[str, object] | None:
    """One of the adapters' files, None when there is none or it is not a JSON object."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
