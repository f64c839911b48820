"""One run's state for ``burst status`` and ``burst logs``, wherever the run is: a local run
directory (``burst run``) or an Argo workflow (``burst submit``). The same JSON shape for both:
``{run_id, mode, status, finished, steps: [{name, status, seconds, exit_code, attempts,
message}], message}``; ``status`` is burst's word (running, succeeded, failed, unknown),
``phase`` Argo's where there is one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burst.errors import BadInputError

LOCAL, ARGO = "local", "argo"
FINISHED = ("succeeded", "failed")
ARGO_STATUS = {
    "Succeeded": "succeeded",
    "Failed": "failed",
    "Error": "failed",
    "Running": "running",
    "Pending": "running",
}


@dataclass
class RunStatus:
    run_id: str
    mode: str  # local | argo
    status: str  # running | succeeded | failed | unknown
    steps: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    phase: str | None = None  # Argo's phase
    progress: str | None = None
    dir: str | None = None  # a local run's directory

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "mode": self.mode,
            "status": self.status,
            "finished": self.finished,
            "phase": self.phase,
            "progress": self.progress,
            "message": self.message,
            "dir": self.dir,
            "steps": self.steps,
        }


def local_run_dir(run: str, root: Path | None) -> Path | None:
    """RUN's directory when it is a local run (a run directory, or a run id under the runs
    root); None when it is not one (then it may be an Argo workflow)."""
    from burst.obs.run_view import resolve_run_dir

    try:
        return resolve_run_dir(run, root)
    except BadInputError:
        return None


def local_status(run_dir: Path) -> RunStatus:
    from burst.obs.run_view import load_run

    view = load_run(run_dir)
    failure = view.summary()["failure"]
    return RunStatus(
        run_id=view.run_id,
        mode=LOCAL,
        status=view.status,
        steps=[
            {
                "name": s.name,
                "status": s.status,
                "seconds": round(s.seconds, 3),
                "exit_code": s.exit_code,
                "attempts": s.attempts,
                "message": "",
            }
            for s in view.steps
        ],
        message=(failure or {}).get("message") or "",
        dir=str(run_dir),
    )


def argo_status(state: Any) -> RunStatus:
    """``burst.runner.argo.WorkflowState`` in the common shape."""
    return RunStatus(
        run_id=state.name,
        mode=ARGO,
        status=ARGO_STATUS.get(state.phase, "unknown"),
        steps=[
            {
                "name": n["name"],
                "status": ARGO_STATUS.get(n["phase"], str(n["phase"]).lower()),
                "seconds": None,
                "exit_code": None if n["exit_code"] is None else int(n["exit_code"]),
                "attempts": 1,
                "message": n["message"],
            }
            for n in state.nodes
        ],
        message=state.message,
        phase=state.phase,
        progress=state.progress,
    )


def not_found(run: str, root: Path) -> BadInputError:
    return BadInputError(
        f"run {run!r} is not a local run under {root} and ARGO_SERVER is not set to ask "
        "Argo: give --runs-root, or export ARGO_SERVER and ARGO_TOKEN for a submitted run"
    )


def argo_runs(settings: Any) -> list[dict[str, Any]]:
    """The namespace's workflows as ``burst runs`` rows (mode argo): name, burst's status word,
    Argo's phase, wall seconds when finished."""
    import datetime as dt

    from burst.runner.argo import _call, _service

    with _service(settings) as svc:
        wl = _call(svc.list_workflows, settings=settings, namespace=settings.namespace)
    rows = []
    for w in wl.items or []:
        st = w.status
        phase = (st.phase if st else None) or "Pending"
        started = st.started_at.root if st and st.started_at else None
        finished = st.finished_at.root if st and st.finished_at else None
        end = finished or dt.datetime.now(dt.UTC)
        rows.append(
            {
                "run_id": str(w.metadata.name) if w.metadata and w.metadata.name else "?",
                "mode": ARGO,
                "status": ARGO_STATUS.get(phase, "unknown"),
                "phase": phase,
                "wall_seconds": round((end - started).total_seconds(), 3) if started else 0.0,
            }
        )
    return rows
