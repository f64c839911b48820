"""The report's first screen (issue 29): where the run ran, why there, under which law, from
what, how it went and what it cost, each from the run directory's documents:

* where: the candidate provision got (``report.json`` ``candidate``, else
  ``docs/provision.json``), ranks from the report's ``world_size``;
* why there: ``docs/plan.json``: the candidate's rank among the ranked ones and what the
  planner left out (first reasons);
* law: the candidate's verdict and the rules of its reasons, the sign-offs that waived them
  (``waived_by``), the policy hash provision checked (``docs/provision.json``);
* from what: the image digest and signing key (``docs/verify-image.json``), the spec hash
  (``docs/plan.json``); the code version is the reader's (the run does not record it);
* how it went: loss by step (the train log's ``step N loss X`` lines, at checkpoints),
  throughput (final step / train seconds), preemptions with notice-to-exit, restart time and
  lost work from the attempt records;
* cost: planned against actual; on a local stack the hardware is emulated, and said so.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from burst import __version__, attempt_records
from burst.errors import BadInputError
from burst.inputs import read_bytes
from burst.obs.run_files import LOG_MAX_BYTES, read_json

if TYPE_CHECKING:
    from burst.documents import RunReport
    from burst.documents.regional import RegionalSection

log = logging.getLogger(__name__)


class _Span(Protocol):
    """An attempt of the train step on the timeline (seconds since the run started)."""

    @property
    def number(self) -> int: ...
    @property
    def start(self) -> float | None: ...
    @property
    def end(self) -> float | None: ...


class _Step(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def seconds(self) -> float: ...


class RunFacts(Protocol):
    """What the first screen reads of a run: ``burst.obs.run_view.RunView`` is one (and
    builds its summary's ``overview`` from this module, which therefore names no view)."""

    @property
    def dir(self) -> Path: ...
    @property
    def spec(self) -> dict[str, Any]: ...
    @property
    def report(self) -> RunReport | None: ...
    @property
    def regional(self) -> RegionalSection | None: ...
    @property
    def steps(self) -> Sequence[_Step]: ...
    @property
    def attempts(self) -> Sequence[_Span]: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def cost(self) -> dict[str, float]: ...


LOSS_LINE = re.compile(r"\bstep (\d+) loss ([0-9.eE+-]+)")
MAX_EXCLUDED = 4
WHERE_KEYS = (
    "provider", "region", "capacity", "instance", "nodes", "gpus", "gpu_type", "ranks", "emulated"
)  # fmt: skip


def _doc(view: RunFacts, step: str) -> dict[str, Any]:
    """A step's document as JSON, only when it is what that step writes: a document of the wrong
    shape (hand-edited, another version's, truncated) leaves its part of the first screen empty
    with a warning, never a crash of ``burst report`` / ``burst runs``."""
    from pydantic import ValidationError

    from burst.documents import STEP_DOCUMENTS

    path = view.dir / "docs" / f"{step}.json"
    doc = read_json(path, [])
    if not doc:
        return {}
    try:  # each step's own model (a regional run's preflight: its decision record)
        STEP_DOCUMENTS[step].model_validate(doc)
    except ValidationError as exc:
        log.warning("%s: not a %s document (%d problems); left out", path, step, exc.error_count())
        return {}
    return doc


def losses(view: RunFacts) -> list[tuple[int, float]]:
    """(step, loss) from the train log (JSON lines whose message says ``step N loss X``)."""
    path = view.dir / "logs" / "train.log"
    if not path.exists():
        return []
    try:
        text = read_bytes(path, what="step log", max_bytes=LOG_MAX_BYTES).decode(errors="replace")
    except BadInputError:
        return []
    out: dict[int, float] = {}
    for m in LOSS_LINE.finditer(text):
        try:
            out[int(m.group(1))] = float(m.group(2))
        except ValueError:
            continue
    return sorted(out.items())


def _regional_where(view: RunFacts) -> dict[str, Any] | None:
    """A regional-sync run: every region's verdict from the preflight record."""
    r = view.regional
    if r is None:
        return None
    pre = _doc(view, "preflight")
    decisions = [
        d
        for d in pre.get("decisions") or []
        if isinstance(d, dict) and d.get("region") in r.regions
    ]
    reasons = [x for d in decisions for x in d.get("reasons") or []]
    verdicts = sorted({str(d.get("verdict")) for d in decisions})
    return {
        "provider": ",".join(sorted({str(d.get("provider")) for d in decisions})) or "?",
        "region": ",".join(r.regions),
        "capacity": f"regional-sync, aggregation in {r.aggregation_region}",
        "instance": "a worker",
        "nodes": len(r.regions),
        "gpus": _int_or_none(_dig(view.spec, "compute", "gpu_count")),
        "gpu_type": _dig(view.spec, "compute", "gpu_type"),
        "ranks": len(r.regions),
        "emulated": r.terraform,
        "rank": None,
        "verdict": "/".join(verdicts) or None,
        "reasons": reasons,
        "expected_cost_usd": None,
    }


def _dig(d: Any, *keys: str) -> Any:
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _where(view: RunFacts, provision: dict[str, Any]) -> dict[str, Any] | None:
    if view.regional is not None:
        return _regional_where(view)
    cand = view.report.candidate.to_json() if view.report and view.report.candidate else None
    cand = cand or (provision.get("candidate") if isinstance(provision, dict) else None)
    if not cand:
        return None
    emulated = (provision.get("terraform") or {}).get("kind") == "local"
    return {
        "provider": cand.get("provider"),
        "region": cand.get("region"),
        "capacity": cand.get("capacity"),
        "instance": cand.get("instance"),
        "nodes": cand.get("nodes"),
        "gpus": cand.get("gpus"),
        "gpu_type": cand.get("gpu_type"),
        "ranks": view.report.world_size if view.report else None,
        "emulated": emulated,
        "rank": cand.get("rank"),
        "verdict": cand.get("verdict"),
        "reasons": cand.get("reasons") or [],
        "expected_cost_usd": cand.get("expected_cost_usd"),
    }


def _why(plan: dict[str, Any], where: dict[str, Any] | None) -> dict[str, Any] | None:
    cands = plan.get("candidates") or []
    if not cands:
        return None
    excluded = plan.get("excluded") or []
    return {
        "rank": (where or {}).get("rank"),
        "candidates": len(cands),
        "objective": plan.get("objective"),
        "runner_up": next(
            (
                f"{c['provider']}/{c['region']} {c['capacity']} ${c['expected_cost_usd']:,.2f}"
                for c in cands[1:2]
            ),
            None,
        ),
        "excluded": [
            f"{e['provider']}/{e['region']}{' ' + e['capacity'] if e.get('capacity') else ''}: "
            f"{e['reason']}"
            for e in excluded[:MAX_EXCLUDED]
        ],
        "excluded_total": len(excluded),
    }


def _regional_why(view: RunFacts) -> dict[str, Any] | None:
    r = view.regional
    if r is None:
        return None
    return {
        "rank": None,
        "candidates": None,
        "objective": None,
        "runner_up": None,
        "excluded": [],
        "excluded_total": 0,
        "note": f"regional-sync over the shards' regions ({', '.join(r.regions)}); H = "
        f"{r.local_steps or '-'} local steps ({r.local_steps_basis or 'the spec'})",
    }


def _law(where: dict[str, Any] | None, provision: dict[str, Any]) -> dict[str, Any] | None:
    if where is None:
        return None
    reasons = where["reasons"]
    return {
        "verdict": where["verdict"],
        "rules": sorted({str(r.get("rule")) for r in reasons if r.get("rule")}),
        "sign_offs": sorted({str(r["waived_by"]) for r in reasons if r.get("waived_by")}),
        "policy_sha256": (provision.get("decision") or {}).get("policy_sha256"),
    }


def _source(view: RunFacts, image: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    sig = image.get("signature") or {}
    return {
        "image_digest": image.get("digest"),
        "image": image.get("repository") or image.get("reference"),
        "signed_with": sig.get("key"),
        "spec_sha256": plan.get("spec_sha256"),
        "code_version": f"burst {__version__} (this report's reader; the run does not record it)",
    }


def _attempts(view: RunFacts) -> list[dict[str, Any]]:
    """Each train attempt: outcome, notice-to-exit, the restart gap to the next one, the work
    lost (steps between the preempted attempt's last step and where the next resumed)."""
    records = attempt_records.read_file(view.dir / attempt_records.FILE_NAME)
    spans = {a.number: a for a in view.attempts}
    reported = view.report.attempts if view.report else []
    measured = {a.attempt: a.notice_to_exit_s for a in reported}
    # the report's word for how an attempt ended wins (an attempt stopped by a cancel is
    # cancelled, not preempted: burst.obs.report)
    outcomes = {a.attempt: a.outcome for a in reported if a.outcome}
    out = []
    for i, rec in enumerate(records):
        n = rec.attempt or i + 1
        nxt = records[i + 1] if i + 1 < len(records) else None
        span, nspan = spans.get(n), spans.get(nxt.attempt or i + 2) if nxt else None
        restart = (
            nspan.start - span.end
            if span and nspan and span.end is not None and nspan.start is not None
            else None
        )
        lost = (
            max(rec.ended_at_step - nxt.resumed_from, 0)
            if nxt is not None and rec.ended_at_step is not None and nxt.resumed_from is not None
            else None
        )
        notice_to_exit = measured.get(n)
        if notice_to_exit is None and span and span.end is not None and rec.notice:
            got = rec.notice.received_at
            if got is not None and view.started_at is not None:
                notice_to_exit = span.end - (got - view.started_at)
        out.append(
            {
                "attempt": n,
                "outcome": outcomes.get(n)
                or rec.outcome
                or ("preempted" if rec.preempted else "unknown"),
                "ended_at_step": rec.ended_at_step,
                "resumed_from": rec.resumed_from,
                "restored_from_tier": rec.restored_from_tier,
                "notice": rec.notice.source if rec.notice else None,
                "notice_to_exit_s": None if notice_to_exit is None else round(notice_to_exit, 3),
                "restart_s": None if restart is None else round(restart, 3),
                "lost_steps": lost,
            }
        )
    return out


def overview(view: RunFacts) -> dict[str, Any]:
    """The first screen's facts as plain JSON (``summary()["overview"]``)."""
    plan, provision, image = _doc(view, "plan"), _doc(view, "provision"), _doc(view, "verify-image")
    where = _where(view, provision)
    points = losses(view)
    if view.regional is not None:  # the aggregator's loss, one point a round
        points = [(x.round, x.loss) for x in view.regional.rounds if x.loss is not None]
    train = next((s for s in view.steps if s.name == "train"), None)
    final = view.report.final_step if view.report else None
    throughput = (
        round(final / train.seconds, 4) if final and train is not None and train.seconds else None
    )
    cost = view.cost
    return {
        "where": None if where is None else {k: where[k] for k in WHERE_KEYS},
        "why": _regional_why(view) if view.regional is not None else _why(plan, where),
        "law": _law(where, provision),
        "source": _source(view, image, plan),
        "loss": [{"step": s, "loss": v} for s, v in points],
        "loss_by": "round" if view.regional is not None else "step",
        "throughput_steps_per_s": throughput,
        "attempts": _attempts(view),
        "cost": {
            "planned_usd": (where or {}).get("expected_cost_usd"),
            "actual_usd": round(sum(cost.values()), 4) if cost else None,
            "emulated": bool(where and where["emulated"]),
            "note": (
                f"emulated: the local stack stands in for {where['nodes']} x {where['instance']} "
                f"({where['gpus']} x {where['gpu_type']}) on this machine; the actual figure "
                "prices the emulated time at the plan's rate"
            )
            if where and where["emulated"]
            else None,
        },
    }


def overview_lines(o: dict[str, Any]) -> list[str]:
    """The first screen as text lines."""
    lines = []
    w = o.get("where")
    if w:
        emu = " [emulated here]" if w["emulated"] else ""
        lines.append(
            f"where: {w['provider']}/{w['region']} {w['capacity']}, {w['nodes']} x "
            f"{w['instance']} ({w['gpus']} x {w['gpu_type']}), {w['ranks'] or '?'} rank(s){emu}"
        )
    why = o.get("why")
    if why and why.get("note"):
        lines.append(f"why: {why['note']}")
    elif why:
        text = f"why: rank {why['rank']} of {why['candidates']} by {why['objective']}"
        if why["runner_up"]:
            text += f"; next: {why['runner_up']}"
        if why["excluded_total"]:
            text += f"; {why['excluded_total']} left out (first: {why['excluded'][0]})"
        lines.append(text)
    law = o.get("law")
    if law:
        lines.append(
            f"law: {law['verdict']}; rules {', '.join(law['rules']) or 'none'}; sign-offs "
            f"{', '.join(law['sign_offs']) or 'none'}"
        )
    src = o["source"]
    if src.get("image_digest") or src.get("spec_sha256"):
        lines.append(
            f"from: image {src.get('image_digest') or '?'} (signed with "
            f"{src.get('signed_with') or '?'}), spec {str(src.get('spec_sha256') or '?')[:12]}"
        )
    if o["loss"]:
        pts = ", ".join(f"{p['step']}: {p['loss']:.4g}" for p in o["loss"])
        lines.append(f"loss by {o.get('loss_by', 'step')}: {pts}")
    if o["throughput_steps_per_s"]:
        lines.append(f"throughput: {o['throughput_steps_per_s']:.4g} steps/s")
    for a in o["attempts"]:
        if a["outcome"] == "done" and a["attempt"] == 1:
            continue
        parts = [f"attempt {a['attempt']}: {a['outcome']}"]
        if a["ended_at_step"] is not None:
            parts.append(f"at step {a['ended_at_step']}")
        if a["notice_to_exit_s"] is not None:
            parts.append(f"notice to exit {a['notice_to_exit_s']:.3g} s")
        if a["restart_s"] is not None:
            parts.append(f"restart {a['restart_s']:.3g} s")
        if a["lost_steps"] is not None:
            parts.append(f"lost {a['lost_steps']} step(s)")
        if a["resumed_from"]:  # 0 or None: a fresh start
            tier = a.get("restored_from_tier")  # (memory tiers: local, peer or store)
            parts.append(f"resumed from {a['resumed_from']}" + (f" ({tier})" if tier else ""))
        lines.append(", ".join(parts))
    c = o["cost"]
    if c["planned_usd"] is not None or c["actual_usd"] is not None:
        planned = "?" if c["planned_usd"] is None else f"${c['planned_usd']:,.2f}"
        actual = "?" if c["actual_usd"] is None else f"${c['actual_usd']:,.2f}"
        lines.append(
            f"cost: planned {planned}, actual {actual}" + (" (emulated)" if c["emulated"] else "")
        )
        if c["note"]:
            lines.append(f"  {c['note']}")
    return lines
