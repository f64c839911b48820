"""The run report as a few lines of text for a terminal (``burst report RUN``)."""

from __future__ import annotations

from typing import Any

from burst.documents.report import AttemptSummary
from burst.endings import ENDINGS, describe, ending_of
from burst.obs.run_view import RunView


def human_seconds(s: float) -> str:
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(round(s), 60)
    if m < 60:
        return f"{m}m {sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m"


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"  # pragma: no cover - unreachable, the loop returns at TB


def usd(v: float) -> str:
    return f"${v:,.2f}" if v < 1000 else f"${v:,.0f}"


def _usd_or_unknown(v: Any) -> str:
    return usd(float(v)) if isinstance(v, int | float) and not isinstance(v, bool) else "?"


def back_to_spot_line(a: AttemptSummary) -> str | None:
    """One line for an attempt on an on-demand fallback that weighed going back to spot:
    moved or stayed, the predicted saving against the move's cost and margin."""
    if a.back_to_spot is None:
        return None
    d = a.back_to_spot.model_dump()
    c = d.get("candidate")
    where = "spot"
    if isinstance(c, dict) and c.get("region"):
        where = f"{c.get('provider') or '?'}/{c['region']} spot"
    moved = d.get("decision") == "move"
    probes = d.get("probes")
    verb = (
        f"moved to {where}"
        if moved
        else f"stayed on demand ({where} probed"
        + (f", {probes} probes)" if isinstance(probes, int) and probes > 1 else ")")
    )
    at = d.get("at_step")
    saving, cost, margin = (d.get(k) for k in ("saving_usd", "move_cost_usd", "margin_usd"))
    line = (
        f"back to spot: attempt {a.attempt if a.attempt is not None else '?'} {verb}"
        + (f" at step {at}" if isinstance(at, int) else "")
        + f": saving {_usd_or_unknown(saving)} against move cost {_usd_or_unknown(cost)}"
        + f" + margin {_usd_or_unknown(margin)}"
    )
    if (
        not moved
        and isinstance(saving, int | float)
        and isinstance(cost, int | float)
        and isinstance(margin, int | float)
        and saving > cost + margin
    ):  # it stayed for another reason: no capacity, or spot would never finish
        line += f" ({d.get('reason') or 'stayed'})"
    return line


def _regional_lines(r: dict[str, Any] | None) -> list[str]:
    """A regional-sync run: its regions, rounds, loss per round and what crossed regions."""
    if not r:
        return []
    losses = [x["loss"] for x in r["rounds"]]
    shown = ", ".join("-" if v is None else f"{v:.4g}" for v in losses)
    links = (
        "cross-region bytes not measured (no link log)"
        if r["bytes_crossing"] is None
        else f"cross-region bytes {human_bytes(r['bytes_crossing'])} "
        f"({human_bytes(r['bytes_per_round'])} a round), shard bytes crossing "
        f"{r['shard_bytes_crossing']}, egress {usd(r['egress_usd'])}"
    )
    return [
        f"regional-sync: {len(r['regions'])} regions ({', '.join(r['regions'])}), "
        f"aggregation in {r['aggregation_region']}, H = {r['local_steps'] or '-'} local steps, "
        f"codec {r['codec']}",
        f"rounds {r['rounds_completed']}/{r['rounds_planned'] or '-'}; "
        f"loss by round: {shown or '-'}",
        links,
        f"regions torn down: {', '.join(r['torn_down']) or 'none'} "
        f"(of {', '.join(r['provisioned']) or 'none'} provisioned)",
    ]


