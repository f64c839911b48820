"""Tear a run down from its run id alone: destroy its state, then count what is left."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from burst.errors import InfraError
from burst.infra.terraform import Terraform, count_state_resources
from burst.infra.workspace import VARS_FILE, state_file

log = logging.getLogger(__name__)


def destroy_run(workdir: Path, *, retries: int = 3, backoff_s: float = 1.0) -> dict[str, Any]:
    """``terraform destroy`` the run's state (retried with backoff), then count what remains."""
    state = state_file(workdir)
    if not (workdir / "main.tf").exists():
        log.info("nothing was provisioned for this run (no Terraform working directory)")
        return {"destroyed": True, "attempts": 0, "resources_remaining": 0,
                "terraform_state": str(state)}
    tf = Terraform(workdir)
    var_file = workdir / VARS_FILE
    errors: list[str] = []
    for attempt in range(1, retries + 1):
        try:
            tf.init()
            tf.destroy(var_file if var_file.exists() else None)
            break
        except InfraError as exc:
            errors.append(exc.message)
            log.warning("destroy attempt %d/%d failed: %s", attempt, retries, exc.message)
            if attempt < retries:
                time.sleep(backoff_s * 2 ** (attempt - 1))
    remaining = count_state_resources(state)
    return {"destroyed": remaining == 0, "attempts": len(errors) + (1 if remaining == 0 else 0),
            "errors": errors, "resources_remaining": remaining, "terraform_state": str(state)}
