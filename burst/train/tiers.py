"""The train step's memory tiers (``training.checkpoint.memory_tiers``, docs/checkpoints.md
"Tiers"): one peer memory server per node, and which of them each rank's checkpoint manager
writes to and reads from.

* **Where the servers come from.** Locally (``burst run``; torchrun on one machine) the train
  step starts one server process per node of ``training.nodes`` (``burst.checkpoint.peer``,
  on loopback: separate processes with their own memory) and stops them with the step
  (``local_servers``); addresses already given in ``BURST_PEER_ADDRESSES`` (servers that
  outlive the step: a test's, an operator's) are used as they are. In a gang pod each node's
  server is the pod's ``peer`` sidecar (burst/pipelines/gang.py), found at its pod's DNS name
  (Volcano's per-job headless Service: ``VC_MASTER_HOSTS``, ``VC_WORKER_HOSTS``) and
  ``BURST_PEER_PORT`` (``gang_addresses``). The ranks read the list, node order, from
  ``BURST_PEER_ADDRESSES``.
* **Which server holds what** (``rank_tiers``): rank r of node n = r // (ranks per node)
  writes to its own node's server (``local``), then to the next node's, n+1 mod N
  (``peer``: another node, hence another failure domain where the node group spans several).
  With one node there is no peer: the local tier only (a restarted trainer on the same node
  reads it; a lost node loses it), and the store takes every save.
* **How often the store** (``store_every``): the spec's number, or ``auto``: the plan's
  per-tier Young/Daly (``burst.plan.interval.tier_intervals``: the running candidate's
  ``store_every``), 1 with one node or without a plan.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from burst.documents.plan import PlanDocument
from burst.documents.provision import ProvisionDocument
from burst.errors import BadInputError
from burst.settings import current
from burst.spec import BurstJob

log = logging.getLogger(__name__)

#: the port of a gang pod's peer sidecar (burst/pipelines/gang.py)
SIDECAR_PORT = 7070


@dataclass(frozen=True)
class RankTiers:
    """One rank's memory tiers: its own (``local``, ``peers``) and every rank's, for a
    sharded restore that reads each rank's part (``CheckpointManager(rank_tiers=)``)."""

    local: str
    peers: list[str]
    every_rank: list[list[tuple[str, str]]]
    store_every: int


def rank_tiers(addresses: list[str], world: int) -> list[list[tuple[str, str]]]:
    """Each rank's memory tiers (name, ``HOST:PORT``), fastest first: its node's server,
    then the next node's (ring). ``world`` ranks spread evenly over ``len(addresses)``
    nodes, in node order."""
    nodes = len(addresses)
    if nodes < 1 or world % nodes:
        raise BadInputError(
            f"{world} rank(s) do not spread evenly over {nodes} peer memory server(s) "
            f"({','.join(addresses) or 'none'})",
            where="BURST_PEER_ADDRESSES",
        )
    per_node = world // nodes
    out: list[list[tuple[str, str]]] = []
    for rank in range(world):
        node = rank // per_node
        tiers = [("local", addresses[node])]
        if nodes > 1:
            tiers.append(("peer", addresses[(node + 1) % nodes]))
        out.append(tiers)
    return out


def store_every(
    job: BurstJob, plan: PlanDocument | None, infra: ProvisionDocument | None, nodes: int
) -> int:
    """Every how many saves also go to the store (see the module's docstring)."""
    chosen = job.training.checkpoint.memory_tiers.store_every
    if isinstance(chosen, int):
        return chosen
    if nodes < 2:
        return 1
    from burst.train.schedule import running_candidate

    candidate = running_candidate(plan, infra)
    every = candidate.store_every if candidate is not None else None
    return max(1, int(every)) if every else 1


def for_rank(
    job: BurstJob,
    rank: int,
    world: int,
    plan: PlanDocument | None = None,
    infra: ProvisionDocument | None = None,
    addresses: list[str] | None = None,
) -> RankTiers | None:
    """This rank's memory tiers, on ``addresses`` (default ``BURST_PEER_ADDRESSES``); None
    when the spec does not enable them or the train step started no server (logged)."""
    if not job.training.checkpoint.memory_tiers.enabled:
        return None
    if addresses is None:
        text = current().peer_addresses
        addresses = [a.strip() for a in text.split(",") if a.strip()]
    if not addresses:
        log.warning(
            "checkpoint.memory_tiers: no peer memory server was started for this rank "
            "(BURST_PEER_ADDRESSES is empty): checkpoints go to the store only"
        )
        return None
    every = rank_tiers(addresses, world)
    mine = every[rank]
    return RankTiers(
        local=mine[0][1],
        peers=[address for _, address in mine[1:]],
        every_rank=every,
        store_every=store_every(job, plan, infra, len(addresses)),
    )


def gang_addresses(env: Mapping[str, str]) -> list[str]:
    """A gang's peer sidecars, node order: Volcano's host lists (master, then the workers by
    index: the order of RANK) and the sidecar's port."""
    port = current().peer_port or SIDECAR_PORT
    hosts = [
        h.strip()
        for name in ("VC_MASTER_HOSTS", "VC_WORKER_HOSTS")
        for h in env.get(name, "").split(",")
        if h.strip()
    ]
    return [f"{h}:{port}" for h in hosts]


@contextlib.contextmanager
def local_servers(job: BurstJob, env: dict[str, str]) -> Iterator[list[str]]:
    """Within: one peer memory server per node of ``job`` on this machine, their addresses
    in ``env["BURST_PEER_ADDRESSES"]`` (nothing when the spec does not enable the tiers, or
    the step's own environment names servers already). The servers are stopped on the way out."""
    tiers = job.training.checkpoint.memory_tiers
    given = [a.strip() for a in current().peer_addresses.split(",") if a.strip()]
    if not tiers.enabled or given:
        yield given
        return
    from burst.checkpoint.peer import parse_size, start_peer

    nodes = job.training.nodes
    procs: list[subprocess.Popen[str]] = []
    try:
        addresses = []
        for _ in range(nodes):
            proc, address = start_peer(parse_size(tiers.capacity), with_parent=True)
            procs.append(proc)
            addresses.append(address)
        if nodes == 1:
            log.info(
                "checkpoint.memory_tiers: one node, so no peer on another node: the local "
                "memory tier only (%s), and the store takes every save",
                addresses[0],
            )
        else:
            log.info("checkpoint.memory_tiers: a peer memory server per node: %s", addresses)
        env["BURST_PEER_ADDRESSES"] = ",".join(addresses)
        yield addresses
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
