"""The run report as one self-contained HTML page: inline CSS and inline SVG charts (a
timeline of steps, preemptions and checkpoints; a cost breakdown against the plan and the
budget). No script, no external asset, no network: it opens from a CI artifact or an email."""

from __future__ import annotations

import html
import math
from typing import Any

from burst.obs.report_text import human_bytes, human_seconds, usd
from burst.obs.run_view import RunView

STATUS_COLOURS = {
    "succeeded": "#2e9d57",
    "failed": "#d64541",
    "skipped": "#b8bec6",
    "preempted": "#f0a030",
    "cancelled": "#b07a3a",
    "budget-stopped": "#c4608f",
    "lost": "#5b4a6e",
    "running": "#3f7fd1",
    "reaped": "#7f6a93",
    "unknown": "#8a8f98",
}
COST_COLOURS = {
    "compute": "#3f7fd1",
    "egress": "#f0a030",
    "storage": "#8e5bc4",
    "orchestration": "#2aa198",
    "total": "#5b6f8a",
}
EXTRA_COLOURS = ("#c0392b", "#16a085", "#7f8c8d", "#d35400")
PREEMPT = "#d64541"
CHECKPOINT = "#1f5fae"

CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px;color:#1d232b;
background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}
.badge{display:inline-block;padding:2px 10px;border-radius:10px;color:#fff;font-size:13px;
vertical-align:middle}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:10px;
max-width:980px}
.card{border:1px solid #dde2e8;border-radius:6px;padding:8px 12px}
.card .k{font-size:12px;color:#5b6472}.card .v{font-size:18px;font-weight:600}
table{border-collapse:collapse;font-size:13px}td,th{border-bottom:1px solid #e4e8ee;
padding:4px 10px;text-align:left}th{color:#5b6472;font-weight:600}
.muted{color:#5b6472;font-size:12px}.warn{color:#b03a2e;font-weight:600}
svg text{font-family:inherit}
"""


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _nice_step(span: float, target: int = 6) -> float:
    raw = max(span, 1e-9) / target
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def timeline_svg(view: RunView, width: int = 960) -> str:
    steps = view.steps
    longest = max((len(s.name) + (5 if s.attempts > 1 else 0) for s in steps), default=10)
    left, right, top, row = min(max(120, 16 + 7 * longest), 340), 20, 30, 30
    height = top + row * max(len(steps), 1) + 50
    span = max(view.wall_seconds, max((e.at or 0.0 for e in view.events), default=0.0), 1e-3)
    plot_w = width - left - right

    def x(t: float) -> float:
        return left + plot_w * max(0.0, min(t, span)) / span

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="timeline" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="timeline of steps, preemptions and checkpoints">'
    ]
    step = _nice_step(span)
    t = 0.0
    axis_y = top + row * max(len(steps), 1) + 6
    while t <= span + 1e-9:
        out.append(
            f'<line x1="{x(t):.1f}" y1="{top - 6}" x2="{x(t):.1f}" y2="{axis_y}" stroke="#eceff3"/>'
        )
        out.append(
            f'<text x="{x(t):.1f}" y="{axis_y + 16}" font-size="11" fill="#5b6472" '
            f'text-anchor="middle">{_e(human_seconds(t))}</text>'
        )
        t += step
    rows: dict[str, float] = {}
    for i, s in enumerate(steps):
        y = top + i * row
        rows.setdefault(s.name, y)
        colour = STATUS_COLOURS.get(s.status, STATUS_COLOURS["unknown"])
        label = s.name + (f" ({s.attempts}x)" if s.attempts > 1 else "")
        out.append(
            f'<text x="{left - 8}" y="{y + 18}" font-size="13" text-anchor="end">{_e(label)}</text>'
        )
        start = s.start or 0.0
        end = s.end if s.end is not None else start + s.seconds
        w = max(x(end) - x(start), 2.0)
        out.append(
            f'<rect class="step" data-step="{_e(s.name)}" x="{x(start):.1f}" '
            f'y="{y + 5}" width="{w:.1f}" height="{row - 10}" rx="3" fill="{colour}">'
            f"<title>{_e(s.name)}: {_e(s.status)}, {_e(human_seconds(s.seconds))}"
            f"</title></rect>"
        )
    bottom = top + row * max(len(steps), 1)
    train_y = rows.get("train")
    if train_y is not None:
        for a in view.attempts:
            if a.start is None or a.number <= 1:
                continue
            ax = x(a.start)
            out.append(
                f'<g class="attempt"><line x1="{ax:.1f}" y1="{train_y + 2}" '
                f'x2="{ax:.1f}" y2="{train_y + row - 2}" stroke="#1d232b" '
                f'stroke-width="2"/><text x="{ax + 3:.1f}" y="{train_y + row - 1}" '
                f'font-size="10" fill="#1d232b">attempt {a.number}</text>'
                f"<title>attempt {a.number}: {_e(a.outcome)}</title></g>"
            )
    for e in view.events:
        if e.at is None:
            continue
        ex = x(e.at)
        if e.kind == "preemption":
            out.append(
                f'<g class="preemption"><line x1="{ex:.1f}" y1="{top - 8}" x2="{ex:.1f}" '
                f'y2="{bottom}" stroke="{PREEMPT}" stroke-width="2" '
                f'stroke-dasharray="5,3"/><path d="M{ex - 6:.1f},{top - 16} '
                f'L{ex + 6:.1f},{top - 16} L{ex:.1f},{top - 6} Z" fill="{PREEMPT}">'
                f"<title>preemption {_e(e.detail)}</title></path></g>"
            )
        elif e.kind == "checkpoint":
            cy = rows.get(e.step or "train", rows.get("train", top)) + row / 2
            out.append(
                f'<path class="checkpoint" d="M{ex:.1f},{cy - 7:.1f} L{ex + 6:.1f},{cy:.1f} '
                f'L{ex:.1f},{cy + 7:.1f} L{ex - 6:.1f},{cy:.1f} Z" fill="{CHECKPOINT}" '
                f'stroke="#fff" stroke-width="1"><title>checkpoint {_e(e.detail)}'
                "</title></path>"
            )
    out.append("</svg>")
    return "".join(out)


def cost_svg(view: RunView, width: int = 960) -> str:
    actual, expected, budget = view.cost, view.expected_cost, view.budget_usd
    bars = [
        (label, parts)
        for label, parts in (("estimate", actual), ("plan expected", expected))
        if parts
    ]
    left, right, top, row = 120, 30, 20, 40
    height = top + row * max(len(bars), 1) + 70
    totals = [sum(p.values()) for _, p in bars]
    scale_max = max([*totals, 1e-9])
    budget_on_scale = budget is not None and budget <= 3 * scale_max
    if budget_on_scale and budget is not None:
        scale_max = max(scale_max, budget)
    plot_w = width - left - right

    def x(v: float) -> float:
        return left + plot_w * v / scale_max

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="cost" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        'aria-label="cost breakdown">'
    ]
    if not bars:
        out.append(
            f'<text x="{left}" y="{top + 20}" font-size="13" fill="#5b6472">'
            "no cost recorded for this run</text></svg>"
        )
        return "".join(out)
    components: list[str] = []
    for _, parts in bars:
        components += [k for k in parts if k not in components]
    colours = {
        c: COST_COLOURS.get(c, EXTRA_COLOURS[i % len(EXTRA_COLOURS)])
        for i, c in enumerate(components)
    }
    for i, (label, parts) in enumerate(bars):
        y = top + i * row
        out.append(
            f'<text x="{left - 8}" y="{y + 22}" font-size="13" text-anchor="end">{_e(label)}</text>'
        )
        acc = 0.0
        for comp, v in parts.items():
            w = max(x(acc + v) - x(acc), 1.0 if v > 0 else 0.0)
            out.append(
                f'<rect class="cost-part" data-component="{_e(comp)}" x="{x(acc):.1f}" '
                f'y="{y + 6}" width="{w:.1f}" height="{row - 14}" fill="{colours[comp]}">'
                f"<title>{_e(comp)}: {_e(usd(v))}</title></rect>"
            )
            acc += v
        out.append(
            f'<text x="{min(x(acc) + 6, width - right - 60):.1f}" y="{y + 22}" '
            f'font-size="12">{_e(usd(acc))}</text>'
        )
    bottom = top + row * len(bars)
    if budget is not None:
        if budget_on_scale:
            bx = x(budget)
            out.append(
                f'<line id="budget" x1="{bx:.1f}" y1="{top - 4}" x2="{bx:.1f}" '
                f'y2="{bottom + 4}" stroke="#b03a2e" stroke-width="2" '
                'stroke-dasharray="6,4"/>'
            )
            out.append(
                f'<text x="{bx:.1f}" y="{bottom + 18}" font-size="12" fill="#b03a2e" '
                f'text-anchor="middle">budget {_e(usd(budget))}</text>'
            )
        else:
            share = ", ".join(
                f"{label} {100 * t / budget:.2f} % of it"
                for (label, _), t in zip(bars, totals, strict=True)
            )
            out.append(
                f'<text x="{left}" y="{bottom + 18}" font-size="12" fill="#5b6472">'
                f"budget {_e(usd(budget))}, off this scale ({_e(share)})</text>"
            )
    lx = left
    for comp in components:
        out.append(
            f'<rect x="{lx}" y="{bottom + 34}" width="12" height="12" '
            f'fill="{colours[comp]}"/><text x="{lx + 16}" y="{bottom + 44}" '
            f'font-size="12">{_e(comp)}</text>'
        )
        lx += 30 + 8 * len(comp)
    out.append("</svg>")
    return "".join(out)


def loss_svg(points: list[tuple[float, float]], x_label: str, width: int = 480) -> str:
    """A loss curve: ``(x, loss)`` points as a polyline with dots, axes labelled."""
    height, left, right, top, bottom = 200, 56, 16, 14, 36
    pts = [(float(a), float(b)) for a, b in points if math.isfinite(b)]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="loss" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="loss by {_e(x_label)}">'
    ]
    if not pts:
        out.append(
            f'<text x="{left}" y="{height / 2:.0f}" font-size="12" fill="#5b6472">'
            "no loss recorded</text></svg>"
        )
        return "".join(out)
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1e-9 + abs(y0) * 0.1
    pw, ph = width - left - right, height - top - bottom

    def sx(v: float) -> float:
        return left + pw * (v - x0) / (x1 - x0)

    def sy(v: float) -> float:
        return top + ph * (1 - (v - y0) / (y1 - y0))

    out.append(
        f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#9aa3ae"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#9aa3ae"/>'
        f'<text x="{left - 6}" y="{top + 4}" font-size="11" text-anchor="end">{y1:.3g}</text>'
        f'<text x="{left - 6}" y="{top + ph}" font-size="11" text-anchor="end">{y0:.3g}</text>'
        f'<text x="{left}" y="{height - 18}" font-size="11">{x0:g}</text>'
        f'<text x="{left + pw}" y="{height - 18}" font-size="11" text-anchor="end">{x1:g}</text>'
        f'<text x="{left + pw / 2:.0f}" y="{height - 4}" font-size="11" text-anchor="middle" '
        f'fill="#5b6472">{_e(x_label)}</text>'
    )
    path = " ".join(f"{sx(a):.1f},{sy(b):.1f}" for a, b in pts)
    out.append(f'<polyline points="{path}" fill="none" stroke="{CHECKPOINT}" stroke-width="2"/>')
    out += [
        f'<circle cx="{sx(a):.1f}" cy="{sy(b):.1f}" r="3" fill="{CHECKPOINT}">'
        f"<title>{_e(x_label)} {a:g}: loss {b:.4g}</title></circle>"
        for a, b in pts
    ]
    out.append("</svg>")
    return "".join(out)


def _loss(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def regional_html(r: dict[str, Any] | None) -> str:
    """A regional-sync run's section: regions, rounds, loss by round, bytes crossing."""
    if not r:
        return ""
    rows = "".join(
        f"<tr><td>{_e(x['round'])}</td><td>{_e(', '.join(x['accepted']) or '-')}</td>"
        f"<td>{_e(', '.join(x['dropped']) or '-')}</td><td>{_e(', '.join(x['late']) or '-')}</td>"
        f"<td>{_e(_loss(x['loss']))}</td>"
        f"<td>{_e('-' if x['bytes_crossing'] is None else human_bytes(x['bytes_crossing']))}</td>"
        "</tr>"
        for x in r["rounds"]
    )
    curve = loss_svg(
        [(x["round"], x["loss"]) for x in r["rounds"] if x["loss"] is not None], "round"
    )
    links = (
        "cross-region bytes not measured"
        if r["bytes_crossing"] is None
        else f"cross-region {human_bytes(r['bytes_crossing'])}, egress {usd(r['egress_usd'])}"
    )
    return (
        '<h2 id="regional">Regional sync</h2>'
        f'<p class="muted">{_e(len(r["regions"]))} regions ({_e(", ".join(r["regions"]))}), '
        f"aggregation in {_e(r['aggregation_region'])}, H = {_e(r['local_steps'] or '-')} "
        f"local steps, codec {_e(r['codec'])}; rounds {_e(r['rounds_completed'])}/"
        f"{_e(r['rounds_planned'] or '-')}; {_e(links)}; "
        f"torn down: {_e(', '.join(r['torn_down']) or 'none')}"
        f"</p>{curve}<table><tr><th>round</th><th>accepted</th><th>dropped</th><th>late</th>"
        f"<th>loss</th><th>bytes crossing</th></tr>{rows}</table>"
    )


def _secs(v: float | None) -> str:
    return "" if v is None else f"{v:.3g} s"


def first_screen_html(o: dict[str, Any]) -> str:
    """Where, why there, law, from what, loss, preemptions and cost: the first screen."""
    rows: list[tuple[str, str]] = []
    w = o.get("where")
    if w:
        rows.append(
            (
                "where",
                f"{w['provider']}/{w['region']} {w['capacity']}, {w['nodes']} x {w['instance']} "
                f"({w['gpus']} x {w['gpu_type']}), {w['ranks']} rank(s)"
                + (" [emulated on this machine]" if w["emulated"] else ""),
            )
        )
    why = o.get("why")
    if why and why.get("note"):
        rows.append(("why there", why["note"]))
    elif why:
        text = f"rank {why['rank']} of {why['candidates']} by {why['objective']}"
        if why["runner_up"]:
            text += f"; next: {why['runner_up']}"
        text += "".join(f"; left out: {e}" for e in why["excluded"][:2])
        rows.append(("why there", text))
    law = o.get("law")
    if law:
        rows.append(
            (
                "law",
                f"{law['verdict']}; rules {', '.join(law['rules']) or 'none'}; sign-offs "
                f"{', '.join(law['sign_offs']) or 'none'}",
            )
        )
    src = o["source"]
    rows.append(
        (
            "from",
            f"image {src.get('image_digest') or '?'} (signed with {src.get('signed_with') or '?'})"
            f"; spec {str(src.get('spec_sha256') or '?')[:12]}; {src['code_version']}",
        )
    )
    c = o["cost"]
    if c["planned_usd"] is not None or c["actual_usd"] is not None:
        planned = "?" if c["planned_usd"] is None else usd(c["planned_usd"])
        actual = "?" if c["actual_usd"] is None else usd(c["actual_usd"])
        rows.append(("cost", f"planned {planned}, actual {actual}. {c['note'] or ''}".strip()))
    if o["throughput_steps_per_s"]:
        rows.append(("throughput", f"{o['throughput_steps_per_s']:.4g} steps/s"))
    table = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    attempts = "".join(
        f"<tr><td>{_e(a['attempt'])}</td><td>{_e(a['outcome'])}</td>"
        f"<td>{_e('' if a['ended_at_step'] is None else a['ended_at_step'])}</td>"
        f"<td>{_e(_secs(a['notice_to_exit_s']))}</td>"
        f"<td>{_e('' if a['restart_s'] is None else human_seconds(a['restart_s']))}</td>"
        f"<td>{_e('' if a['lost_steps'] is None else a['lost_steps'])}</td></tr>"
        for a in o["attempts"]
    )
    curve = loss_svg([(p["step"], p["loss"]) for p in o["loss"]], o.get("loss_by", "step"))
    attempts_html = (
        "<div><h2>Train attempts</h2><table><tr><th>#</th><th>outcome</th><th>last step</th>"
        f"<th>notice to exit</th><th>restart</th><th>lost steps</th></tr>{attempts}</table></div>"
        if attempts
        else ""
    )
    return (
        f'<table id="first-screen">{table}</table>'
        f'<div style="display:flex;gap:24px;align-items:flex-start"><div><h2>Loss</h2>{curve}'
        f"</div>{attempts_html}</div>"
    )


def _card(k: str, v: str, cls: str = "") -> str:
    return f'<div class="card"><div class="k">{_e(k)}</div><div class="v {cls}">{_e(v)}</div></div>'


def render_html(view: RunView) -> str:
    s = view.summary()
    colour = STATUS_COLOURS.get(s["status"], STATUS_COLOURS["unknown"])
    cost_total = s["cost_total_usd"]
    leaks = s["resources_remaining"]
    cards = [
        _card("wall time", human_seconds(s["wall_seconds"])),
        _card("GPU-hours billed", "n/a" if s["gpu_hours"] is None else f"{s['gpu_hours']:.3f}"),
        _card("cost estimate", "n/a" if cost_total is None else usd(cost_total)),
        _card("budget", "n/a" if s["budget_usd"] is None else usd(s["budget_usd"])),
        _card("preemptions", str(s["preemptions"])),
        _card("checkpoints", "n/a" if s["checkpoints"] is None else str(s["checkpoints"])),
        _card("egress", human_bytes(sum(s["egress_bytes"].values()))),
        _card(
            "resources left", "unknown" if leaks is None else str(leaks), "warn" if leaks else ""
        ),
    ]
    from burst.supplychain.provenance import step_images

    images, no_image = step_images(view.report)  # what each step ran in (issue 46)
    step_rows = "".join(
        f"<tr><td>{_e(st['name'])}</td><td>{_e(st['status'])}</td>"
        f"<td>{_e(human_seconds(st['seconds']))}</td>"
        f"<td>{_e('' if st['exit_code'] is None else st['exit_code'])}</td>"
        f"<td>{_e(st['attempts'])}</td><td>{_e(images.get(st['name'], ''))}</td></tr>"
        for st in s["steps"]
    )
    untimed = [e for e in view.events if e.at is None]
    notes = []
    if s.get("ending"):  # how the run ended, in the words of every command (burst.endings)
        end = s["ending"]
        notes.append(f"{end['name']} (exit {end['exit_code']}): {end['wording']}")
        if end.get("hint"):
            notes.append(f"next: {end['hint']}")
    if untimed:
        kinds = sorted({e.kind for e in untimed})
        notes.append(
            f"{len(untimed)} event(s) without a recorded time ({', '.join(kinds)}) "
            "are not on the timeline."
        )
    if s["timeline_source"] == "sequential":
        notes.append(
            "Steps are laid out one after another from their durations (no start times recorded)."
        )
    notes += s["warnings"]
    egress_rows = "".join(
        f"<tr><td>{_e(k)}</td><td>{_e(human_bytes(v))}</td></tr>"
        for k, v in sorted(s["egress_bytes"].items())
    )
    facts = [
        ("final step", s["final_step"]),
        ("final weights sha256", s["final_weights_sha256"]),
        ("terraform state", s["terraform_state"]),
        ("provision attempts", s["provision_attempts"]),
        ("team", s["team"]),
        ("GPUs", f"{s['gpu_count']} x {s['gpu_type']}" if s["gpu_count"] else None),
    ]
    fact_rows = "".join(
        f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts if v not in (None, "")
    )
    failure = s["failure"]
    fail_html = ""
    if isinstance(failure, dict) and failure.get("step"):
        fail_html = (
            f'<p class="warn">failed at {_e(failure["step"])} '
            f"(exit {_e(failure.get('exit_code'))}) {_e(failure.get('message') or '')}"
            "</p>"
        )
    legend = (
        f'<span style="color:{PREEMPT}">&#9660; preemption</span> &nbsp; '
        f'<span style="color:{CHECKPOINT}">&#9670; checkpoint</span> &nbsp; '
        + " &nbsp; ".join(
            f'<span style="color:{c}">&#9632; {_e(k)}</span>'
            for k, c in STATUS_COLOURS.items()
            if k in {st["status"] for st in s["steps"]}
        )
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>burst run {_e(s['run_id'])}</title><style>{CSS}</style></head><body>"
        f'<h1>burst run {_e(s["run_id"])} <span class="badge" id="status" '
        f'style="background:{colour}">{_e(s["status"])}</span></h1>'
        f'<div class="muted">{_e(s["name"] or "")}</div>{fail_html}'
        + first_screen_html(s["overview"])
        + f'<div class="grid">{"".join(cards)}</div>'
        f"<h2>Timeline</h2>{timeline_svg(view)}<div class='muted'>{legend}</div>"
        + "".join(f"<div class='muted'>{_e(n)}</div>" for n in notes)
        + regional_html(s.get("regional"))
        + f"<h2>Cost</h2>{cost_svg(view)}"
        + "<h2>Steps</h2><table><tr><th>step</th><th>status</th><th>time</th><th>exit</th>"
        f"<th>attempts</th><th>image</th></tr>{step_rows}</table>"
        + (f"<div class='muted'>{_e(no_image)}</div>" if no_image else "")
        + (
            f"<h2>Egress</h2><table><tr><th>regions</th><th>bytes</th></tr>{egress_rows}</table>"
            if egress_rows
            else ""
        )
        + f"<h2>Facts</h2><table>{fact_rows}</table>"
        + "</body></html>\n"
    )
