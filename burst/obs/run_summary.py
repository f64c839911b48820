"""What ``burst run`` says when a run ends (and ``burst resume``, ``make demo``): how it ended,
where it ran, under which law, from which image, the loss, what it cost, and the commands
that come next. Built from the same run view as ``burst report`` (``burst.obs.run_view``),
so the two never disagree; the ending's words are ``burst.endings``'."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from burst.endings import ENDINGS, describe, hint, run_ref
from burst.obs.run_view import RunView
from burst.supplychain.provenance import train_ran


def _where(o: dict[str, Any]) -> str:
    w = o.get("where")
    if not w:
        return "where: not recorded (no candidate was provisioned)"
    emu = " [emulated on this machine]" if w["emulated"] else ""
    return (
        f"where: {w['provider']}/{w['region']} {w['capacity']}, {w['nodes']} x {w['instance']} "
        f"({w['gpus']} x {w['gpu_type']}){emu}"
    )


def _law(o: dict[str, Any]) -> str:
    law = o.get("law")
    if not law:
        return "law: no preflight verdict recorded"
    rules = ", ".join(law["rules"]) or "none"
    signed = ", ".join(law["sign_offs"]) or "none"
    return f"law: preflight {law['verdict']} (rules {rules}; sign-offs {signed})"


def _image(o: dict[str, Any]) -> str:
    src = o.get("source") or {}
    if not src.get("image_digest"):
        return "image: not verified (verify-image did not run)"
    name = f"{src['image']}@" if src.get("image") else ""
    return f"image: {name}{src['image_digest']} (signed with {src.get('signed_with') or '?'})"


def _loss(o: dict[str, Any]) -> str:
    points = o.get("loss") or []
    by = o.get("loss_by", "step")
    if not points:
        return "loss: not recorded"
    first, last = points[0], points[-1]
    if first is last:
        return f"loss: {last['loss']:.4g} at {by} {last['step']}"
    return (
        f"loss: {first['loss']:.4g} at {by} {first['step']} -> {last['loss']:.4g} at {by} "
        f"{last['step']}"
    )


def _cost(s: dict[str, Any]) -> str:
    c = s["overview"]["cost"]
    actual = "not recorded" if c["actual_usd"] is None else f"${c['actual_usd']:,.2f}"
    text = f"cost: {actual}"
    if c["planned_usd"] is not None:
        text += f" (planned ${c['planned_usd']:,.2f})"
    if s.get("budget_usd"):
        text += f" of a ${s['budget_usd']:,.2f} budget"
    return text + (" [emulated hardware, priced at the plan's rate]" if c["emulated"] else "")


def summary_lines(view: RunView, runs_root: Path | None = None) -> list[str]:
    """The lines after the steps: the ending, where, law, image, loss, cost, what was kept,
    the failure when there is one, and the next commands (``burst report RUN`` first)."""
    s = view.summary()
    o = s["overview"]
    ending = view.ending
    lines = [
        f"run {view.run_id}: "
        + (describe(ending, view.exit_code) if ending is not None else view.status),
        _where(o),
        _law(o),
        _image(o) + train_ran(view.report),  # what train ran in (issue 46)
        _loss(o),
        _cost(s),
        f"checkpoints {s['checkpoints'] if s['checkpoints'] is not None else '-'}  final step "
        f"{s['final_step'] if s['final_step'] is not None else '-'}  resources remaining "
        f"{s['resources_remaining'] if s['resources_remaining'] is not None else '?'}",
    ]
    if s.get("final_weights_sha256"):
        lines.append(f"final weights sha256 {s['final_weights_sha256']}")
    failure = s.get("failure")
    if ending is not None and isinstance(failure, dict) and failure.get("step"):
        msg = f": {failure['message']}" if failure.get("message") else ""
        lines.append(
            f"{ENDINGS[ending].at} {failure['step']} (exit {failure.get('exit_code')}){msg}"
        )
    lines.append(f"report: {view.dir / 'report.json'}")
    lines.append(f"next: burst report {run_ref(view.run_id, runs_root)}")
    then = hint(ending, view.run_id, runs_root) if ending is not None else None
    if then:
        lines.append(f"then: {then}")
    return lines