def render_text(view: RunView) -> str:
    s = view.summary()
    lines: list[str] = []
    who = ", ".join(x for x in (s["name"], s["team"] and f"team {s['team']}") if x)
    lines.append(f"run {s['run_id']}: {s['status'].upper()}" + (f" ({who})" if who else ""))
    ending = ending_of(s["status"])
    if ending is not None:  # how it ended, in the words every command uses (burst.endings)
        lines.append(describe(ending, s["exit_code"]))
    gpu = ""
    if s["gpu_hours"] is not None:
        kind = f"{s['gpu_count']} x {s['gpu_type']}" if s["gpu_type"] else f"{s['gpu_count']} GPU"
        gpu = f", GPU-hours {s['gpu_hours']:.3f} ({kind}; {s.get('gpu_hours_basis') or 'billed'})"
    lines.append(f"wall time {human_seconds(s['wall_seconds'])}{gpu}")
    from burst.obs.overview import overview_lines

    lines += overview_lines(s["overview"])

    cost = s["cost_usd"]
    budget = s["budget_usd"]
    if cost:
        total = s["cost_total_usd"]
        parts = ", ".join(f"{k} {usd(v)}" for k, v in cost.items()) if len(cost) > 1 else ""
        text = f"cost estimate {usd(total)}" + (f" ({parts})" if parts else "")
        if s["cost_source"] not in (None, "report", "metrics"):
            text += f" [{s['cost_source']}]"
    else:
        total = None
        text = "cost estimate: not recorded"
    if budget:
        text += f"; budget {usd(budget)}"
        if total is not None:
            pct = 100 * total / budget
            text += f" ({pct:.3f} % used)" if pct < 1 else f" ({pct:.1f} % used)"
            if total > budget:
                text += " OVER BUDGET"
    if s["expected_cost_usd"]:
        text += f"; plan expected {usd(sum(s['expected_cost_usd'].values()))}"
    lines.append(text)
    if s.get("ledger"):
        res, done = s["ledger"]["reservation"], s["ledger"]["settlement"]
        text = (
            f"team {res['team']} ledger: reserved {usd(res['reserved_usd'])} "
            f"({res['reserved_gpu_hours']:.1f} GPU-hours: GPUs rented x budget.max_hours)"
        )
        if res.get("requeues"):
            text += f", kept over {res['requeues']} requeue(s)"
        text += (
            "; not settled yet"
            if done is None
            else f"; settled {usd(done['actual_usd'])} "
            f"({done['actual_gpu_hours']:.3f} GPU-hours billed)"
        )
        lines.append(text)

    ck = "not recorded" if s["checkpoints"] is None else f"{s['checkpoints']} committed"
    if s["checkpoint_bytes"]:
        ck += (
            " ("
            + ", ".join(f"{t} {human_bytes(b)}" for t, b in sorted(s["checkpoint_bytes"].items()))
            + ")"
        )
    pa = (
        "" if s["provision_attempts"] is None else f", provision attempts {s['provision_attempts']}"
    )
    lines.append(f"preemptions {s['preemptions']}, checkpoints {ck}{pa}")
    sources = s.get("recovery_sources") or {}
    if sources:  # what ended the attempts the run recovered from: separate budgets
        ended = ", ".join(f"{k} {v}" for k, v in sorted(sources.items()))
        lines.append(f"attempts ended by: {ended}")
    if view.report is not None:  # on an on-demand fallback: back to spot, or not, and why
        lines += [x for a in view.report.attempts if (x := back_to_spot_line(a)) is not None]
    split = s.get("recovery_split") or {}
    if split:  # where a restart's time went (medians over the restarts)
        known = ", ".join(f"{k} {v:.1f}" for k, v in split.items() if v is not None)
        lines.append(f"restart split, median s: {known}")
    if s["egress_bytes"]:
        lines.append(
            "egress "
            + ", ".join(f"{k} {human_bytes(v)}" for k, v in sorted(s["egress_bytes"].items()))
        )
    else:
        lines.append("egress none recorded")
    leaks = s["resources_remaining"]
    if leaks is None:
        lines.append("leaks: unknown (no teardown result)")
    elif leaks == 0:
        lines.append("leaks: none (0 resources remaining)")
    else:
        lines.append(f"LEAKS: {leaks} resource(s) remaining: run `burst reap` and check the state")
    lines += _regional_lines(s.get("regional"))
    failure = s["failure"]
    if isinstance(failure, dict) and failure.get("step"):
        msg = f": {failure['message']}" if failure.get("message") else ""
        at = ENDINGS[ending].at if ending is not None else "failed at"
        lines.append(f"{at} {failure['step']} (exit {failure.get('exit_code')}){msg}")
    if s["steps"]:
        from burst.supplychain.provenance import step_images

        images, no_image = step_images(view.report)  # what each step ran in (issue 46)
        lines.append("steps:")
        width = max(len(st["name"]) for st in s["steps"])
        for st in s["steps"]:
            extra = []
            if st["exit_code"] not in (None, 0):
                extra.append(f"exit {st['exit_code']}")
            if st["attempts"] and st["attempts"] > 1:
                extra.append(f"{st['attempts']} attempts")
            tail = f"  ({', '.join(extra)})" if extra else ""
            tail += f"  image {images[st['name']]}" if st["name"] in images else ""
            lines.append(
                f"  {st['name']:<{width}}  {st['status']:<9}  "
                f"{human_seconds(st['seconds']):>8}{tail}"
            )
        if no_image:
            lines.append(no_image)
    for w in s["warnings"]:
        lines.append(f"note: {w}")
    then = (s.get("ending") or {}).get("hint")
    if then:
        lines.append(f"next: {then}")
    return "\n".join(lines) + "\n"
