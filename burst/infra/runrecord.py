"""A run's Terraform record kept beside its state, so that teardown finds it from the run id.

On a cluster every pod's runs root is a volume of its own (docs/pipelines.md: an emptyDir per
pod). Provision writes ``workspace.json`` (which stack, its backend) and the variables of its
last apply (``burst.auto.tfvars.json``) there, and teardown, in another pod, used to find
neither: it said "nothing was provisioned" and destroyed nothing, while the run's GPU nodes
billed until the reaper's tag path came (the engines tier showed the empty runs root; docs/
reference/engines-tier.md). What outlives a pod travels in the state backend: before each
apply, provision copies both files next to the state (``burst/runs/<run id>/``); teardown and
the reaper, when their runs root has no record, fetch them from there and destroy as usual.

S3-backed stacks (aws, nebius) only: burst opens no GCS or Azure store (their candidates are
refused at planning unless the stack is local). The local stack keeps its state in the runs
root itself: on one machine provision and teardown share it; on a cluster there is nothing to
find, which ``fetch`` reports as nothing provisioned.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from burst.errors import InfraError
from burst.infra.workspace import (
    CLOUD,
    VARS_FILE,
    WORKSPACE_FILE,
    Env,
    Workspace,
    backend_for,
    site_vars_for,
    stack_mode,
)
from burst.settings import per_stack, resolve

log = logging.getLogger(__name__)

#: The stacks whose state backend is an S3 bucket (burst.infra.workspace.backend_for).
S3_STACKS = ("aws", "nebius")
FILES = (WORKSPACE_FILE, VARS_FILE)


def _prefix(backend: dict[str, str]) -> str:
    return backend["key"].rsplit("/", 1)[0]


def _client(kind: str, backend: dict[str, str]) -> Any:
    from botocore.config import Config

    from burst.aws_session import session

    endpoint = None
    if kind == "nebius":
        endpoint = backend["endpoints"].split('"')[1]  # {s3="https://storage.<region>..."}
    cfg = Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=10)
    return session().client("s3", region_name=backend["region"], endpoint_url=endpoint, config=cfg)


def save(ws: Workspace) -> None:
    """Copy the workspace record and the run's variables next to its state (before apply:
    a provision that dies mid-apply leaves them for teardown). Raises InfraError when the
    backend refuses: nothing is rented that teardown could not find."""
    if ws.kind not in S3_STACKS:
        return
    backend = ws.backend_config
    client = _client(ws.kind, backend)
    for name in FILES:
        path = ws.workdir / name
        if not path.exists():
            continue
        key = f"{_prefix(backend)}/{name}"
        try:
            client.put_object(
                Bucket=backend["bucket"],
                Key=key,
                Body=path.read_bytes(),
                ServerSideEncryption="AES256",
            )
        except Exception as exc:  # botocore's errors: the backend or the network
            raise InfraError(
                f"cannot keep the run's Terraform record beside its state: "
                f"{exc.__class__.__name__}: {str(exc)[:200]}",
                where=f"s3://{backend['bucket']}/{key}",
            ) from None


def _candidate_kinds(env: Env) -> list[str]:
    mode = stack_mode(env)
    if mode in S3_STACKS:
        return [mode]
    if mode == CLOUD:
        bucket = resolve(env).tf_state_bucket
        return [k for k in S3_STACKS if per_stack(bucket, k)]
    return []


def _site_of_this_pod(workdir: Path, kind: str, env: Env) -> None:
    """The record names provision's site file, a path in its own pod: where that path is not
    here, this pod's (from the same workflow parameter) takes its place."""
    path = workdir / WORKSPACE_FILE
    rec = json.loads(path.read_text())
    site = rec.get("site_vars")
    if not site or Path(site).exists():
        return
    region = None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        region = json.loads((workdir / VARS_FILE).read_text()).get("region")
    rec["site_vars"] = str(site_vars_for(kind, region, env))
    path.write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")


def fetch(workdir: Path, env: Env = None) -> bool:
    """When ``workdir`` holds no workspace record, bring the run's from beside its state (the
    stack BURST_TF_STACK names, or with ``cloud`` every S3-backed stack whose state bucket is
    set). True when a record is there now."""
    if (workdir / WORKSPACE_FILE).exists():
        return True
    run_id = workdir.parent.name
    for kind in _candidate_kinds(env):
        backend = backend_for(kind, run_id, env)
        client = _client(kind, backend)
        bodies: dict[str, bytes] = {}
        for name in FILES:
            key = f"{_prefix(backend)}/{name}"
            try:
                obj = client.get_object(Bucket=backend["bucket"], Key=key)
                bodies[name] = obj["Body"].read()
            except Exception as exc:
                code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
                if code in ("NoSuchKey", "404", "NotFound"):
                    continue
                raise InfraError(
                    f"cannot read the run's Terraform record: {exc.__class__.__name__}: "
                    f"{str(exc)[:200]}",
                    where=f"s3://{backend['bucket']}/{key}",
                ) from None
        if WORKSPACE_FILE in bodies:
            workdir.mkdir(parents=True, exist_ok=True)
            for name, body in bodies.items():
                (workdir / name).write_bytes(body)
            _site_of_this_pod(workdir, kind, env)
            log.info("reopened run %s's %s workspace from beside its state", run_id, kind)
            return True
    return False
