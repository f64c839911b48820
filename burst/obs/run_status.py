"""One run's state for ``burst status`` and ``burst logs``, wherever the run is: a local run
directory (``burst run``) or an Argo workflow (``burst submit``). The same JSON shape for both:
``{run_id, mode, status, finished, exit_code, ending, wall_seconds, steps: [{name, status,
seconds, exit_code, attempts, message}], message}``; ``status`` is burst's word (running,
unknown, or how the run ended: ``burst.endings``), ``ending`` its exit code, wording and hint
once it has ended, ``phase`` Argo's where there is one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burst.endings import Ending, argo_ending, ending_of, exit_code_of
from burst.endings import as_json as ending_json
from burst.errors import BadInputError

LOCAL, ARGO = "local", "argo"
#: Argo's node phases in burst's step words.
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
    exit_code: int | None = None  # the run's (burst.endings), once it has ended
    wall_seconds: float | None = None

    @property
    def ending(self) -> Ending | None:
        return ending_of(self.status)

    @property
    def finished(self) -> bool:
        return self.ending is not None

    def ending_json(self) -> dict[str, Any] | None:
        root = Path(self.dir).parent if self.dir else None
        return ending_json(self.ending, self.exit_code, self.run_id, root, local=self.mode == LOCAL)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "mode": self.mode,
            "status": self.status,
            "finished": self.finished,
            "exit_code": self.exit_code,
            "ending": self.ending_json(),
            "wall_seconds": self.wall_seconds,
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
        exit_code=view.exit_code,
        wall_seconds=round(view.wall_seconds, 3),
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


def _argo_word(phase: str | None, message: str | None, nodes: list[dict[str, Any]]) -> str:
    """A workflow's status in burst's words: how it ended (``burst.endings``), else running
    (or unknown for a phase burst does not know)."""
    ending = argo_ending(phase, message, nodes)
    if ending is not None:
        return ending.value
    return "running" if phase in ("Running", "Pending", "", None) else "unknown"


def argo_status(state: Any) -> RunStatus:
    """``burst.runner.argo.WorkflowState`` in the common shape."""
    word = _argo_word(state.phase, state.message, state.nodes)
    ending = ending_of(word)
    return RunStatus(
        run_id=state.name,
        mode=ARGO,
        status=word,
        exit_code=None if ending is None else _argo_exit_code(ending, state.nodes),
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


def _argo_exit_code(ending: Ending, nodes: list[dict[str, Any]]) -> int:
    """A failed workflow's code is its failing step's (the give-up helper passes train's
    on), as for a local run."""
    failed = [n for n in nodes if n.get("phase") in ("Failed", "Error")]
    code = failed[-1].get("exit_code") if failed else None
    try:
        return exit_code_of(ending, None if code in (None, "") else int(code))
    except (TypeError, ValueError):
        return exit_code_of(ending)


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
        nodes = _nodes(st)
        word = _argo_word(phase, st.message if st else None, nodes)
        ending = ending_of(word)
        name = str(w.metadata.name) if w.metadata and w.metadata.name else "?"
        rows.append(
            {
                "run_id": name,
                "mode": ARGO,
                "status": word,
                "exit_code": None if ending is None else _argo_exit_code(ending, nodes),
                "ending": ending_json(
                    ending,
                    None if ending is None else _argo_exit_code(ending, nodes),
                    name,
                    local=False,
                ),
                "phase": phase,
                "wall_seconds": round((end - started).total_seconds(), 3) if started else 0.0,
            }
        )
    return rows


def _nodes(st: Any) -> list[dict[str, Any]]:
    """A listed workflow's pod nodes (name, phase, exit code, message), in the order they
    started, as ``burst.runner.argo.status`` gives them."""
    nodes = []
    for node in ((st.nodes if st else None) or {}).values():
        if node.type not in ("Pod", "Retry"):
            continue
        nodes.append(
            {
                "name": node.display_name or node.name,
                "phase": node.phase,
                "exit_code": node.outputs.exit_code if node.outputs else None,
                "message": node.message or "",
                "started_at": node.started_at.root.isoformat() if node.started_at else "",
            }
        )
    return sorted(nodes, key=lambda n: n["started_at"])
