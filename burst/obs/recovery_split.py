"""Where a restart's time goes: every restart of a run split into its terms, from recorded
timestamps only (issue 44, "the recovery split, measured").

A restart is an attempt of the train step that ended (a notice, a lost node, a kill) and the
next attempt, which resumed. Its gap runs from the notice the old attempt received (or, for an
attempt that died without closing its record, from its placement's end: when the node was lost
is not recorded) to the next attempt's first training step (the ``train.first_step`` event,
logged as that step begins). The gap is cut at these recorded moments, each term the time
between two of them:

============  ==========================================================================
term          from .. to (where each moment is recorded)
============  ==========================================================================
detect        notice received (the attempt record's ``notice.received_at``) .. burst acted
              on it at the next step boundary (the ``preemption`` event of the train log)
save          .. the emergency save's manifest committed (``emergency_save.committed_at``)
teardown      .. the old placement's end (the report's train attempt: start + seconds)
provision     .. the next placement's start: the requeue (the retry's wait, and a
              provision step where the requeue placed the train step elsewhere)
pull          image pull and container start: 0 for in-process pods (the local runner
              without containers); otherwise not recorded apart, and inside ``startup``
startup       .. the train process up (interpreter, imports, the step's setup: the
              ``preemption watchers`` line, the loop's first act)
restore       .. the checkpoint restored (``resumed from the full checkpoint``): the model
              and engine built (on a cold process that includes importing torch) and the
              checkpoint read
first_step    .. the first training step begins (``train.first_step``)
============  ==========================================================================

A moment that is not recorded makes its term ``None`` with the reason (never a guess); its
time falls into the next term whose end is known, which says so, so the known terms always
add up to the gap. Log times are truncated to the millisecond: a moment up to
``ROUNDING_S`` before the previous one is taken as equal to it.

Pure: reads the run directory (``report.json``, ``train-attempts.jsonl``, ``logs/train.log``)
and imports nothing above ``burst.obs``.
"""

from __future__ import annotations

import json
import logging
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from burst.documents import ATTEMPTS_FILE, DocumentError, TrainAttempt, parse_document
from burst.errors import BadInputError, BurstError
from burst.inputs import read_bytes
from burst.obs import events as ev
from burst.obs.metrics import RunMetrics, metrics_file
from burst.obs.run_files import LOG_MAX_BYTES, epoch_seconds, read_json

log = logging.getLogger(__name__)

TERMS = (
    "detect",
    "save",
    "teardown",
    "provision",
    "pull",
    "startup",
    "restore",
    "first_step",
)
ROUNDING_S = 0.01  # log times are truncated to the millisecond; allow a little more
WATCHERS_LINE = "preemption watchers"
RESTORED_LINE = "resumed from the full checkpoint"
IN_PROCESS = "in-process"


@dataclass(frozen=True)
class Term:
    name: str
    seconds: float | None
    why: str = ""  # how it was measured, or why it is not known


@dataclass(frozen=True)
class Restart:
    from_attempt: int
    to_attempt: int
    recovery_source: str | None
    gap_from: str  # "notice" or "placement end"
    gap_s: float | None
    terms: list[Term] = field(default_factory=list)
    why: str = ""  # why the gap is unknown

    def term(self, name: str) -> Term:
        return next(t for t in self.terms if t.name == name)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["terms"] = {t.name: {"seconds": t.seconds, "why": t.why} for t in self.terms}
        return d


@dataclass(frozen=True)
class _Pod:
    start: float
    end: float


def _log_records(path: Path) -> list[dict[str, Any]]:
    """The JSON-line records of a step log, each with its time as ``_t``, in file order."""
    try:
        text = read_bytes(path, what="step log", max_bytes=LOG_MAX_BYTES).decode(
            "utf-8", errors="replace"
        )
    except BadInputError:
        return []
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(rec, dict) and (t := epoch_seconds(rec.get("ts"))) is not None:
            rec["_t"] = t
            out.append(rec)
    return out


def _attempts(path: Path) -> list[TrainAttempt]:
    """The run directory's attempt records (``train-attempts.jsonl``), oldest first; a line
    that is not one is skipped (``burst.attempt_records`` is their reader above ``obs``:
    this is the same file, read for its times only)."""
    try:
        text = read_bytes(path, what="attempt records", max_bytes=LOG_MAX_BYTES).decode(
            "utf-8", errors="replace"
        )
    except BadInputError:
        return []
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(parse_document(TrainAttempt, json.loads(line), f"{path}:{n}"))
        except (ValueError, RecursionError, DocumentError):
            log.warning("%s:%d: not an attempt record, skipped", path, n)
    return out


