"""What the regional worker and aggregator share: their configuration, and committing and
reading state through the checkpoint engine in process.

A process of a regional run (the ``train`` step's worker, the ``aggregate`` step) sees the run
through one ``RoleConfig``, which the step derives from the spec, the plan and the region's
stack (``burst.plan.regional.role_config``) and keeps beside its documents. It names the spec,
the process's region, the store spec of that region only, the exchange store's spec (in the
aggregation region), the links between the run's regions and the link log. Commits go
through the checkpoint engine's writer (``burst.checkpoint.writer.CheckpointWriter``: chunks
hashed, only missing chunks uploaded, the manifest written last, so a commit is atomic and
every chunk carries its blake3) and reads through ``restore_checkpoint`` (every chunk verified).
The writer runs in this process, not in the engine's background worker, so that its bytes
go through the ``LinkedStore`` and are measured.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from burst.checkpoint.catalog import list_checkpoints
from burst.checkpoint.layout import build_layout
from burst.checkpoint.manifest import Manifest
from burst.checkpoint.restore import Restored, restore_checkpoint
from burst.checkpoint.tree import flatten
from burst.checkpoint.writer import CheckpointWriter
from burst.errors import BadInputError, InfraError
from burst.regional.rounds import Rounds
from burst.regional.stores import LinkedStore, LinkLog, links_from_pairs, open_spec, series
from burst.spec import BurstJob, RegionalSync, load_spec
from burst.storage.base import ObjectStore

if TYPE_CHECKING:
    from burst.regional.compression import Codec

T = TypeVar("T")

#: Small chunks: a tiny model still spans several chunks, so "only changed chunks" is visible.
CHUNK_SIZE = 64 * 1024


@dataclass(frozen=True)
class RoleConfig:
    """One process's view of the run (JSON on disk)."""

    spec: str  # the spec file
    role: str  # "worker" or "aggregator"
    region: str  # where this process runs
    aggregation_region: str
    regions: tuple[str, ...]
    local_steps: int  # H
    rounds: int
    region_store: dict[str, Any] | None  # the store spec of this process's region (workers)
    exchange_store: dict[str, Any]  # the exchange store's spec (in the aggregation region)
    links: tuple[dict[str, Any], ...]  # every pair of the run's regions
    link_log: str
    time_scale: float
    state_dir: str  # this process's local scratch (chunk cache)
    out: str = ""  # where the process writes its result (JSON)
    faults: dict[str, str] | None = None  # named fault points (tests): burst.faults.regional
    poll_s: float = 0.05
    wait_limit_s: float = 600.0  # a worker waiting for the next global round gives up then
    run_id: str = ""  # the run's id (metrics, leases); empty: the spec's name
    first_local_steps: int | None = None  # adaptive rounds: the first round's H (doubling)
    #: the run's directory (``<runs root>/<run>``): where its driver heartbeat lives, which a
    #: worker's loop follows (its ``state_dir`` is its scratch, not the run's)
    run_dir: str = ""

    def to_json(self) -> str:
        d = dict(self.__dict__)
        d["regions"] = list(self.regions)
        d["links"] = list(self.links)
        return json.dumps(d, indent=1, sort_keys=True)

    @staticmethod
    def load(path: Path) -> RoleConfig:
        try:
            d = json.loads(path.read_text())
            d["regions"] = tuple(d["regions"])
            d["links"] = tuple(d["links"])
            return RoleConfig(**d)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise BadInputError(f"regional config {path}: unreadable ({exc})") from None


