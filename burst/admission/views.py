"""What ``burst budget`` and ``burst queue`` show: each team's windows and its runs' states,
read from the ledger (and, for "running", the run's heartbeats where this machine sees them)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from burst.admission.ledger import Entry, Ledger

RECENT_S = 86400.0  # refused and settled runs of the last day are listed


def budget_view(
    ledger: Ledger, teams: list[str] | None = None, now: float | None = None
) -> dict[str, Any]:
    """Each team's ledger: its windows (limit, used, remaining, active override) and its runs'
    planned (reserved) and actual (settled) totals."""
    now = time.time() if now is None else now
    out: dict[str, Any] = {"ledger": ledger.url, "at": now, "teams": {}}
    for team in teams or ledger.team_names():
        entries = ledger.entries(team)
        open_ = [e for e in entries if e.state == "admitted"]
        settled = [e for e in entries if e.state == "settled"]
        out["teams"][team] = {
            "budgeted": ledger.teams().budget(team) is not None,
            "windows": [s.as_dict() for s in ledger.standing(team, now, entries)],
            "open_reservations": len(open_),
            "reserved_usd": round(sum(e.reserved_usd for e in open_), 6),
            "reserved_gpu_hours": round(sum(e.reserved_gpu_hours for e in open_), 6),
            "settled_runs": len(settled),
            "settled_planned_usd": round(sum(e.reserved_usd for e in settled), 6),
            "settled_actual_usd": round(sum(float(e.actual_usd or 0) for e in settled), 6),
            "settled_actual_gpu_hours": round(
                sum(float(e.actual_gpu_hours or 0) for e in settled), 6
            ),
            "refused": sum(1 for e in entries if e.state == "refused"),
            "queued": sum(1 for e in entries if e.state == "queued"),
        }
    return out


def _running(entry: Entry, runs_root: Path | None) -> bool:
    if runs_root is None:
        return False
    from burst.lease import alive, heartbeats, local_heartbeat_store

    run_dir = runs_root / entry.run_id
    if not run_dir.is_dir():
        return False
    return any(alive(doc) for doc in heartbeats(local_heartbeat_store(run_dir)).values())


def queue_view(
    ledger: Ledger,
    runs_root: Path | None,
    teams: list[str] | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """Per team: queued (waiting for admission: it reserves and rents nothing), running (an
    open reservation whose run has a live heartbeat here), admitted
    (an open reservation, not seen running: before train, or between a loss and its
    requeue), and the last day's refused and settled runs, oldest first."""
    now = time.time() if now is None else now
    out: dict[str, Any] = {"ledger": ledger.url, "at": now, "teams": {}}
    for team in teams or ledger.team_names():
        rows: dict[str, list[dict[str, Any]]] = {
            "queued": [],
            "running": [],
            "admitted": [],
            "refused": [],
            "settled": [],
        }
        for e in ledger.entries(team):
            row = {
                "run_id": e.run_id,
                "priority": e.priority,
                "at": e.at,
                "reserved_usd": e.reserved_usd,
                "reserved_gpu_hours": e.reserved_gpu_hours,
                "requeues": e.requeues,
            }
            if e.state == "queued":
                rows["queued"].append(row)
            elif e.state == "admitted":
                rows["running" if _running(e, runs_root) else "admitted"].append(row)
            elif e.state == "refused" and now - e.at <= RECENT_S:
                rows["refused"].append({**row, "refusal": e.refusal})
            elif e.state == "settled" and now - float(e.settled_at or e.at) <= RECENT_S:
                rows["settled"].append(
                    {**row, "actual_usd": e.actual_usd, "actual_gpu_hours": e.actual_gpu_hours}
                )
        out["teams"][team] = rows
    return out
