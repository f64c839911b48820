"""The cost-versus-time chart of a plan (PNG, matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from burst.errors import BadInputError

MARKERS = {"spot": "o", "on_demand": "s"}


def write_chart(doc: dict[str, Any], path: str | Path) -> Path:
    """Plot every ranked candidate at (expected hours, expected cost) on log axes, with the
    budget and deadline lines; the first candidate is outlined, conservative prices are faded.
    Candidates at the same point share one label ("1,2"). Returns the path written.
    A path that cannot be written (missing or read-only directory, /proc, ...) raises
    ``BadInputError`` (exit 2) naming it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    out = Path(path)
    blocking = next((a for a in out.parents if a.exists() and not a.is_dir()), None)
    if blocking is not None:
        raise BadInputError(
            f"cannot write the chart ({blocking} is not a directory): choose another --chart FILE",
            where=str(out),
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(out, exc) from None
    cands = doc["candidates"]
    fig, ax = plt.subplots(figsize=(10, 5.5), dpi=100)
    try:
        groups: dict[tuple[float, float], list[str]] = {}
        for c in cands:
            x, y = max(c["expected_hours"], 1e-6), max(c["expected_cost_usd"], 1e-6)
            first = c.get("rank") == 1
            ax.scatter(
                x,
                y,
                marker=MARKERS.get(c["capacity"], "^"),
                s=110 if first else 50,
                edgecolors="black" if first else "none",
                linewidths=1.5,
                alpha=1.0 if c["price_basis"] == "catalog" else 0.45,
            )
            groups.setdefault((float(f"{x:.3g}"), float(f"{y:.3g}")), []).append(str(c["rank"]))
        for (x, y), ranks in groups.items():
            ax.annotate(
                ",".join(ranks), (x, y), fontsize=8, xytext=(6, 4), textcoords="offset points"
            )
        ax.axhline(
            doc["budget_usd"],
            color="red",
            linestyle="--",
            linewidth=1,
            label=f"budget ${doc['budget_usd']:,.0f}",
        )
        ax.axvline(
            doc["deadline_hours"],
            color="orange",
            linestyle=":",
            linewidth=1,
            label=f"deadline {doc['deadline_hours']:g} h",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            axis.set_major_formatter(plain)
            # label the minor ticks only when the axis spans less than a decade
            axis.set_minor_formatter(plain if hi / lo < 10 else NullFormatter())
        ax.tick_params(which="minor", labelsize=7)
        ax.set_xlabel("expected hours")
        ax.set_ylabel("expected cost (USD)")
        ax.set_title(
            f"burst plan: {doc['gpu_count']} x {doc['gpu_type']}, ranked by "
            f"{doc['objective']} (o spot, s on-demand; faded: conservative price)",
            fontsize=10,
        )
        legend = "\n".join(
            f"{c['rank']}. {c['provider']}/{c['region']} {c['capacity']} "
            f"${c['expected_cost_usd']:,.2f} {c['expected_hours']:.3g} h"
            for c in cands[:15]
        )
        ax.text(1.02, 1.0, legend, transform=ax.transAxes, fontsize=7, va="top", family="monospace")
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        try:
            fig.savefig(out, format="png", bbox_inches="tight")
        except OSError as exc:
            raise _unwritable(out, exc) from None
    finally:
        plt.close(fig)
    return out


def _unwritable(out: Path, exc: OSError) -> BadInputError:
    why = exc.strerror or exc.__class__.__name__
    return BadInputError(
        f"cannot write the chart ({why}): choose another --chart FILE", where=str(out)
    )