@dataclass
class Role:
    """What a worker and the aggregator both set up from their config: the spec and its
    regional settings, the process's scratch, its link log, the exchange store (through the
    link between its region and the aggregation region) and its armed fault points."""

    cfg: RoleConfig
    job: BurstJob
    settings: RegionalSync
    state_dir: Path
    links: LinkLog
    exchange: LinkedStore

    @staticmethod
    def open(cfg: RoleConfig, *, chunk_cache: bool) -> Role:
        job = load_spec(cfg.spec)
        rs = regional(job)
        state_dir = Path(cfg.state_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        links = LinkLog(
            links_from_pairs(cfg.links),
            Path(cfg.link_log),
            f"{cfg.role}:{cfg.region}",
            cfg.time_scale,
        )
        exchange = LinkedStore(
            open_spec(cfg.exchange_store),
            cfg.region,
            cfg.aggregation_region,
            links,
            cache=state_dir / "chunk-cache" if chunk_cache else None,
        )
        return Role(cfg, job, rs, state_dir, links, exchange)

    @property
    def region(self) -> str:
        return self.cfg.region

    def codec(self) -> Codec:
        from burst.regional.compression import Codec

        c = self.settings.compression
        return Codec(c.codec, c.block_size, c.topk_fraction)

    def series(self, prefix: str) -> ObjectStore:
        """One checkpoint series of the exchange store."""
        return series(self.exchange, prefix)

    def writer(self, prefix: str) -> CheckpointWriter:
        return CheckpointWriter(self.series(prefix), concurrency=2)

    def fault(self, point: str) -> None:
        from burst import faults

        faults.regional(self.cfg.faults or {}, point, self.state_dir)

    def wait_for(self, cond: Callable[[], T | None], what: str) -> T:
        """Poll ``cond`` until it gives a value; InfraError after the config's wait limit."""
        end = time.monotonic() + self.cfg.wait_limit_s
        while True:
            value = cond()
            if value is not None:
                return value
            if time.monotonic() > end:
                raise InfraError(
                    f"{self.cfg.role} {self.region}: no {what} after {self.cfg.wait_limit_s:g}s"
                )
            time.sleep(self.cfg.poll_s)

    def write_result(self, result: dict[str, Any]) -> None:
        if self.cfg.out:
            Path(self.cfg.out).write_text(json.dumps(result, indent=1))


def regional(job: BurstJob) -> RegionalSync:
    rs = job.training.regional_sync
    if job.training.strategy != "regional-sync" or rs is None:
        raise BadInputError(f"spec {job.name}: training.strategy is not regional-sync")
    return rs


def subdir_spec(spec: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The spec of the store ``spec`` seen under ``prefix`` (``worker/``), opened by spec
    again in another process (the checkpoint engine's background writer)."""
    out = dict(spec)
    name = prefix.strip("/")
    if out.get("kind") == "file":
        out["root"] = str(Path(str(out["root"])) / name)
    elif out.get("kind") == "s3":
        out["prefix"] = "/".join(p for p in (str(out.get("prefix") or "").strip("/"), name) if p)
    else:
        raise BadInputError(f"store spec of kind {out.get('kind')!r}: no sub-store {prefix}")
    return out


def rounds_for(steps: int, local_steps: int, first_local_steps: int | None = None) -> int:
    """Rounds of a run: every worker runs ``steps`` inner steps, H of them a round (the last
    round takes what is left), or adaptive rounds from ``first_local_steps`` up to H
    (``burst.regional.rounds``)."""
    return Rounds(max(1, steps), local_steps, first_local_steps).count


def steps_in_round(
    round_: int, steps: int, local_steps: int, first_local_steps: int | None = None
) -> int:
    return Rounds(steps, local_steps, first_local_steps).length(round_)


def commit(writer: CheckpointWriter, state: Any, step: int, tier: str = "weights") -> Manifest:
    """Commit ``state`` as checkpoint ``step`` of the writer's store (atomic, checksummed)."""
    tree, arrays = flatten(state)
    entries, total = build_layout(arrays, CHUNK_SIZE)
    buf = np.zeros(total, dtype=np.uint8)
    for a, e in zip(arrays, entries, strict=True):
        if e.nbytes == 0:
            continue
        src = a if isinstance(a, np.ndarray) else a.detach().contiguous().numpy()
        buf[e.offset : e.offset + e.nbytes] = np.ascontiguousarray(src).reshape(-1).view(np.uint8)
    return writer.write(
        memoryview(buf.data), entries, tree, step=step, tier=tier, chunk_size=CHUNK_SIZE
    )


def newest_step(store: ObjectStore) -> int | None:
    refs = list_checkpoints(store)
    return refs[-1].step if refs else None


def steps_of(store: ObjectStore) -> list[int]:
    return [r.step for r in list_checkpoints(store)]


def read(store: ObjectStore, step: int) -> Restored:
    return restore_checkpoint(store, step, concurrency=2)


def payload_array(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8).copy()


def payload_bytes(arr: Any) -> bytes:
    return bytes(np.asarray(arr, dtype=np.uint8).tobytes())