def _train_pods(report: dict[str, Any]) -> list[_Pod] | None:
    """The train step's placements (the runner's pods), in order; None when not recorded."""
    for step in report.get("steps") or []:
        if isinstance(step, dict) and step.get("name") == "train":
            pods = []
            for a in step.get("attempt_details") or []:
                start = epoch_seconds(a.get("started_at")) if isinstance(a, dict) else None
                secs = a.get("seconds") if isinstance(a, dict) else None
                if start is None or not isinstance(secs, int | float):
                    return None
                pods.append(_Pod(start, start + float(secs)))
            return pods
    return None


def _in_process(report: dict[str, Any]) -> bool:
    for step in report.get("steps") or []:
        if isinstance(step, dict) and step.get("name") == "train":
            return step.get("image_provenance") == IN_PROCESS
    return False


def _first(
    recs: list[dict[str, Any]],
    pod: _Pod,
    *,
    event: str | None = None,
    text: str | None = None,
    after: float | None = None,
) -> float | None:
    """The time of the first record in the pod's window matching the event (or the start
    of the message), at or after ``after``."""
    lo = pod.start - ROUNDING_S if after is None else max(pod.start, after) - ROUNDING_S
    for r in recs:
        t = r["_t"]
        if t < lo or t > pod.end + ROUNDING_S:
            continue
        if event is not None and r.get("event") != event:
            continue
        if text is not None and not str(r.get("msg", "")).startswith(text):
            continue
        return float(t)
    return None


def _split(
    moments: list[tuple[str, float | None, str]], names: tuple[str, ...]
) -> tuple[list[Term], float | None]:
    """Terms from consecutive moments; ``moments[0]`` is the gap's start. An unknown moment
    (or one out of order by more than the rounding) folds its time into the next known term."""
    start = moments[0][1]
    assert start is not None
    prev = start
    terms: list[Term] = []
    folded: list[str] = []
    for (_moment, t, why), term_name in zip(moments[1:], names, strict=True):
        if t is not None and t < prev - ROUNDING_S:
            why = f"recorded {prev - t:.3f} s before the previous moment: not used ({why})"
            t = None
        if t is None:
            terms.append(Term(term_name, None, why + "; its time is in the next known term"))
            folded.append(term_name)
            continue
        t = max(t, prev)
        note = why + (f" (includes {', '.join(folded)})" if folded else "")
        terms.append(Term(term_name, round(t - prev, 3), note))
        prev, folded = t, []
    end = moments[-1][1]
    return terms, (round(end - start, 3) if end is not None else None)


def _restart(
    k: int,
    old: TrainAttempt,
    new: TrainAttempt,
    pods: list[_Pod] | None,
    recs: list[dict[str, Any]],
    in_process: bool,
) -> Restart:
    src = old.recovery_source  # as recorded (None: the record was left open, or it finished)
    old_n, new_n = old.attempt or k + 1, new.attempt or k + 2
    old_pod = pods[k] if pods is not None else None
    new_pod = pods[k + 1] if pods is not None else None
    no_pod = "the runner's placements (report.json) are not recorded for this attempt"
    notice = old.notice.received_at if old.notice is not None else None
    save = old.emergency_save
    Moment = tuple[float | None, str]
    detect: Moment
    saved: Moment
    t0: float | None
    if notice is not None:
        gap_from, t0 = "notice", notice
        acted = _first(recs, old_pod, event=ev.PREEMPTION, after=notice) if old_pod else None
        detect = (acted, "notice received .. the preemption event (next step boundary)")
        if acted is None:
            detect = (None, "no preemption event in the train log after the notice")
        if save is not None and save.committed and save.committed_at is not None:
            saved = (save.committed_at, f"emergency save ({save.tier}) committed")
        else:
            saved = (None, "no emergency save committed")
    else:
        gap_from = "placement end"
        t0 = old_pod.end if old_pod is not None else None
        detect = saved = (t0, "")
    if t0 is None:
        return Restart(old_n, new_n, src, gap_from, None, [], no_pod)
    end_why = "old placement ended (runner)"
    pulled: Moment
    old_end: Moment = (old_pod.end, end_why) if old_pod else (None, no_pod)
    requeue = "requeue: retry wait and new placement"
    new_start: Moment = (new_pod.start, requeue) if new_pod else (None, no_pod)
    if in_process and new_pod is not None:
        pulled = (new_pod.start, "in-process pod: no image pull or container start")
    else:
        pulled = (None, "image pull and container start not recorded apart")
    ready: Moment = (
        _first(recs, new_pod, text=WATCHERS_LINE) if new_pod else None,
        "train process up: interpreter, imports, step setup",
    )
    first = _first(recs, new_pod, event=ev.FIRST_TRAIN_STEP) if new_pod else None
    restored_t = _first(recs, new_pod, text=RESTORED_LINE) if new_pod else None
    if restored_t is None and not new.resumed_from:
        restored: Moment = (ready[0], "nothing to restore (started at step 0)")
    else:
        restored = (restored_t, "model and engine built, checkpoint restored")
    moments: list[tuple[str, float | None, str]] = [
        ("start", t0, ""),
        ("acted", *detect),
        ("saved", *saved),
        ("old_end", *old_end),
        ("new_start", *new_start),
        ("pulled", *pulled),
        ("ready", *(ready if ready[0] is not None else (None, "no 'preemption watchers' line"))),
        ("restored", *restored),
        ("first", first, "restore done .. first training step begins"),
    ]
    if first is None:
        return Restart(
            old_n, new_n, src, gap_from, None, [], "no train.first_step event in the next attempt"
        )
    terms, gap = _split(moments, TERMS)
    if notice is None:  # no notice: when the node was lost, and so detect, is not recorded
        lost = "no notice: when the attempt was lost is not recorded (the gap starts at its end)"
        unknown = {"detect": lost, "save": "no emergency save (the attempt ended without a notice)"}
        terms = [Term(t.name, None, unknown[t.name]) if t.name in unknown else t for t in terms]
    return Restart(old_n, new_n, src, gap_from, gap, terms)


