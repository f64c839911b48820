"""The run's podSets: its nodes grouped by the capacity each is rented under, as Kueue
charges them.

The run's Workload (burst/admission/kueue_workload.py) reserves quota per podSet, and Kueue
gives each podSet its own flavor (kubernetes-sigs/kueue v0.17.0,
pkg/scheduler/flavorassigner/flavorassigner.go): ``assignFlavors`` puts each podSet in a
group of its own (unless a topology request names a ``podSetGroupName``, which burst's do
not), ``findFlavorForPodSets`` matches the flavors against that podSet's own nodeSelector
(``flavorSelector``, on the resource group's label keys) and tolerations, and the quota
check counts what the earlier podSets took of the same flavor (``assignmentUsage``). Every
podSet is admitted or none is: one Workload, one admission.

A run whose nodes are all of one capacity is one podSet, :data:`TRAIN`. An AWS spot run with
an on-demand floor rents two node groups (terraform/modules/aws-gpu-nodegroup): ``nodes -
floor`` spot nodes (``burst/capacity: spot``) and ``floor`` on-demand nodes
(``burst/capacity: on_demand``). Its train pods select neither group (they may land on
either), but its Workload reserves each group's GPUs under that group's flavor: podSet
:data:`TRAIN` the spot nodes under the spot flavor, podSet :data:`FLOOR` the floor under the
on-demand flavor. So each flavor's quota counts the GPUs the team rents of that capacity at
once. The hybrid stacks (gcp, azure, nebius) label every node of such a run
``spot_with_floor``: one podSet under that flavor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from burst.admission.coverage import RunPlacement
from burst.admission.kueue_objects import profile_for
from burst.documents.plan import Candidate
from burst.errors import BadInputError
from burst.spec import BurstJob, node_count

#: The podSet of the run's train pods (all of them, or a floor run's spot nodes').
TRAIN: Final = "train"
#: The podSet of an AWS spot run's on-demand floor.
FLOOR: Final = "floor"
#: Off: the engines tier's real Kueue v0.17.0 admitted none of the two-podSet Workloads
#: (``QuotaReserved`` False, "couldn't assign flavors to pod set train", every other flavor
#: "doesn't match node affinity", nothing said of the spot flavor it matches), so a floor run
#: would wait in its queue until BURST_KUEUE_WAIT_S. Until that is understood, a floor run is
#: one podSet whose selector names no capacity, admitted under the spot flavor (all its GPUs
#: charged to spot), as tests/cluster/test_kueue_admission.py has seen the real Kueue do.
SPLIT_FLOOR: Final = False


@dataclass(frozen=True)
class PodSetShare:
    """``count`` of the run's nodes (one train pod each), rented as ``placement`` says (its
    ``capacity``: these nodes' ``burst/capacity``); ``split``: one part of a floor run."""

    name: str
    count: int
    placement: RunPlacement
    split: bool = False

    @property
    def gpus(self) -> int:
        """The GPUs this podSet reserves: its train pods' requests."""
        return self.count * (self.placement.pod_gpus or 1)

    def refusal(self, why: str) -> str:
        """A flavor refusal for this podSet, naming the part when it is a floor run's."""
        if not self.split:
            return why
        return (
            f"podSet {self.name} ({self.count} {self.placement.capacity} node(s) of a "
            f"spot_with_floor run): {why}"
        )


def run_pod_sets(job: BurstJob, candidate: Candidate) -> list[PodSetShare]:
    """The podSets of ``candidate``'s Workload, in order: one, or a floor run's spot nodes
    then its on-demand floor. A floor run on AWS without a floor of 1 to ``nodes - 1``
    nodes (its stack refuses one) is bad input: its floor cannot be reserved."""
    placement = RunPlacement.of(candidate, job)
    nodes = node_count(job, candidate.to_json())
    profile = profile_for(placement.provider)
    groups = profile.flavor_capacities(placement.capacity) if profile else (placement.capacity,)
    if len(groups) == 1:
        return [PodSetShare(TRAIN, nodes, placement)]
    floor = int(candidate.floor_nodes or 0)
    if not 0 < floor < nodes:
        raise BadInputError(
            f"candidate {candidate.provider}/{candidate.region} spot_with_floor: floor_nodes "
            f"must be 1 to {nodes - 1} of its {nodes} node(s) (got {floor}): its on-demand "
            "floor cannot be reserved or rented",
            where="plan",
        )
    if not SPLIT_FLOOR:
        return [PodSetShare(TRAIN, nodes, placement)]
    counts = {"spot": (TRAIN, nodes - floor), "on_demand": (FLOOR, floor)}
    shares = []
    for capacity in groups:
        name, count = counts[capacity]
        shares.append(PodSetShare(name, count, replace(placement, capacity=capacity), True))
    return shares
