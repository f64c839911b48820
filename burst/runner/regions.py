"""The regions of a regional run on one machine: what the local runner gives a pod of each.

The compiled ``burst-regional`` template does the regional run's work in burst-train's steps
(``provision`` with ``BURST_REGION`` applies a region's own Terraform workspace, the run id
``<run>-<region>`` with that region's site file from the ``tf-site-vars`` map; ``teardown``
destroys it from that id alone, whatever happened). What a cloud region has before any step
runs, one machine does not: this module stands in for it. For every region of the run:

* its own object store: an S3 server on loopback (``rclone serve s3``,
  ``burst.storage.loopback``) over ``<run>/stores/<region>/``, with keys generated for this
  region and this run only, and one bucket (``data``); the aggregation region also serves
  the *exchange* store, a second server with keys of its own. The region's shard of the
  example dataset is placed in its store (``write_shards``), as a real region holds its data;
* the link emulator: the catalog's bandwidth, latency and price between regions, applied by
  the roles to every byte they move, logged in ``<run>/links.jsonl``.

A pod of a region is a pod whose template takes a ``region`` input (``provision``, ``train``,
``aggregate``, ``teardown``). A region's stores start with its first pod outside the exit
handler (its stack's provision): a run refused at preflight starts none; the exit handler's
``teardown`` needs none and starts none. :meth:`RegionSites.prepare_pod` (the engine's
``prepare_pod`` hook, ``burst.runner.pods``) gives a pod no AWS variable of this process, and
instead ``AWS_SHARED_CREDENTIALS_FILE``: a file (mode 0600, in the pod's directory, removed
when the run ends) holding exactly its region's keys (profile ``region``) and the exchange
store's (profile ``exchange``); a worker of region A never holds B's keys, and B's server
refuses A's (a test). It also gets ``BURST_REGION_SITE`` (``burst.regional.site``), which the
``train`` and ``aggregate`` steps put into the role configs they derive. On a cluster the same
split is one identity per region (provision's ``pod_role_arn``).

``stores="dir"`` keeps a directory store per region (no server, no credentials: isolation by
path only); the runtime's fault tests use it to stay fast. ``burst run`` uses the servers.
:meth:`RegionSites.close` stops every server and removes every credentials file, whatever
happened; the data stays on disk, as a bucket would.
"""

from __future__ import annotations

import io
import logging
import os
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from burst.errors import InfraError
from burst.regional.site import RegionSite
from burst.regional.stores import SHARD_KEY
from burst.runner.pods import Pod
from burst.spec import BurstJob
from burst.storage.base import ObjectStore
from burst.storage.local import LocalStore
from burst.storage.loopback import LoopbackS3

log = logging.getLogger(__name__)

StoreMode = Literal["s3", "dir"]
BUCKET = "data"
#: The profile names a process's store specs use (its shared credentials file holds them).
REGION_PROFILE = "region"
EXCHANGE_PROFILE = "exchange"
CREDENTIALS = "credentials"


def exchange_name(aggregation_region: str) -> str:
    return f"{aggregation_region}-exchange"


def objects_dir(run_dir: Path, name: str, mode: StoreMode) -> Path:
    """Where the objects of store ``name`` (a region, or the exchange) lie on disk."""
    base = run_dir / "stores" / name
    return base / BUCKET if mode == "s3" else base


def split_shards(job: BurstJob, regions: list[str]) -> dict[str, tuple[int, bytes]]:
    """The example dataset split over the regions by ``data.shards``: per region, its rows
    and its shard (``x`` and ``y`` arrays, npz), which goes into that region's store only."""
    from burst.train.example import make_dataset

    shards = job.data.shards or {}
    x, y = make_dataset(job.training.seed)
    total = float(sum(shards[r] for r in regions)) or 1.0
    rows = int(x.shape[0])
    out: dict[str, tuple[int, bytes]] = {}
    start = 0
    for i, region in enumerate(regions):
        n = rows - start if i == len(regions) - 1 else round(rows * shards[region] / total)
        n = max(1, min(n, rows - start - (len(regions) - 1 - i)))
        buf = io.BytesIO()
        np.savez(buf, x=x[start : start + n].numpy(), y=y[start : start + n].numpy())
        out[region] = (n, buf.getvalue())
        start += n
    return out