def split_run(run_dir: Path, steps: list[dict[str, Any]] | None = None) -> list[Restart]:
    """Every restart of the run in ``run_dir``, split into its terms (oldest first).
    ``steps``: the runner's step records (``report.json``'s ``steps``; read from it when not
    given)."""
    records = _attempts(run_dir / ATTEMPTS_FILE)
    if len(records) < 2:
        return []
    if steps is not None:
        report: dict[str, Any] = {"steps": steps}
    else:
        warnings: list[str] = []
        report = read_json(run_dir / "report.json", warnings)
        for w in warnings:
            log.warning("%s", w)
    pods = _train_pods(report)
    if pods is not None and len(pods) != len(records):
        log.warning(
            "%s: %d train placements for %d attempt records: placements not used",
            run_dir,
            len(pods),
            len(records),
        )
        pods = None
    recs = _log_records(run_dir / "logs" / "train.log")
    in_process = _in_process(report)
    return [
        _restart(k, records[k], records[k + 1], pods, recs, in_process)
        for k in range(len(records) - 1)
    ]


def medians(restarts: list[Restart]) -> dict[str, float | None]:
    """The median of each term (and of the gap) over the restarts where it is known."""
    out: dict[str, float | None] = {}
    for name in TERMS:
        known = [
            s for r in restarts for t in r.terms if t.name == name and (s := t.seconds) is not None
        ]
        out[name] = round(statistics.median(known), 3) if known else None
    gaps = [r.gap_s for r in restarts if r.gap_s is not None]
    out["gap"] = round(statistics.median(gaps), 3) if gaps else None
    return out


def summary(run_dir: Path, steps: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The split as the report and the benchmark show it: each restart and the medians."""
    restarts = split_run(run_dir, steps)
    return {
        "restarts": [r.as_dict() for r in restarts],
        "median_s": medians(restarts) if restarts else {},
    }


METRICS_STEP = "recovery"  # metrics/recovery.prom


def export_metrics(
    run_dir: Path, run_id: str, steps: list[dict[str, Any]], spec: Path | None = None
) -> None:
    """Write the split's medians as Prometheus gauges to ``metrics/recovery.prom`` (a run
    without restarts writes none), labelled from the run's ``spec`` when it reads. Never
    fails the caller (the report): what cannot be read or written is logged."""
    try:
        restarts = split_run(run_dir, steps)
        if not restarts:
            return
        job = None
        if spec is not None:
            from burst.spec import load_spec  # (the spec's labels; obs needs nothing else of it)

            try:
                job = load_spec(spec)
            except BurstError as exc:
                log.warning("%s: recovery split metrics without the spec's labels (%s)", spec, exc)
        metrics = RunMetrics.for_job(run_id, job) if job is not None else RunMetrics(run_id=run_id)
        metrics.set_recovery_split(len(restarts), medians(restarts))
        metrics.write_textfile(metrics_file(run_dir, METRICS_STEP))
    except (OSError, BurstError) as exc:
        log.warning("%s: recovery split metrics not written (%s)", run_dir, exc)
