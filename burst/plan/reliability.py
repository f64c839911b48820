"""How often the job is pre-empted, and how often it checkpoints: computed once, here.

The planner prices each candidate with these figures and the trainer sizes its checkpoint
interval with the same ones (``burst.train.schedule``), so one name is one quantity:

* ``job MTBF`` (``mtbf_hours`` in the plan, ``mtbf_s`` in the train document): the mean time
  between pre-emptions of the *whole job*. Nodes are pre-empted independently, so it is the
  node MTBF divided by the *pre-emptible* nodes (all of them, less the on-demand floor of
  ``spot_with_floor``). The spec's ``compute.mtbf_hours`` is a job MTBF with every node
  pre-emptible (spot); under a floor it is scaled by nodes / pre-emptible nodes.
* ``young_daly_interval_s``: the raw Young/Daly interval ``sqrt(2 C M)``, everywhere.
* ``checkpoint_interval_s``: the interval used: the spec's ``interval_steps``, else Young/Daly
  clamped to the upload time and one step (``burst.plan.interval.choose_interval``).
"""

from __future__ import annotations

from dataclasses import dataclass

from burst.errors import BadInputError
from burst.plan.catalog import Catalog, Offer
from burst.plan.interval import choose_interval
from burst.plan.workload import Workload
from burst.spec import BurstJob


@dataclass(frozen=True)
class JobMtbf:
    """The whole job's mean time between pre-emptions and where it comes from."""

    seconds: float
    source: str

    @property
    def hours(self) -> float:
        return self.seconds / 3600.0


def preemption_kind(capacity: str) -> str:
    """What pre-empts a candidate's nodes: ``spot`` (spot and the spot part of a floor) or
    ``on_demand`` (hardware failures only)."""
    return "on_demand" if capacity == "on_demand" else "spot"


def preemptible_nodes(nodes: int, floor_nodes: int = 0) -> int:
    """The nodes a pre-emption can hit: all of them less an on-demand floor (at least one)."""
    return max(1, nodes - max(0, floor_nodes))


def node_mtbf_hours(
    cat: Catalog, offer: Offer | None, provider: str, capacity: str
) -> tuple[float, str]:
    """One node's MTBF on this capacity: on demand the catalog's assumption; spot the offer's,
    else the provider's, else the shortest known (conservative). ``BadInputError`` when the
    catalog knows no spot MTBF at all."""
    if preemption_kind(capacity) == "on_demand":
        f = cat.assumptions["on_demand_node_mtbf_hours"]
        return float(f.value), f"catalog assumptions.on_demand_node_mtbf_hours ({f.source})"
    fact = offer.fact("spot_node_mtbf_hours") if offer else None
    if fact is not None and fact.value is not None:
        return float(fact.value), f"catalog offer spot_node_mtbf_hours ({fact.source})"
    fact = cat.provider_fact(provider, "spot_node_mtbf_hours")
    if fact is not None and fact.value is not None:
        return float(
            fact.value
        ), f"catalog providers.{provider}.spot_node_mtbf_hours ({fact.source})"
    known = [
        float(f["spot_node_mtbf_hours"].value)
        for f in cat.providers.values()
        if f.get("spot_node_mtbf_hours") and f["spot_node_mtbf_hours"].value is not None
    ]
    if not known:
        raise BadInputError(
            f"no spot MTBF known for {provider}: add spot_node_mtbf_hours to a --catalog file",
            where="catalog",
        )
    return min(known), "unknown: the shortest known spot_node_mtbf_hours is used (conservative)"


def job_mtbf(
    job: BurstJob,
    capacity: str,
    nodes: int,
    floor_nodes: int = 0,
    node_mtbf: tuple[float, str] | None = None,
) -> JobMtbf:
    """The job's MTBF on ``capacity`` with ``nodes`` nodes, ``floor_nodes`` of them on demand.

    Spot with the spec's ``compute.mtbf_hours``: that job MTBF (every node pre-emptible)
    scaled to the pre-emptible nodes. Otherwise ``node_mtbf`` (hours, source: see
    ``node_mtbf_hours``) divided by the pre-emptible nodes."""
    spot_nodes = preemptible_nodes(nodes, floor_nodes)
    if preemption_kind(capacity) == "spot" and job.compute.mtbf_hours is not None:
        seconds = job.compute.mtbf_hours * 3600.0 * nodes / spot_nodes
        source = "spec compute.mtbf_hours (job)"
        if spot_nodes != nodes:
            source += f" x {nodes} node(s) / {spot_nodes} pre-emptible"
        return JobMtbf(seconds, source)
    if node_mtbf is None:
        raise ValueError("a node MTBF is needed without the spec's compute.mtbf_hours")
    hours, source = node_mtbf
    if hours <= 0:
        raise ValueError("node MTBF must be > 0")
    return JobMtbf(hours * 3600.0 / spot_nodes, f"{source} / {spot_nodes} node(s)")


def notice_s(cat: Catalog, offer: Offer | None, provider: str, capacity: str) -> float:
    """Seconds of notice before a pre-emption (on demand: none, hardware fails unannounced)."""
    if preemption_kind(capacity) == "on_demand":
        return 0.0
    fact = offer.fact("notice_s") if offer else None
    if fact is None or fact.value is None:
        fact = cat.provider_fact(provider, "notice_s")
    return float(fact.value) if fact is not None and fact.value is not None else 0.0


@dataclass(frozen=True)
class CheckpointInterval:
    """The interval a candidate checkpoints at, why, and the raw Young/Daly figure."""

    interval_s: float  # checkpoint_interval_s: the one used
    basis: str
    young_daly_s: float  # young_daly_interval_s: sqrt(2 C M), unclamped


def checkpoint_interval(job: BurstJob, work: Workload, mtbf: JobMtbf) -> CheckpointInterval:
    """The spec's ``interval_steps`` x the step time, else Young/Daly clamped to the upload
    time and one step; the raw Young/Daly value is reported either way."""
    choice = choose_interval(work.checkpoint_cost_s, mtbf.seconds, work.upload_s, work.step_s)
    steps = job.training.checkpoint.interval_steps
    if not isinstance(steps, int):
        return CheckpointInterval(choice.interval_s, choice.reason, choice.young_daly_s)
    interval_s = steps * work.step_s
    basis = f"spec training.checkpoint.interval_steps {steps} x {work.step_s:.3g} s a step"
    if interval_s < work.upload_s:
        basis += (
            f"; shorter than the {work.upload_s:.3g} s upload, so checkpoints wait for "
            "uploads (interval_steps: auto avoids it)"
        )
    return CheckpointInterval(interval_s, basis, choice.young_daly_s)
