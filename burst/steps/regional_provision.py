"""regional-provision: one region's branch of the burst-regional template (provision).

Runs with ``--run-id <workflow>-<region>`` (the region's stack id: the exit handler's
``teardown`` destroys the stack from that id alone) and ``BURST_REGION``. Places as
``provision`` does: the plan's candidates in this region through the same legal gate (exit 3
unless the preflight decision record allows this region for exactly this spec), ordered by the
spec's recovery strategy (``compute.recovery``), the region's share of the run's budget
(``budget.max_usd`` over the regions) admitted in the team ledger under the stack id before
anything is rented (exit 3 when the team has no room now: a region does not queue while
another region's stack is rented); applies the run's stack in this region
only (``burst.infra.provision.provision``); writes
the provision document (``--out``) and, beside it, the role configs the region's processes
read (``worker-config.json``; in the aggregation region also ``aggregator-config.json``):
the region's store (the stack's ``checkpoint_uri``, in that region), the exchange store (the spec's
``storage.checkpoint_uri`` under the workflow's run id, ``exchange/``), H from the plan's
regional section, the links of the run. On a cluster the links are real: bytes are logged,
nothing is slept (``time_scale`` 0). On one machine (``burst run``: the local runner executes
this template) the runner gives every pod of a region ``BURST_REGION_SITE``
(``burst.regional.site``): that region's store and the exchange store (S3 servers on
loopback with keys of their own), the link emulator's log and time scale, where the roles
keep their state; they go into the role configs instead (docs/regional.md "Local fidelity").
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from burst.admission.admit import admit
from burst.admission.ledger import ledger_url
from burst.admission.steps import run_ledger
from burst.documents import DecisionRecord, PlanDocument, ProvisionDocument, produce
from burst.documents.plan import Candidate
from burst.documents.provision import Admission
from burst.errors import BadInputError, InfraError
from burst.infra.provision import gate_candidates, provision
from burst.plan.regional import first_local_steps_for, local_steps_for, run_links
from burst.recovery import strategy_for
from burst.regional.runtime import RoleConfig, regional, rounds_for
from burst.regional.site import given_site
from burst.settings import current
from burst.stepio import StepContext, main
from burst.storage import open_store
from burst.storage.location import exchange_url

#: Where the role's own state and link log go in its pod (scratch: an emptyDir).
POD_SCRATCH = "/tmp/regional"


def run(ctx: StepContext) -> ProvisionDocument:
    job = ctx.spec
    rs = regional(job)
    region = current().region
    regions = list(rs.regions or [])
    if region not in regions:
        raise BadInputError(
            f"BURST_REGION {region!r} is not one of training.regional_sync.regions "
            f"({', '.join(regions)})"
        )
    provider = job.compute.providers[0] if job.compute.providers else "aws"
    decision = ctx.optional_input("decision", DecisionRecord)
    # the plan's priced candidates in this region (its capacities), else the bare region; the
    # legal gate first (exit 3), whatever else is missing
    given = ctx.optional_input("plan", PlanDocument)
    mine = [c for c in (given.candidates if given else []) if c.region == region]
    mine = [c for c in mine if c.provider == provider]
    allowed, refused = gate_candidates(
        decision, job, mine or [Candidate(provider=provider, region=region)]
    )
    plan = ctx.input("plan", PlanDocument)
    # as provision: the run's recovery strategy orders them (compute.recovery) ...
    strategy = strategy_for(job)
    placement = strategy.place(allowed, None, current().recovery_event)
    local_steps = plan.regional.local_steps if plan.regional else local_steps_for(job)[0]
    local_steps = min(local_steps, job.training.steps)
    # the plan's round schedule (the spec's first_local_steps, or the planner's pick)
    first = plan.regional.first_local_steps if plan.regional else first_local_steps_for(job)[0]
    ctx.fail_point("before")
    # ... and the region's share of the run's budget is reserved against the team's before
    # anything is rented there (exit 3 when over): the regions' stacks share budget.max_usd
    share = job.model_copy(
        update={
            "budget": job.budget.model_copy(update={"max_usd": job.budget.max_usd / len(regions)})
        }
    )
    # (not queued: a region waiting for room while another region's stack is rented would
    # pay for that one idle; a team without room now refuses the run)
    entry = admit(run_ledger(ctx.paths.root), share, ctx.run_id, placement.candidates)
    doc = provision(job, ctx.run_id, ctx.paths.terraform, placement.candidates, policy=strategy)
    if doc.candidate is None:  # provision() returns only once a candidate is applied
        raise InfraError("provision returned no candidate", where=ctx.run_id)
    doc = doc.model_copy(
        update={
            "refused": refused,
            "placement": len(placement.record.history),
            "admission": Admission.from_entry(entry, ledger_url(ctx.paths.root)),
            "recovery": strategy.placed(placement, doc.candidate, allowed),
        }
    )
    uri = doc.outputs.get("checkpoint_uri")
    if not isinstance(uri, str) or not uri:
        raise InfraError(f"the {region} stack gave no checkpoint_uri output", where=ctx.run_id)
    site = given_site()
    if site is not None and site.region != region:
        raise BadInputError(f"BURST_REGION_SITE is region {site.region}'s, not {region}'s")
    if site is None:
        workflow = ctx.run_id.removesuffix(f"-{region}")
        exchange = open_store(exchange_url(job.storage.checkpoint_uri, workflow)).spec()
        # the stack's bucket is the region's own (its stack id is this region's): as it is
        own = open_store(uri, **({"region": region} if uri.startswith("s3://") else {})).spec()
    else:  # one machine: the stores the runner stands up for this region
        exchange, own = site.exchange_store, site.region_store
    links = tuple(run_links(job, regions))
    agg = str(rs.aggregation_region)
    out_dir = ctx.out.parent if ctx.out is not None else ctx.paths.dir
    for role in ("worker", "aggregator") if region == agg else ("worker",):
        cfg = RoleConfig(
            spec=str(ctx.spec_path),
            role=role,
            region=region,
            aggregation_region=agg,
            regions=tuple(regions),
            local_steps=local_steps,
            rounds=rounds_for(job.training.steps, local_steps, first),
            first_local_steps=first,
            region_store=own if role == "worker" else None,
            exchange_store=exchange,
            links=links,
            link_log=f"{POD_SCRATCH}/links.jsonl",
            time_scale=0.0,
            state_dir=f"{POD_SCRATCH}/{role}",
            out=f"{POD_SCRATCH}/{role}-result.json",
            run_id=ctx.run_id.removesuffix(f"-{region}"),  # the run's (a worker's leases, metrics)
            # the run's directory (its driver heartbeat), beside this region's stack's
            run_dir=str(ctx.paths.root / ctx.run_id.removesuffix(f"-{region}")),
        )
        if site is not None:
            name = f"{role}-{region}"
            cfg = replace(
                cfg,
                link_log=site.link_log,
                time_scale=site.time_scale,
                state_dir=str(Path(site.state_root) / name),
                out=str(Path(site.results_dir) / f"{name}.json"),
                faults=site.faults.get(role),
                wait_limit_s=site.wait_limit_s,
            )
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / f"{role}-config.json").write_text(cfg.to_json())
    return produce(ProvisionDocument, doc)


if __name__ == "__main__":
    sys.exit(main("regional-provision", run))
