"""Run the pipeline on this machine: each step as its own process (``python -m steps.<name>``),
documents passed as files, teardown always, a retry on exit 75 for the train step.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burst.errors import EXIT_PREEMPTED
from burst.obs.report import build_report
from burst.runs import RunPaths, write_json_atomic

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Step:
    name: str
    inputs: tuple[str, ...] = ()  # names of earlier steps whose documents it reads

    @property
    def module(self) -> str:
        return "steps." + self.name.replace("-", "_")


PIPELINE: tuple[Step, ...] = (
    Step("preflight"),
    Step("plan", ("preflight",)),
    Step("verify-image"),
    Step("provision", ("plan", "preflight")),
    Step("train", ("provision", "plan")),
)
EXIT_HANDLER = Step("teardown")
INPUT_NAMES = {"preflight": "decision", "plan": "plan", "provision": "infra",
               "verify-image": "image"}


@dataclass
class RunOptions:
    fail_at: tuple[str, ...] = ()
    max_train_retries: int = 10
    env: dict[str, str] = field(default_factory=dict)


Event = Callable[[str, str, dict[str, Any]], None]


@dataclass
class StepRun:
    name: str
    status: str  # succeeded | failed | skipped
    exit_code: int | None
    seconds: float
    attempts: int = 1


class LocalRunner:
    def __init__(self, paths: RunPaths, spec_file: Path, options: RunOptions | None = None,
                 on_event: Event | None = None) -> None:
        self.paths = paths
        self.spec_file = spec_file
        self.options = options or RunOptions()
        self.on_event = on_event or (lambda *_: None)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.options.env)
        env["BURST_RUNS_ROOT"] = str(self.paths.root)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        if self.options.fail_at:
            env["BURST_FAIL_AT"] = ",".join(self.options.fail_at)
        return env

    def _exec(self, step: Step) -> int:
        argv = [sys.executable, "-m", step.module, "--spec", str(self.paths.spec),
                "--run-id", self.paths.run_id, "--runs-root", str(self.paths.root),
                "--out", str(self.paths.doc(step.name))]
        for src in step.inputs:
            doc = self.paths.doc(src)
            if doc.exists():
                argv += ["--input", f"{INPUT_NAMES[src]}={doc}"]
        with open(self.paths.log(step.name), "a", encoding="utf-8") as logf:
            proc = subprocess.run(argv, stdout=logf, stderr=subprocess.STDOUT, env=self._env(),
                                  cwd=os.getcwd(), check=False)
        return proc.returncode

    def _run_step(self, step: Step) -> StepRun:
        self.on_event(step.name, "started", {})
        started = time.monotonic()
        attempts = 0
        while True:
            attempts += 1
            code = self._exec(step)
            if (code == EXIT_PREEMPTED and step.name == "train"
                    and attempts <= self.options.max_train_retries):
                self.on_event(step.name, "requeued", {"attempt": attempts})
                continue
            break
        status = "succeeded" if code == 0 else "failed"
        run = StepRun(step.name, status, code, round(time.monotonic() - started, 3), attempts)
        self.on_event(step.name, status, {"exit_code": code, "seconds": run.seconds})
        return run

    def run(self) -> dict[str, Any]:
        self.paths.create()
        if self.spec_file.resolve() != self.paths.spec.resolve():
            shutil.copyfile(self.spec_file, self.paths.spec)
        results: list[StepRun] = []
        failed: StepRun | None = None
        try:
            for step in PIPELINE:
                if failed is not None:
                    results.append(StepRun(step.name, "skipped", None, 0.0, 0))
                    continue
                res = self._run_step(step)
                results.append(res)
                if res.status != "succeeded":
                    failed = res
        finally:
            results.append(self._run_step(EXIT_HANDLER))
        report = build_report(self.paths, [r.__dict__ for r in results])
        write_json_atomic(self.paths.report, report)
        return report
