"""Provision a run's infrastructure, failing over through the plan's candidates.

A capacity error destroys what the attempt partly created and moves to the next candidate;
any other error stops. Every attempt is recorded. Applying again for the same run id converges.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from pathlib import Path
from typing import Any

from burst.errors import CapacityError, InfraError
from burst.infra.terraform import Terraform
from burst.infra.workspace import write_root, write_vars
from burst.spec import BurstJob

log = logging.getLogger(__name__)


def expires_at(job: BurstJob, now: dt.datetime | None = None) -> str:
    """When the run's resources may be reaped: the budget's hours plus one hour of grace."""
    now = now or dt.datetime.now(dt.UTC)
    return (now + dt.timedelta(hours=job.budget.max_hours + 1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_count(job: BurstJob) -> int:
    return max(1, -(-job.compute.gpu_count // job.compute.gpus_per_node))


def provision(job: BurstJob, run_id: str, workdir: Path,
              candidates: list[dict[str, Any]]) -> dict[str, Any]:
    if not candidates:
        raise InfraError("no candidate to provision: the plan is empty")
    write_root(workdir, run_id)
    tf = Terraform(workdir)
    tf.init()
    expiry = expires_at(job)
    attempts: list[dict[str, Any]] = []
    for cand in candidates:
        variables = {
            "run_id": run_id,
            "region": cand["region"],
            "cloud_provider": cand["provider"],
            "capacity": cand.get("capacity", job.compute.capacity),
            "gpu_type": job.compute.gpu_type,
            "node_count": node_count(job),
            "tags": job.tags(run_id, expiry),
        }
        var_file = write_vars(workdir, variables)
        started = time.monotonic()
        attempt: dict[str, Any] = {"region": cand["region"], "provider": cand["provider"],
                                   "capacity": variables["capacity"]}
        try:
            tf.apply(var_file)
        except CapacityError as exc:
            attempt.update(result="capacity", error=exc.message,
                           seconds=round(time.monotonic() - started, 3))
            attempts.append(attempt)
            log.warning("no capacity in %s/%s: %s; cleaning up and failing over",
                        cand["provider"], cand["region"], exc.message)
            tf.destroy(var_file)
            continue
        except InfraError as exc:
            attempt.update(result="error", error=exc.message,
                           seconds=round(time.monotonic() - started, 3))
            attempts.append(attempt)
            exc.attempts = attempts  # type: ignore[attr-defined]
            raise
        attempt.update(result="ok", seconds=round(time.monotonic() - started, 3))
        attempts.append(attempt)
        outputs = tf.outputs()
        log.info("provisioned %s in %s/%s", outputs.get("node_group_name"), cand["provider"],
                 cand["region"])
        return {"candidate": cand, "attempts": attempts, "outputs": outputs,
                "expires_at": expiry, "terraform_dir": str(workdir)}
    raise CapacityError(
        "no capacity in any candidate: "
        + ", ".join(f"{a['provider']}/{a['region']}" for a in attempts)
    )
