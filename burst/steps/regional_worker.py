"""regional-worker: one region's worker of a regional-sync run (burst.regional.worker).

``python -m burst.steps.regional_worker --config FILE`` (a ``RoleConfig``, JSON): the train loop
(``burst.train.loop``) with the regional hook. Exit 0 when the last round is done; 75 when
preempted (a notice: what fitted is saved; requeue); 4 when a store or the aggregator does not
answer in time; 3 while another live worker holds the region's trainer lease; 2 for a config
or shard that is wrong.
"""

from __future__ import annotations

import sys

from burst.regional.runtime import role_main
from burst.regional.worker import run_worker

if __name__ == "__main__":
    sys.exit(role_main("worker", None, run_worker))
