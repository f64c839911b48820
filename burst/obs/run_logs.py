"""A run's step logs for ``burst logs``: the local run directory's ``logs/<step>.log`` (one
file a step, every attempt appended), or an Argo workflow's pod logs (the server's log API,
one JSON object a line: ``{"result": {"content": ..., "podName": ...}}``). A person reads
them as lines (:func:`readable`), ``--json`` gets each as one JSON object, never encoded
twice (:func:`as_json_line`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from burst.errors import BadInputError, InfraError

MAX_LINE = 1 << 20


def local_log_files(run_dir: Path, step: str | None) -> list[tuple[str, Path]]:
    """(step, file) in the order the steps ran; one step when ``step`` is given."""
    from burst.obs.run_view import load_run

    logs = run_dir / "logs"
    names = [s.name for s in load_run(run_dir).steps]
    files = {p.stem: p for p in sorted(logs.glob("*.log"))} if logs.is_dir() else {}
    order = [n for n in names if n in files] + [n for n in files if n not in names]
    if step is not None:
        if step not in files:
            known = ", ".join(order) or "none yet"
            raise BadInputError(f"--step {step!r}: no log of that step in {logs} ({known})")
        return [(step, files[step])]
    return [(n, files[n]) for n in order]


def rank_of(line: str) -> int | None:
    """The rank a log line came from: a rank's JSON log lines name their step ``<step>.<rank>``
    (``burst.stepio``); a line that is not one (a program's own output, a traceback, a step
    with one rank) has none."""
    if not line.startswith("{"):
        return None
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    step = doc.get("step") if isinstance(doc, dict) else None
    _, dot, rank = str(step or "").rpartition(".")
    return int(rank) if dot and rank.isascii() and rank.isdigit() else None


def record_of(line: str) -> dict[str, Any] | None:
    """The JSON log record a line holds (``burst.obs.logs.JsonLineFormatter``: ts, level,
    msg, step, run_id and an event's fields); None for any other line (a program's own
    output, a traceback, a step's human-readable log)."""
    if not line.startswith("{"):
        return None
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) and "msg" in doc else None


def readable(line: str, prefix: str | None) -> str:
    """A log line for a person: a JSON record as ``[step] HH:MM:SS level message`` (its UTC
    time, its own step: a rank's is ``train.1``; an exception's traceback below it), any
    other line as it is, after ``[step]``. ``prefix``: the step's name for a line that names
    none (None: no prefix at all, as with --step)."""
    rec = record_of(line)
    if rec is None:
        return line if prefix is None else f"[{prefix}] {line}"
    ts = str(rec.get("ts") or "")
    clock = ts[11:19] if len(ts) >= 19 else "--:--:--"
    text = f"{clock} {rec.get('level') or ''!s:7s} {rec.get('msg')}"
    if rec.get("exc"):
        text += "\n" + str(rec["exc"])
    if prefix is None:
        return text
    return f"[{rec.get('step') or prefix}] {text}"


def error_text(line: str) -> str | None:
    """What a step's log line says went wrong, in words, or None when it tells no error: a
    JSON record of level error or critical is its message (a person never reads the raw
    record, and a record whose fields merely hold the word, ``"errors": []``, is none); any
    other line that says "error" is itself (``burst train: error: ...``)."""
    rec = record_of(line)
    if rec is None:
        return line.strip() if "error" in line else None
    if str(rec.get("level") or "").lower() in ("error", "critical"):
        return str(rec.get("msg") or "").strip() or None
    return None


def as_json_line(name: str, line: str) -> str:
    """A log line as one JSON object for ``--json``: a JSON record exactly as the step wrote
    it, any other line as ``{"step": <step>, "line": <text>}``."""
    if record_of(line) is not None:
        return line
    return json.dumps({"step": name, "line": line})


def read_new(path: Path, offset: int) -> tuple[list[str], int]:
    """Whole lines written after ``offset``, and the offset after them."""
    with path.open("rb") as fh:
        fh.seek(offset)
        data = fh.read()
    end = data.rfind(b"\n") + 1
    lines = data[:end].decode("utf-8", errors="replace").splitlines()
    return lines, offset + end


def argo_log_lines(
    settings: Any, name: str, step: str | None, follow: bool, get: Callable[..., Any] | None = None
) -> Iterator[tuple[str, str]]:
    """(pod, line) from the Argo server's workflow log API (the main containers)."""
    from burst.runner.argo import _timed_session

    token = settings.token if settings.token.startswith("Bearer ") else f"Bearer {settings.token}"
    url = f"{settings.server}api/v1/workflows/{settings.namespace}/{name}/log"
    params = {"logOptions.container": "main", "logOptions.follow": str(follow).lower()}
    at = f"the Argo server {settings.server.rstrip('/')} (ARGO_SERVER)"
    session = _timed_session()
    import requests

    try:
        resp = (get or session.get)(
            url,
            params=params,
            headers={"Authorization": token},
            stream=True,
            verify=settings.verify_ssl,
        )
    except requests.RequestException as exc:
        raise InfraError(f"cannot reach {at}: {exc.__class__.__name__}") from None
    if resp.status_code == 404:
        raise BadInputError(f"workflow {name} not found on {at}")
    if resp.status_code in (401, 403):
        raise BadInputError(f"{at} refused ARGO_TOKEN ({resp.status_code})")
    if resp.status_code >= 400:
        raise InfraError(f"{at} answered {resp.status_code} to the log request")
    try:
        for raw in resp.iter_lines():
            if not raw or len(raw) > MAX_LINE:
                continue
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            result = doc.get("result") if isinstance(doc, dict) else None
            if not isinstance(result, dict):
                continue
            pod = str(result.get("podName") or "")
            if step is not None and step not in pod:
                continue
            for line in str(result.get("content") or "").splitlines():
                yield pod, line
    except requests.RequestException as exc:
        raise InfraError(f"lost {at} while reading logs: {exc.__class__.__name__}") from None