@dataclass
class _Store:
    name: str
    server: LoopbackS3 | None = None

    def spec(self, run_dir: Path, profile: str) -> dict[str, Any]:
        """The spec a process opens the store with (s3: the profile, never a key)."""
        if self.server is None:
            return LocalStore(run_dir / "stores" / self.name).spec()
        from burst.storage.s3 import S3Store

        return S3Store(
            BUCKET, endpoint_url=self.server.endpoint, region=self.server.region, profile=profile
        ).spec()


@dataclass
class RegionSites:
    """Every region's store (and the exchange store), up for the length of a run."""

    job: BurstJob
    run_dir: Path
    regions: list[str]
    aggregation_region: str
    stores: StoreMode = "s3"
    time_scale: float = 1.0
    wait_limit_s: float = 600.0
    faults: dict[str, dict[str, str]] = field(default_factory=dict)  # "role:region" -> points
    _stores: dict[str, _Store] = field(default_factory=dict)
    _credentials: list[Path] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # the shard placed in each region
    _shards: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    _up: dict[str, Future[None]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _requests: queue.Queue[tuple[str, Future[None]] | None] = field(default_factory=queue.Queue)
    _keeper: threading.Thread | None = None

    @property
    def exchange(self) -> str:
        return exchange_name(self.aggregation_region)

    @property
    def link_log(self) -> Path:
        return self.run_dir / "links.jsonl"

    def start(self) -> RegionSites:
        """Ready to stand regions up. Their servers are started by one thread that lives as
        long as the run (a server dies with the thread that started it: ``PR_SET_PDEATHSIG``,
        so a killed ``burst run`` leaves none behind), never by a branch's thread."""
        (self.run_dir / "stores").mkdir(parents=True, exist_ok=True)
        self._keeper = threading.Thread(target=self._keep, name="region-sites", daemon=True)
        self._keeper.start()
        return self

    def _keep(self) -> None:
        # the shards first (torch's import and the dataset: seconds), while the first steps
        # (preflight, plan, verify-image) run; a region's first pod waits for them
        failed: BaseException | None = None
        try:
            self._shards = split_shards(self.job, self.regions)
        except BaseException as exc:
            failed = exc
        while (request := self._requests.get()) is not None:
            region, done = request
            try:
                if failed is not None:
                    raise failed
                self._stand_up(region)
                done.set_result(None)
            except BaseException as exc:  # the pod that asked fails with it
                done.set_exception(exc)
        # the run is over: the servers stop before this thread ends (close)

    def _stand_up(self, region: str) -> None:
        """The region's store with its shard (and the exchange store, which every region's
        site names), and the region's site file."""
        if self.exchange not in self._stores:
            self._start_store(self.exchange, self.aggregation_region)
        self._start_store(region, region)
        rows, shard = self._shards[region]
        self.launcher_store(region).put_bytes(SHARD_KEY, shard)
        self.rows[region] = rows
        sites = self.run_dir / "sites"
        sites.mkdir(parents=True, exist_ok=True)
        (sites / f"{region}.json").write_text(self.site(region).to_json(), encoding="utf-8")

    def stand_up(self, region: str) -> None:
        """``region``'s stores, started once (by the keeper thread); waits for them."""
        with self._lock:
            done = self._up.get(region)
            if done is None:
                done = self._up[region] = Future()
                self._requests.put((region, done))
        done.result()

    def is_up(self, region: str) -> bool:
        done = self._up.get(region)
        return done is not None and done.done() and done.exception() is None

    def _start_store(self, name: str, region: str) -> None:
        root = self.run_dir / "stores" / name
        if self.stores == "dir":
            root.mkdir(parents=True, exist_ok=True)
            self._stores[name] = _Store(name)
            return
        server = LoopbackS3(root, region=region).start(die_with_parent=True)
        self._stores[name] = _Store(name, server)  # stopped by close() from here on
        server.create_bucket(BUCKET)
        log.info("region %s: store %s at %s (keys of its own)", region, name, server.endpoint)

    def site(self, region: str) -> RegionSite:
        """What a pod of ``region`` is told about its machine (``BURST_REGION_SITE``)."""
        faults = {
            key.split(":", 1)[0]: points
            for key, points in self.faults.items()
            if key.split(":", 1)[-1] == region
        }
        return RegionSite(
            region=region,
            region_store=self.region_spec(region),
            exchange_store=self.exchange_spec(),
            link_log=str(self.link_log),
            time_scale=self.time_scale,
            state_root=str(self.run_dir / "scratch"),
            results_dir=str(self.run_dir),
            wait_limit_s=self.wait_limit_s,
            faults=faults,
        )

    # ------------------------------------------------------------------ what pods get
    def prepare_pod(self, pod: Pod) -> Pod:
        """The engine's ``prepare_pod`` hook: a pod of one of the run's regions gets that
        region's site and keys, and none of this process's AWS variables."""
        region = pod.inputs.get("region")
        if region not in self.regions:
            return pod
        if not pod.exit_handler:
            self.stand_up(region)
        env = {k: v for k, v in pod.env.items() if not k.startswith("AWS_")}
        if not self.is_up(region):  # teardown of a region never stood up: nothing to give
            return replace(pod, env=env)
        env["BURST_REGION_SITE"] = str(self.run_dir / "sites" / f"{region}.json")
        env.update(self.role_env(region, pod.pod_dir))
        return replace(pod, env=env)

    def launcher_store(self, name: str) -> ObjectStore:
        """Store ``name`` opened by this process (which started its server), e.g. to place a
        region's shard."""
        st = self._stores[name]
        if st.server is None:
            return LocalStore(self.run_dir / "stores" / name)
        return st.server.store(BUCKET)

    def _server(self, name: str) -> LoopbackS3:
        server = self._stores[name].server
        if server is None:
            raise InfraError(f"store {name} has no S3 server (stores={self.stores})")
        return server

    def region_spec(self, region: str) -> dict[str, Any]:
        return self._stores[region].spec(self.run_dir, REGION_PROFILE)

    def exchange_spec(self) -> dict[str, Any]:
        return self._stores[self.exchange].spec(self.run_dir, EXCHANGE_PROFILE)

    def role_env(self, region: str, directory: Path) -> dict[str, str]:
        """A shared credentials file in ``directory`` with the keys of ``region``'s store and
        of the exchange store, and nothing else (s3 mode; the directory mode hands none)."""
        if self.stores == "dir":
            return {}
        text = self._server(self.exchange).credentials_profile(EXCHANGE_PROFILE)
        text += self._server(region).credentials_profile(REGION_PROFILE)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / CREDENTIALS
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        self._credentials.append(path)
        return {"AWS_SHARED_CREDENTIALS_FILE": str(path), "AWS_CONFIG_FILE": os.devnull}

    # ------------------------------------------------------------------ the end
    def close(self) -> None:
        """Every server stopped, every credentials file removed, the keeper thread ended.
        Never raises; a second call does nothing more."""
        for st in list(self._stores.values()):
            if st.server is not None:
                try:
                    st.server.stop()
                except Exception as exc:  # go on with the next store
                    log.error("store %s: could not stop its server: %s", st.name, exc)
        for path in self._credentials:
            path.unlink(missing_ok=True)
        if self._keeper is not None:
            self._requests.put(None)
            self._keeper.join()
            self._keeper = None
