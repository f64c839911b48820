"""regional-aggregator: the aggregator of a regional-sync run (burst.regional.aggregator).

``python -m burst.steps.regional_aggregator --config FILE`` (a ``RoleConfig``, JSON). Exit 0 when
the last round's global checkpoint is committed; 4 when no usable delta arrives in time.
"""

from __future__ import annotations

import sys

from burst.regional.aggregator import run_aggregator
from burst.regional.runtime import role_main

if __name__ == "__main__":
    sys.exit(role_main("aggregator", None, run_aggregator))
