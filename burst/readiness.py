"""Check before renting: what can be checked without the rented nodes, is.

``burst validate`` and the pipeline's preflight step run these before anything is provisioned:

* the entrypoint imports and builds on the spec, and one batch goes through the model (a
  ``training.command`` instead: the program exists and starts, ``burst.program.check``): in a
  subprocess (``python -m burst.train.entrycheck``) with a time limit
  (``BURST_ENTRYPOINT_CHECK_S``, default 120 s), so a hanging or crashing entrypoint cannot
  take the caller with it;
* the checkpoint store (and the replica store) answers and accepts a write: a probe object is
  written, read back and deleted, within a time limit (``BURST_STORE_CHECK_S``, default 60 s).

Each failure is one line naming the field it comes from: ``BadInputError`` (exit 2) for the
spec's mistakes, ``InfraError`` (exit 4) for a store that does not answer.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
import threading
from typing import Any

from burst import checkout
from burst.errors import BadInputError, BurstError, InfraError
from burst.inputs import clip
from burst.settings import current
from burst.spec import BurstJob

log = logging.getLogger(__name__)

ENTRYPOINT_ENV = "BURST_ENTRYPOINT_CHECK_S"
STORE_ENV = "BURST_STORE_CHECK_S"
PROBE_PREFIX = "_burst_probe/"


def _limit(var: str, value: float) -> float:
    if value > 3600:
        raise BadInputError(f"{var}={value:g} must be a number of seconds from 0 to 3600")
    return value


def check_entrypoint(job: BurstJob, *, timeout: float | None = None) -> None:
    """Import and build ``training.entrypoint`` in a child process, one batch forward."""
    limit = _limit(ENTRYPOINT_ENV, current().entrypoint_check_s) if timeout is None else timeout
    if job.training.own_program:  # training.command: exists and starts (burst.program.check)
        from burst.program.check import check_command

        check_command(job, limit)
        return
    env = dict(os.environ)
    root = str(checkout.ROOT)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "burst.train.entrycheck"],
            input=job.canonical_json(),
            capture_output=True,
            text=True,
            timeout=limit,
            env=env,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        raise BadInputError(
            f"training.entrypoint: {job.training.entrypoint} did not build within {limit:g} s "
            f"(raise {ENTRYPOINT_ENV} if building it takes longer)"
        ) from None
    if proc.returncode == 0:
        return
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    last = lines[-1] if lines else f"exit code {proc.returncode}"
    if proc.returncode == 2 and last.startswith("training.entrypoint"):
        raise BadInputError(clip(last, 400))
    raise BadInputError(
        f"training.entrypoint: {job.training.entrypoint} failed to build "
        f"(exit code {proc.returncode}): {clip(last, 300)}"
    )


def check_store(url: str, field: str, *, timeout: float | None = None) -> None:
    """Write, read back and delete a probe object in the store at ``url``."""
    from burst.storage import open_store
    from burst.storage.location import store_url

    url = store_url(url)  # a relative file:// path is under the runs root
    limit = _limit(STORE_ENV, current().store_check_s) if timeout is None else timeout
    outcome: dict[str, Any] = {}

    def probe() -> None:
        try:
            store = open_store(url)
            key = f"{PROBE_PREFIX}{secrets.token_hex(8)}"
            data = secrets.token_bytes(32)
            try:
                store.put_bytes(key, data)
                if store.get_bytes(key) != data:
                    raise InfraError("a probe object read back different bytes")
            finally:
                try:
                    store.delete([key])
                finally:
                    store.close()
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=probe, daemon=True, name="store-probe")
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        raise InfraError(f"{field}: the store {url} did not answer within {limit:g} s")
    exc = outcome.get("error")
    if exc is None:
        return
    if isinstance(exc, BadInputError):
        raise BadInputError(f"{field}: {exc.one_line()}") from None
    if isinstance(exc, BurstError):
        raise InfraError(
            f"{field}: the store {url} does not accept a write: {exc.one_line()}"
        ) from None
    if isinstance(exc, OSError):
        raise InfraError(
            f"{field}: the store {url} does not accept a write: {exc.__class__.__name__}: "
            f"{exc.strerror or exc}"
        ) from None
    raise InfraError(
        f"{field}: the store {url} does not accept a write: {exc.__class__.__name__}: "
        f"{clip(str(exc))}"
    ) from None


def check_stores(job: BurstJob) -> None:
    check_store(job.storage.checkpoint_uri, "storage.checkpoint_uri")
    if job.storage.replica_uri:
        check_store(job.storage.replica_uri, "storage.replica_uri")


def check_ready(job: BurstJob, *, entrypoint: bool = True, stores: bool = True) -> list[BurstError]:
    """Every readiness problem (entrypoint, stores), each an error with its exit code. The
    checks' time limits are read first: a bad setting is reported alone, before any check
    starts (building the entrypoint costs a process and seconds of torch start-up)."""
    try:
        if stores:
            _limit(STORE_ENV, current().store_check_s)
        if entrypoint:
            _limit(ENTRYPOINT_ENV, current().entrypoint_check_s)
    except BurstError as exc:
        log.debug("not ready: %s", exc.one_line())
        return [exc]
    problems: list[BurstError] = []
    checks = []
    if stores:
        checks.append(lambda: check_stores(job))
    if entrypoint:
        checks.append(lambda: check_entrypoint(job))
    for check in checks:
        try:
            check()
        except BurstError as exc:
            log.debug("not ready: %s", exc.one_line())
            problems.append(exc)
    return problems
