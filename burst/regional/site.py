"""What the machine a regional pod runs on gives it, when that machine is not a cluster's.

On a cluster, a region's ``train`` and ``aggregate`` steps find its region's store in the
stack's outputs (``checkpoint_uri``), the exchange store under the spec's
``storage.checkpoint_uri``, and the links are real (bytes logged, nothing slept). On one
machine the local runner (``burst.runner.regions``) stands in for each region's cloud: it
gives every pod of a region ``BURST_REGION_SITE``, a JSON file (this model) naming that
region's store (an S3 server on loopback with keys of its own), the exchange store, the link
emulator's log and time scale, where the roles keep their state and results, and the named
fault points armed for a test. The ``train`` and ``aggregate`` steps put them into the role
configs they derive (``burst.plan.regional.role_config``). A container step reads this file;
it never imports the runner.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from burst.errors import BadInputError
from burst.settings import current


@dataclass(frozen=True)
class RegionSite:
    region: str
    region_store: dict[str, Any]  # the region's own store (a store spec; s3: a profile)
    exchange_store: dict[str, Any]  # the exchange store (in the aggregation region)
    link_log: str  # every transfer between regions is logged here
    time_scale: float  # emulated link seconds are slept times this
    state_root: str  # a role's state: <state_root>/<role>-<region> (kept across restarts)
    results_dir: str  # a role's result: <results_dir>/<role>-<region>.json
    wait_limit_s: float = 600.0
    faults: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> fault points

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @staticmethod
    def load(path: Path) -> RegionSite:
        try:
            return RegionSite(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as exc:
            raise BadInputError(f"BURST_REGION_SITE {path}: unreadable ({exc})") from None


def given_site() -> RegionSite | None:
    """The site ``BURST_REGION_SITE`` names (a local run), or None (a cluster)."""
    path = current().region_site
    return RegionSite.load(path) if path is not None else None
