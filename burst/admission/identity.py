"""The workflow's team and priority are the spec's (checked by provision, before renting).

On a cluster the team's quota, LocalQueue and cost labels, and the train pods'
WorkloadPriorityClass, come from the workflow's ``team`` and ``priority`` parameters
(``burst.pipelines.common``), while provision admits the run against the spec's
``team`` and ``priority`` (the ledger, the Kueue flavor gate). ``burst submit`` and ``burst
run`` pass the spec's; a hand-made ``argo submit -p team=...`` could name another, and the run
would then be admitted under one team and queue, be charged, and preempt, under the other.
So provision refuses such a run (exit 2, bad input, nothing rented), naming both values.
The templates hand the parameters to provision as ``BURST_WORKFLOW_TEAM`` and
``BURST_WORKFLOW_PRIORITY``; where they are unset (a step run by hand) there is nothing to
compare.
"""

from __future__ import annotations

from burst.errors import BadInputError
from burst.settings import current
from burst.spec import BurstJob


def check_workflow_identity(job: BurstJob) -> None:
    """Refuse (``BadInputError``) a workflow whose team or priority parameter is not the
    spec's."""
    s = current()
    pairs = (
        ("team", s.workflow_team, job.team, "team"),
        ("priority", s.workflow_priority, str(job.priority), "priority"),
    )
    for param, given, spec_value, field in pairs:
        if given is not None and given != spec_value:
            raise BadInputError(
                f"the workflow's {param} parameter is {given!r} but the spec's {field} is "
                f"{spec_value!r}: its train pods would queue, be charged and preempt as "
                f"{given!r} while admitted as {spec_value!r}; submit with -p {param}="
                f"{spec_value} (burst submit passes the spec's); nothing was rented"
            )
