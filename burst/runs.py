"""Run identity and the run directory ``runs/<run-id>/``.

Layout of a run directory:
    spec.yaml            the spec as submitted
    docs/<step>.json     the JSON document each step wrote (what Argo passes as outputs)
    logs/<step>.log      each step's log (stderr)
    terraform/           the Terraform working directory and state of the run
    events.jsonl         the runner's timeline: each step's start, requeues and end (exit code)
    heartbeat/           the driver's heartbeat (burst.lease): renewed while the runner lives
    report.json          the run report
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burst.errors import BadInputError
from burst.inputs import parse_json, read_text
from burst.settings import current

#: The runner's timeline of a run (``burst.runner.local``): one JSON object a line,
#: ``{"t": epoch seconds, "step", "status": started|requeued|succeeded|failed, "exit_code"}``.
EVENTS_FILE = "events.jsonl"
RUN_ID_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{0,100}$")


def runs_root() -> Path:
    """Where run directories live: $BURST_RUNS_ROOT, else ./runs."""
    return current().runs_root.resolve()


def new_run_id(name: str, now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.UTC)
    return f"{name}-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def check_run_id(run_id: str) -> str:
    if not RUN_ID_RE.match(run_id):
        raise BadInputError(
            f"run id {run_id!r} must be lowercase letters, digits, '.' and '-' (at most 101)"
        )
    return run_id


@dataclass(frozen=True)
class RunPaths:
    root: Path
    run_id: str

    @property
    def dir(self) -> Path:
        return self.root / self.run_id

    @property
    def spec(self) -> Path:
        return self.dir / "spec.yaml"

    @property
    def docs(self) -> Path:
        return self.dir / "docs"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def terraform(self) -> Path:
        return self.dir / "terraform"

    @property
    def report(self) -> Path:
        return self.dir / "report.json"

    @property
    def events(self) -> Path:
        return self.dir / EVENTS_FILE

    def doc(self, step: str) -> Path:
        return self.docs / f"{step}.json"

    def log(self, step: str) -> Path:
        return self.logs / f"{step}.log"

    def create(self) -> RunPaths:
        for d in (self.dir, self.docs, self.logs, self.terraform):
            d.mkdir(parents=True, exist_ok=True)
        return self


def run_paths(run_id: str, root: Path | None = None) -> RunPaths:
    return RunPaths(root or runs_root(), check_run_id(run_id))


def write_json_atomic(path: Path, doc: Any) -> None:
    """Write JSON through a temp file, fsync and rename: readers see all or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2, sort_keys=True, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_doc(value: str, name: str = "document") -> dict[str, Any]:
    """A step input: inline JSON (as Argo passes parameters) or the path of a JSON file."""
    text = value.strip()
    source = f"{name} (inline)"
    if not text.startswith(("{", "[")):
        source = text
        text = read_text(Path(text), what=name)  # bounded: file type and size
    doc = parse_json(text, source, what=name)
    if not isinstance(doc, dict):
        raise BadInputError(f"the {name} must be a JSON object", where=source)
    return doc


def utcnow_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- a run's Terraform state, as the report and the reaper read it (no Terraform needed) ------

STATE_FILE = "terraform.tfstate"


def state_file(workdir: Path) -> Path:
    """The local state file of a run's Terraform working directory."""
    return workdir / STATE_FILE


def count_state_resources(path: Path) -> int:
    """Resource instances recorded in a local state file (0 when there is no file)."""
    if not path.exists():
        return 0
    doc = json.loads(path.read_text() or "{}")
    return sum(len(r.get("instances", [])) for r in doc.get("resources", []))
