"""Tear a run down from its run id alone: destroy its state (retried with backoff), then prove
nothing is left: the state must be empty and, for a cloud target, a scan of the run's region
must find nothing tagged with the run id.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from burst.documents.teardown import Destroyed
from burst.errors import BurstError, InfraError
from burst.infra import cloudscan, runrecord
from burst.infra.statelock import holders, parse_lock_error
from burst.infra.terraform import Terraform
from burst.infra.workspace import VARS_FILE, load_workspace, state_file
from burst.runs import count_state_resources

log = logging.getLogger(__name__)

BeforeAttempt = Callable[[int], None]


def destroy_run(
    workdir: Path,
    *,
    retries: int = 4,
    backoff_s: float = 0.5,
    before_attempt: BeforeAttempt | None = None,
) -> Destroyed:
    """``terraform destroy`` the run's state, whichever stack the run used (the local root,
    or the aws stack on its S3 backend, reopened from ``workspace.json``), retried with
    exponential backoff; then count what remains in the state."""
    # on a cluster this pod's runs root is its own: the record provision kept beside the
    # state is fetched first (burst/infra/runrecord.py)
    runrecord.fetch(workdir)
    ws = load_workspace(workdir)
    if ws is None:
        log.info("nothing was provisioned for this run (no Terraform working directory)")
        return Destroyed(
            destroyed=True,
            attempts=0,
            errors=[],
            stale_locks_released=[],
            resources_remaining=0,
            terraform_state=str(state_file(workdir)),
        )
    tf = ws.terraform()
    region = run_region(workdir)[1]
    errors: list[str] = []
    unlocked: list[str] = []
    attempts = 0
    succeeded = False
    for attempt in range(1, retries + 1):
        attempts = attempt
        try:
            if before_attempt is not None:
                before_attempt(attempt)
            ws.init(tf)
            tf.destroy([f for f in ws.var_files(region) if f.exists()] or None)
            succeeded = True
            break
        except BurstError as exc:
            errors.append(f"attempt {attempt}: {exc.one_line()}")
            log.warning("destroy attempt %d/%d failed: %s", attempt, retries, exc.one_line())
            if _release_if_stale(tf, workdir, exc.message, unlocked):
                continue  # the lock is gone: try again at once
            if attempt < retries:
                time.sleep(backoff_s * 2 ** (attempt - 1))
    remaining = _remaining(tf, state_file(workdir) if ws.kind == "local" else None)
    return Destroyed(
        destroyed=succeeded and remaining == 0,
        attempts=attempts,
        errors=errors,
        stale_locks_released=unlocked,
        resources_remaining=remaining,
        terraform_state=ws.state,
    )


def _remaining(tf: Terraform, state: Path | None) -> int:
    """Resources left in the run's state: the local file when there is one, else the backend
    (``terraform state list``). A state that cannot be read counts as one resource left: an
    unknown is never reported as clean."""
    if state is not None and state.exists():
        return count_state_resources(state)
    try:
        return len(tf.state_resources())
    except BurstError as exc:
        log.error("cannot read the run's state to count what is left: %s", exc.one_line())
        return 1


def _release_if_stale(tf: Terraform, workdir: Path, message: str, unlocked: list[str]) -> bool:
    """Release the state lock named in ``message`` when no live process holds it."""
    lock = parse_lock_error(message)
    if lock is None or lock.id in unlocked:
        return False
    alive = holders(workdir)
    if alive:
        log.warning("state lock %s is held by live process(es) %s: not breaking it", lock.id, alive)
        return False
    log.warning("releasing stale state lock %s (held by %s, no live holder)", lock.id, lock.who)
    tf.run(["force-unlock", "-force", "-no-color", lock.id], json_events=False)
    unlocked.append(lock.id)
    return True


def run_region(workdir: Path) -> tuple[str | None, str | None]:
    """The (provider, region) of the run's last apply, from its variables file."""
    try:
        v = json.loads((workdir / VARS_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None, None
    return v.get("cloud_provider"), v.get("region")


def cloud_scan_enabled() -> bool:
    """Scan the real cloud when the run targeted it: ``BURST_TARGET`` other than ``local``, or
    (see ``leak_scan``) whenever the run's workspace is a cloud stack, whatever the variable
    says."""
    from burst.settings import current

    return current().target != "local"


def leak_scan(run_id: str, workdir: Path) -> list[dict[str, Any]]:
    """What of the run is still alive: resources left in the state, then (for a cloud target)
    resources tagged burst:run-id=<run_id> in the run's region. AWS is listed through its
    APIs; GCP, Azure and Nebius through ``burst.infra.cloudscan``, which records an
    ``unverified-scan`` leak when it cannot ask: an unknown state is never clean. A GCP, Azure
    or Nebius run's home-side resources (AWS, the site's ``home.region``) are scanned too."""
    leaks: list[dict[str, Any]] = []
    remaining = count_state_resources(state_file(workdir))
    if remaining:
        leaks.append(
            {"kind": "terraform-state", "id": str(state_file(workdir)), "count": remaining}
        )
    provider, region = run_region(workdir)
    ws = load_workspace(workdir)
    on_cloud = cloud_scan_enabled() or (ws is not None and ws.kind != "local")
    if not on_cloud:
        return leaks
    if provider == "aws" and region:
        from burst.infra.leakscan import AwsInventory

        try:
            leaks += [r.describe() for r in AwsInventory(region).tagged(run_id)]
        except Exception as exc:  # an unreadable cloud is not "nothing left": fail closed
            raise InfraError(f"leak scan of {region} failed: {exc}") from exc
    elif provider in cloudscan.SCANNED_PROVIDERS and region:
        site = cloudscan.site_variables(ws.var_files(region) if ws is not None else [])
        leaks += cloudscan.scan(provider, region, run_id, site)
        leaks += cloudscan.home_leaks(run_id, site)  # the home side (aws-hybrid-join)
    elif ws is not None and ws.kind != "local":
        leaks.append(
            cloudscan.unverified(
                provider or ws.kind,
                region or "?",
                f"the run's provider/region are unknown ({workdir / VARS_FILE} unreadable)",
            )
        )
    return leaks
