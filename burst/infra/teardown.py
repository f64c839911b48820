"""Tear a run down from its run id alone: destroy its state (retried with backoff), then prove
nothing is left: the state must be empty and, for a cloud target, a scan of the run's region
must find nothing tagged with the run id.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from burst.errors import BurstError, InfraError
from burst.infra.terraform import Terraform, count_state_resources
from burst.infra.workspace import VARS_FILE, state_file

log = logging.getLogger(__name__)

BeforeAttempt = Callable[[int], None]


def destroy_run(workdir: Path, *, retries: int = 4, backoff_s: float = 0.5,
                before_attempt: BeforeAttempt | None = None) -> dict[str, Any]:
    """``terraform destroy`` the run's state, retried with exponential backoff on failure, then
    count what remains in the state."""
    state = state_file(workdir)
    if not (workdir / "main.tf").exists():
        log.info("nothing was provisioned for this run (no Terraform working directory)")
        return {"destroyed": True, "attempts": 0, "errors": [], "resources_remaining": 0,
                "terraform_state": str(state)}
    tf = Terraform(workdir)
    var_file = workdir / VARS_FILE
    errors: list[str] = []
    attempts = 0
    for attempt in range(1, retries + 1):
        attempts = attempt
        try:
            if before_attempt is not None:
                before_attempt(attempt)
            tf.init()
            tf.destroy(var_file if var_file.exists() else None)
            break
        except BurstError as exc:
            errors.append(f"attempt {attempt}: {exc.one_line()}")
            log.warning("destroy attempt %d/%d failed: %s", attempt, retries, exc.one_line())
            if attempt < retries:
                time.sleep(backoff_s * 2 ** (attempt - 1))
    remaining = count_state_resources(state)
    return {"destroyed": remaining == 0, "attempts": attempts, "errors": errors,
            "resources_remaining": remaining, "terraform_state": str(state)}


def run_region(workdir: Path) -> tuple[str | None, str | None]:
    """The (provider, region) of the run's last apply, from its variables file."""
    try:
        v = json.loads((workdir / VARS_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None, None
    return v.get("cloud_provider"), v.get("region")


def cloud_scan_enabled() -> bool:
    """Scan the real cloud only when the run really targeted it (BURST_TARGET=aws)."""
    return os.environ.get("BURST_TARGET", "local") == "aws"


def leak_scan(run_id: str, workdir: Path) -> list[dict[str, Any]]:
    """What of the run is still alive: resources left in the state, then (for a cloud target)
    resources tagged burst:run-id=<run_id> in the run's region."""
    leaks: list[dict[str, Any]] = []
    remaining = count_state_resources(state_file(workdir))
    if remaining:
        leaks.append({"kind": "terraform-state", "id": str(state_file(workdir)),
                      "count": remaining})
    provider, region = run_region(workdir)
    if cloud_scan_enabled() and provider == "aws" and region:
        from burst.infra.leakscan import AwsInventory

        try:
            leaks += [r.describe() for r in AwsInventory(region).tagged(run_id)]
        except Exception as exc:  # an unreadable cloud is not "nothing left": fail closed
            raise InfraError(f"leak scan of {region} failed: {exc}") from exc
    return leaks
