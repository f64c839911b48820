"""The reaper: find runs past their ``burst:expires-at`` with nothing alive driving them, and
destroy them, from their Terraform state where it exists, else by their tags, in dependency
order. Dry run unless asked to act; everything found and done is returned as a document.

It fails closed: a resource without a readable expiry is reported, never deleted, and a run
whose runner or steps are still alive is left alone. A run with heartbeats (``burst.lease``:
renewed by its live driver and trainer) is judged by them instead of its expiry: one renewed
is live; all lapsed ("lapsed") means nobody drives the run, and it is destroyed at once.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burst.errors import InfraError
from burst.infra import runrecord
from burst.infra.leakscan import EXPIRES_TAG, Inventory, delete_in_order
from burst.infra.procs import other_processes
from burst.infra.teardown import destroy_run
from burst.infra.workspace import VARS_FILE, load_workspace, state_file
from burst.lease import alive, heartbeats, local_heartbeat_store
from burst.runs import count_state_resources

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
    workdir: Path | None  # the run's local Terraform directory, when this machine has it
    resources: int
    expires_at: dt.datetime | None
    location: str = ""


def runs_in_state_store(root: Path) -> list[StateRun]:
    """Runs under the local state store (runs/<id>/terraform) that still hold resources."""
    out: list[StateRun] = []
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
        out.append(StateRun(run_dir.name, workdir, count, expires, str(state_file(workdir))))
    return out


STATE_PREFIX = "burst/runs/"
STATE_NAME = "terraform.tfstate"


def _state_summary(doc: dict[str, Any]) -> tuple[int, dt.datetime | None]:
    """Resource instances in a Terraform state document, and the run's expiry from the
    ``burst:expires-at`` tag of any of them (the latest, when they disagree)."""
    count, expiries = 0, []
    for res in doc.get("resources") or []:
        for inst in res.get("instances") or []:
            count += 1
            attrs = inst.get("attributes") or {}
            for tags in (
                attrs.get("tags_all"),
                attrs.get("tags"),
                (attrs.get("input") or {}).get("tags")
                if isinstance(attrs.get("input"), dict)
                else None,
            ):
                if isinstance(tags, dict) and (t := parse_time(tags.get(EXPIRES_TAG))):
                    expiries.append(t)
    return count, max(expiries) if expiries else None


def runs_in_s3_state_store(bucket: str, region: str, client: Any = None) -> list[StateRun]:
    """Runs whose state lives in the S3 backend (key ``burst/runs/<run-id>/terraform.tfstate``)
    and still holds resources."""
    from burst.infra.remote_errors import aws_client

    s3: Any = client or aws_client("s3", region)  # bounded timeouts and retries
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=STATE_PREFIX):
        for obj in page.get("Contents") or []:
            key = obj["Key"]
            run_id, _, name = key.removeprefix(STATE_PREFIX).partition("/")
            if name != STATE_NAME or not run_id:
                continue
            try:
                doc = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read() or b"{}")
            except json.JSONDecodeError:
                log.error("s3://%s/%s is not a Terraform state: reported, not touched", bucket, key)
                doc = {"resources": [{"instances": [{}]}]}
            count, expires = _state_summary(doc)
            if count:
                out.append(StateRun(run_id, None, count, expires, f"s3://{bucket}/{key}"))
    return out


def run_heartbeats(root: Path, run_id: str, location: str = "") -> dict[str, dict[str, Any]]:
    """The run's heartbeats (driver, trainer) next to its state: in the S3 state bucket
    (``burst/runs/<run-id>/heartbeat/``) for a run whose state is there, else in the local
    state store (``runs/<run-id>/heartbeat/``)."""
    if location.startswith("s3://"):
        from burst.storage.s3 import S3Store

        bucket = location.removeprefix("s3://").split("/", 1)[0]
        from burst.settings import current

        region = current().tf_state_region or None
        return heartbeats(S3Store(bucket, f"{STATE_PREFIX}{run_id}/heartbeat", region=region))
    if not (root / run_id / "heartbeat").is_dir():
        return {}
    return heartbeats(local_heartbeat_store(root / run_id))


def live_run_ids() -> set[str]:
    """Run ids named by a live process on this machine (a runner or a step: `--run-id ID`)."""
    live: set[str] = set()
    for _pid, argv in other_processes():
        for i, arg in enumerate(argv[:-1]):
            if arg == b"--run-id":
                live.add(argv[i + 1].decode(errors="replace"))
            elif arg.startswith(b"--run-id="):
                live.add(arg.split(b"=", 1)[1].decode(errors="replace"))
    return live


def reap(
    now: dt.datetime,
    root: Path,
    inventories: list[Inventory],
    *,
    act: bool,
    s3_states: list[StateRun] | None = None,
    live_workflows: set[str] | None = None,
) -> dict[str, Any]:
    """``live_workflows``: the names of the workflows Argo reports unfinished, or None when
    Argo could not be asked (no server configured, or unreachable). A run id is a workflow's
    name or ``<workflow>-<region>`` (burst-regional's stacks). A run whose heartbeats live in
    the S3 state store is driven by a workflow: its lapsed heartbeats are acted on only when
    Argo says no workflow drives it (a train pod being retried after exit 75, or waiting for
    its GPUs, renews nothing for minutes); without that answer it waits for its expiry."""
    workflows = set(live_workflows or ())
    live = live_run_ids() | workflows
    doc: dict[str, Any] = {
        "now": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "dry_run": not act,
        "runs": [],
        "actions": [],
        "errors": 0,
    }

    def verdict(expires: dt.datetime | None, run_id: str, location: str = "") -> str:
        if run_id in live or any(run_id.startswith(f"{w}-") for w in workflows):
            return "live"
        beats = run_heartbeats(root, run_id, location)
        if beats and any(alive(b, now.timestamp()) for b in beats.values()):
            return "live"  # renewed by a live driver or trainer
        if beats and (live_workflows is not None or not location.startswith("s3://")):
            return "lapsed"  # all lapsed, and the driver was asked: nobody drives the run
        if expires is None:
            return "unknown-expiry"
        return "expired" if expires <= now else "active"

    for run in [*runs_in_state_store(root), *(s3_states or [])]:
        v = verdict(run.expires_at, run.run_id, run.location)
        doc["runs"].append(
            {
                "run_id": run.run_id,
                "source": "state",
                "resources": run.resources,
                "expires_at": run.expires_at.isoformat() if run.expires_at else None,
                "verdict": v,
                "state": run.location,
            }
        )
        if v not in ("expired", "lapsed") or not act:
            continue
        workdir = run.workdir or root / run.run_id / "terraform"
        if not runrecord.fetch(workdir) and load_workspace(workdir) is None:
            # the state exists but this machine lacks the run's stack and variables: its
            # tagged resources are removed below, by the tag path (configure --region)
            doc["actions"].append(
                {"run_id": run.run_id, "action": "left-to-tag-path", "state": run.location}
            )
            continue
        result = destroy_run(workdir)
        doc["actions"].append(
            {"run_id": run.run_id, "action": "destroy-from-state", **result.to_json()}
        )
        if result.resources_remaining:
            doc["errors"] += 1

    doc["scan_errors"] = []
    for inv in inventories:
        by_run: dict[str, list[Any]] = defaultdict(list)
        try:
            found = inv.tagged(None)
        except InfraError as exc:  # one region unreachable: the others are still reaped
            log.info("scan failed: %s", exc.one_line())  # the CLI prints it
            doc["scan_errors"].append(exc.one_line())
            doc["errors"] += 1
            continue
        for res in found:
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
            if v in ("expired", "lapsed") and act:
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
