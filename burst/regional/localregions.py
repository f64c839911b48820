"""The regions of a local regional run: each provisioned and torn down on its own.

*Provision* of a region (``LocalRegions.provision``), as the single-region ``burst run`` does:

* its own Terraform workspace (``<run>/regions/<region>/terraform``), applied with the
  embedded ``local`` stack (``burst.infra.provision.provision``, one candidate: the spec's
  provider in that region; with ``BURST_TF_SITE_VARS`` a directory, that region's own site
  file ``<region>.tfvars``), its provision document ``provision-<region>.json``;
* its own object store: an S3 server on loopback (``rclone serve s3``,
  ``burst.storage.loopback``) over ``<run>/stores/<region>/``, with keys generated for this
  region and this run only, and one bucket (``data``); the aggregation region also starts
  the *exchange* store, a second server with keys of its own.

A process of the run is handed its stores as store specs naming a *profile* (``region`` /
``exchange``) and, in its environment only, ``AWS_SHARED_CREDENTIALS_FILE``: a file (mode
0600, in the process's scratch, removed at teardown) holding exactly those profiles' keys. A
worker of region A gets A's keys and the exchange store's, never B's: B's server refuses it
(a test). On a cluster the same split is one identity per region (provision's
``pod_role_arn``).

*Teardown* of a region (``LocalRegions.teardown``), whatever happened: its server stopped, its
stack destroyed (``burst.infra.teardown.destroy_run``, retried) and proven empty
(``leak_scan``), its scratch and credentials removed; ``teardown-<region>.json``. The data
stays on disk, as a bucket would.

``stores="dir"`` keeps a directory store per region (no server, no credentials: isolation by
path only), and ``terraform=False`` skips the stack; the runtime's fault tests use both to stay
fast. ``burst run`` uses the servers and the stacks.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from burst.documents import ProvisionDocument, TeardownDocument, produce
from burst.errors import InfraError, PolicyRefusal
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


def exchange_name(aggregation_region: str) -> str:
    return f"{aggregation_region}-exchange"


def objects_dir(run_dir: Path, name: str, mode: StoreMode) -> Path:
    """Where the objects of store ``name`` (a region, or the exchange) lie on disk."""
    base = run_dir / "stores" / name
    return base / BUCKET if mode == "s3" else base


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
class LocalRegions:
    job: BurstJob
    run_id: str
    run_dir: Path
    aggregation_region: str
    stores: StoreMode = "s3"
    terraform: bool = True
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    _stores: dict[str, _Store] = field(default_factory=dict)
    provisioned: list[str] = field(default_factory=list)
    torn_down: list[str] = field(default_factory=list)

    @property
    def exchange(self) -> str:
        return exchange_name(self.aggregation_region)

    def workdir(self, region: str) -> Path:
        return self.run_dir / "regions" / region / "terraform"

    def provider(self) -> str:
        return self.job.compute.providers[0] if self.job.compute.providers else "aws"

    # ------------------------------------------------------------------ preflight
    def preflight(self, regions: list[str]) -> None:
        """The legal preflight (the policies the preflight step evaluates: processing each
        region's shard there, and its model updates crossing to the aggregation region),
        written as ``preflight.json``; every region must be allowed before any is
        provisioned (``PolicyRefusal``, exit 3, naming the first refused region)."""
        from burst.documents import DecisionRecord
        from burst.infra.provision import gate_candidates
        from burst.policy import evaluate, load_policies

        record = produce(DecisionRecord, evaluate(self.job, load_policies()))
        body = {**record.to_json(), "step": "preflight", "run_id": self.run_id}
        (self.run_dir / "preflight.json").write_text(json.dumps(body, indent=1))
        wanted = [{"provider": self.provider(), "region": r} for r in regions]
        _, refused = gate_candidates(record, self.job, wanted)
        if refused:
            first = refused[0]
            raise PolicyRefusal(
                f"region {first['region']} is not allowed for this spec: {first['reason']} "
                f"(preflight.json lists every reason); nothing was provisioned"
            )

    # ------------------------------------------------------------------ provision
    def provision(self, region: str) -> None:
        """The region's stack, then its store (and the exchange store in the aggregation
        region). Recorded as provisioned first: a failure half-way is torn down too."""
        self.provisioned.append(region)
        if self.terraform:
            self._apply(region)
        self._stores_of(region)

    def _stores_of(self, region: str) -> None:
        self._start_store(region, region)
        if region == self.aggregation_region:
            self._start_store(self.exchange, region)

    def provision_all(self, regions: list[str]) -> None:
        """Every region's stack at once (threads), then every region's server (from this
        thread); the first failure is raised once all stacks have finished, and every region
        begun is torn down."""
        self.provisioned.extend(regions)
        if self.terraform:
            with ThreadPoolExecutor(max_workers=len(regions)) as pool:
                futures = [pool.submit(self._apply, r) for r in regions]
            for f in futures:
                f.result()
        # the servers from this thread: they end with it (die_with_parent), never with a
        # pool thread
        for region in regions:
            self._stores_of(region)

    def teardown_all(self, scratch: dict[str, list[Path]]) -> dict[str, dict[str, Any]]:
        """Every provisioned region at once; each region's document, in provision order."""
        regions = list(self.provisioned)
        with ThreadPoolExecutor(max_workers=max(1, len(regions))) as pool:
            docs = list(pool.map(lambda r: self.teardown(r, scratch.get(r, [])), regions))
        self.torn_down.sort(key=regions.index)
        return dict(zip(regions, docs, strict=True))

    def _apply(self, region: str) -> None:
        from burst.infra.provision import provision

        env = {**self.env, "BURST_TF_STACK": "local"}  # one machine: the embedded stack
        candidate = {"provider": self.provider(), "region": region}
        try:
            doc = provision(
                self.job, self.stack_id(region), self.workdir(region), [candidate], env=env
            )
        except Exception as exc:
            failed = getattr(exc, "doc", None)
            if isinstance(failed, dict):
                self._write("provision", region, {**failed, "refused": []}, ProvisionDocument)
            raise
        doc.update(refused=[], placement=0)
        self._write("provision", region, doc, ProvisionDocument)

    def stack_id(self, region: str) -> str:
        """The run id the region's stack is applied (and tagged) with."""
        return f"{self.run_id}-{region}"

    def _start_store(self, name: str, region: str) -> None:
        root = self.run_dir / "stores" / name
        if self.stores == "dir":
            root.mkdir(parents=True, exist_ok=True)
            self._stores[name] = _Store(name)
            return
        server = LoopbackS3(root, region=region).start(die_with_parent=True)
        self._stores[name] = _Store(name, server)  # stopped at teardown from here on
        server.create_bucket(BUCKET)
        log.info("region %s: store %s at %s (keys of its own)", region, name, server.endpoint)

    # ------------------------------------------------------------------ what processes get
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

    def role_env(self, region: str | None, scratch: Path) -> dict[str, str]:
        """What a process's environment adds: its shared credentials file, with the keys of
        its own region's store (``region`` given: a worker) and of the exchange store, and
        nothing else (s3 mode; the directory mode hands no credentials)."""
        if self.stores == "dir":
            return {}
        text = self._server(self.exchange).credentials_profile(EXCHANGE_PROFILE)
        if region is not None:
            text += self._server(region).credentials_profile(REGION_PROFILE)
        scratch.mkdir(parents=True, exist_ok=True)
        path = scratch / "credentials"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        return {"AWS_SHARED_CREDENTIALS_FILE": str(path), "AWS_CONFIG_FILE": os.devnull}

    # ------------------------------------------------------------------ teardown
    def teardown(self, region: str, scratch_dirs: list[Path]) -> dict[str, Any]:
        """Stop the region's stores, destroy its stack and prove it empty; remove its
        scratch. Never raises: what failed is in the document (``destroyed`` false)."""
        for name in (region, self.exchange) if region == self.aggregation_region else (region,):
            st = self._stores.get(name)
            if st is not None and st.server is not None:
                st.server.stop()
        for d in scratch_dirs:
            shutil.rmtree(d, ignore_errors=True)
        doc: dict[str, Any]
        if self.terraform:
            from burst.infra.teardown import destroy_run, leak_scan

            try:
                doc = destroy_run(self.workdir(region))
                doc["leaks"] = leak_scan(self.stack_id(region), self.workdir(region))
            except Exception as exc:  # teardown goes on with the next region
                msg = exc.one_line() if hasattr(exc, "one_line") else str(exc)
                log.error("teardown of %s failed: %s", region, msg)
                doc = {"destroyed": False, "attempts": 0, "errors": [msg], "resources_remaining": 0}
        else:
            doc = {"destroyed": True, "attempts": 0, "resources_remaining": 0}
        self._write("teardown", region, doc, TeardownDocument)
        if doc["destroyed"] and not doc.get("leaks"):
            self.torn_down.append(region)
        return doc

    def _write(self, step: str, region: str, doc: dict[str, Any], model: Any) -> None:
        body = produce(model, {**doc, "step": step, "run_id": self.stack_id(region)}).to_json()
        (self.run_dir / f"{step}-{region}.json").write_text(json.dumps(body, indent=1))
