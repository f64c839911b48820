"""The link emulator: what crossing from one region to another costs in time and money.

Every transfer between regions goes through ``LinkEmulator.transfer``, which looks up the link
for the pair (seed 002's table or the catalog's ``links``, as ``burst.plan.crossregion.Link``),
computes ``bytes / bandwidth + latency``, records the transfer (source, destination, kind,
bytes, seconds, USD) and waits that long, scaled by ``time_scale``, through the ``sleep`` it was
given. A transfer inside one region is recorded too, with zero seconds and zero cost, so a test
can inspect the log and show that no byte of a given kind (a data shard) ever left its region.

Foundation for the local run of issue 21 (one store per region on loopback); the stores are not
wired to it yet. Transfers are sequential here: callers that upload in parallel take the
maximum of the records' seconds, as ``burst.regional.estimates.round_traffic`` does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from burst.plan.cost import BYTES_PER_GB
from burst.plan.crossregion import Link

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TransferRecord:
    src: str
    dst: str
    kind: str  # what moved: "delta", "update", "shard", ...
    nbytes: int
    seconds: float
    usd: float

    @property
    def crosses(self) -> bool:
        return self.src != self.dst


def transfer_seconds(nbytes: int, link: Link) -> float:
    """``bytes / bandwidth + latency`` (decimal GB, as the rest of the planner)."""
    if link.gb_per_s <= 0:
        raise ValueError("link bandwidth must be > 0")
    return nbytes / BYTES_PER_GB / link.gb_per_s + link.latency_s


@dataclass
class LinkEmulator:
    """``links`` maps an unordered pair of regions to its link; a pair it does not know is an
    error (fail closed: an unknown link is never assumed fast or free)."""

    links: Mapping[frozenset[str], Link]
    sleep: Callable[[float], None] = time.sleep
    time_scale: float = 1.0
    records: list[TransferRecord] = field(default_factory=list)

    def link(self, src: str, dst: str) -> Link:
        try:
            return self.links[frozenset((src, dst))]
        except KeyError:
            raise ValueError(f"no link known between {src} and {dst}") from None

    def transfer(self, src: str, dst: str, nbytes: int, kind: str) -> TransferRecord:
        if nbytes < 0:
            raise ValueError("a transfer cannot move a negative number of bytes")
        if src == dst:
            rec = TransferRecord(src, dst, kind, nbytes, 0.0, 0.0)
        else:
            ln = self.link(src, dst)
            rec = TransferRecord(
                src,
                dst,
                kind,
                nbytes,
                transfer_seconds(nbytes, ln),
                nbytes / BYTES_PER_GB * ln.usd_per_gb,
            )
            log.debug("%s -> %s: %d bytes of %s, %.3f s", src, dst, nbytes, kind, rec.seconds)
            if self.time_scale > 0:
                self.sleep(rec.seconds * self.time_scale)
        self.records.append(rec)
        return rec

    def bytes_crossing(self, kind: str | None = None) -> int:
        return sum(r.nbytes for r in self.records if r.crosses and (kind is None or r.kind == kind))

    def egress_usd(self) -> float:
        return sum(r.usd for r in self.records)


def star_links(aggregator: str, spans: Mapping[str, Link]) -> dict[frozenset[str], Link]:
    """Links of a star: ``spans`` maps every other region to its link to the aggregator."""
    return {frozenset((aggregator, region)): ln for region, ln in spans.items()}
