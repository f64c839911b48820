"""The reaper: find runs past their ``burst:expires-at`` with nothing alive driving them, and
destroy them, from their Terraform state where it exists, else by their tags, in dependency
order. Dry run unless asked to act; everything found and done is returned as a document.

It fails closed: a resource without a readable expiry is reported, never deleted, and a run
whose runner or steps are still alive is left alone.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burst.infra.leakscan import EXPIRES_TAG, Inventory, delete_in_order
from burst.infra.teardown import destroy_run
from burst.infra.terraform import count_state_resources
from burst.infra.workspace import VARS_FILE, state_file

log = logging.getLogger(__name__)


def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


@dataclass
class StateRun:
    run_id: str
    workdir: Path
    resources: int
    expires_at: dt.datetime | None


def runs_in_state_store(root: Path) -> list[StateRun]:
    """Runs under the local state store (runs/<id>/terraform) that still hold resources."""
    out = []
    if not root.is_dir():
        return out
    for run_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        workdir = run_dir / "terraform"
        count = count_state_resources(state_file(workdir))
        if count == 0:
            continue
        expires = None
        vars_file = workdir / VARS_FILE
        if vars_file.exists():
            try:
                tags = json.loads(vars_file.read_text()).get("tags", {})
                expires = parse_time(tags.get(EXPIRES_TAG))
            except (json.JSONDecodeError, AttributeError):
                expires = None
        out.append(StateRun(run_dir.name, workdir, count, expires))
    return out


def live_run_ids() -> set[str]:
    """Run ids named by a live process on this machine (a runner or a step: `--run-id ID`)."""
    live: set[str] = set()
    me = os.getpid()
    proc = Path("/proc")
    if not proc.is_dir():
        return live
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for i, arg in enumerate(argv[:-1]):
            if arg == b"--run-id":
                live.add(argv[i + 1].decode(errors="replace"))
            elif arg.startswith(b"--run-id="):
                live.add(arg.split(b"=", 1)[1].decode(errors="replace"))
    return live


def reap(
    now: dt.datetime, root: Path, inventories: list[Inventory], *, act: bool
) -> dict[str, Any]:
    live = live_run_ids()
    doc: dict[str, Any] = {
        "now": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "dry_run": not act,
        "runs": [],
        "actions": [],
        "errors": 0,
    }

    def verdict(expires: dt.datetime | None, run_id: str) -> str:
        if run_id in live:
            return "live"
        if expires is None:
            return "unknown-expiry"
        return "expired" if expires <= now else "active"

    for run in runs_in_state_store(root):
        v = verdict(run.expires_at, run.run_id)
        doc["runs"].append(
            {
                "run_id": run.run_id,
                "source": "state",
                "resources": run.resources,
                "expires_at": run.expires_at.isoformat() if run.expires_at else None,
                "verdict": v,
                "state": str(state_file(run.workdir)),
            }
        )
        if v == "expired" and act:
            result = destroy_run(run.workdir)
            doc["actions"].append({"run_id": run.run_id, "action": "destroy-from-state", **result})
            if result["resources_remaining"]:
                doc["errors"] += 1

    for inv in inventories:
        by_run: dict[str, list[Any]] = defaultdict(list)
        for res in inv.tagged(None):
            by_run[res.run_id or "?"].append(res)
        for run_id, resources in sorted(by_run.items()):
            expiries = [parse_time(r.tags.get(EXPIRES_TAG)) for r in resources]
            expires = (
                None
                if any(e is None for e in expiries)
                else max(e for e in expiries if e is not None)
            )
            v = verdict(expires, run_id)
            doc["runs"].append(
                {
                    "run_id": run_id,
                    "source": "tags",
                    "region": inv.region,
                    "resources": [r.describe() for r in resources],
                    "expires_at": expires.isoformat() if expires else None,
                    "verdict": v,
                }
            )
            if v == "expired" and act:
                deleted = delete_in_order(inv, resources)
                doc["actions"].append(
                    {
                        "run_id": run_id,
                        "action": "delete-by-tags",
                        "region": inv.region,
                        "resources": deleted,
                    }
                )
                doc["errors"] += sum(1 for d in deleted if d["result"] != "deleted")
    return doc
