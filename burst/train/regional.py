"""The regional worker: a hook of the one train loop (``burst.train.loop``), not a loop of its
own. The loop runs the inner steps, the notice watchers and the emergency save, SIGTERM and
exit 75, the budget guard, the attempt records and metrics; this module adds the outer step:

1. the batches: inner step ``s`` of round ``r = s // H`` draws from the region's shard with a
   generator seeded by (seed, region, round), and the round reseeds torch: a rerun of a round
   reads the same batches;
2. at the end of each round (``boundary``), ``make_message`` (global - local, compressed)
   committed through the checkpoint engine as checkpoint ``round`` of ``deltas/<region>/`` in
   the exchange store; the loop then commits the worker's own state (model, inner optimizer,
   scheduler, RNG, compression residual) as a full checkpoint of its own store (``worker/``
   of the region's store, step = inner steps done);
3. ``advance``: wait for the global round after its own: if it is exactly the next one and
   this worker holds the previous global weights, fetch only the compressed update
   (``updates/``) and apply it (bit-identical to the aggregator's copy); otherwise (late, or
   resumed) restore the newest global checkpoint, fetching only the chunks its cache lacks.

Resuming (``restore``): from the newest global checkpoint and the newest own state. Own state
at the end of a round the aggregator has not moved past means its delta is delivered (the
delta goes first): wait for the next global round. Own state saved mid-round (an emergency
save on a notice) resumes mid-round when that round is still the newest global one, exactly
(RNG included); otherwise the worker rejoins the round the aggregator is collecting, with its
own optimizer state. A round whose delta it did not deliver is the aggregator's to complete.

Any wait for the aggregator ends on a stop notice (``Interrupted``): the loop then stops with
exit 75, its state saved.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from burst.documents import PlanDocument, ProvisionDocument, TrainDocument
from burst.errors import BadInputError
from burst.regional.aggregate import apply_update, make_message
from burst.regional.rounds import Rounds
from burst.regional.runtime import (
    Role,
    RoleConfig,
    commit,
    newest_step,
    payload_array,
    payload_bytes,
    read,
    subdir_spec,
)
from burst.regional.stores import (
    GLOBAL,
    SHARD_KEY,
    UPDATES,
    WORKER,
    LinkedStore,
    delta_series,
    open_spec,
)
from burst.settings import current
from burst.storage.base import ObjectMissing, ObjectStore
from burst.train.checkpoints import RunCheckpoints, state_nbytes
from burst.train.engine import TorchEngine, TrainEngine, apply_setup, capture_setup
from burst.train.hooks import Interrupted
from burst.train.loop import TrainRun

log = logging.getLogger(__name__)


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _load(model: torch.nn.Module, params: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for k, v in model.state_dict().items():
            v.copy_(params[k])


class RegionalWorker:
    """The regional-sync hook (``burst.train.hooks.LoopHook``) and the engine it wraps the
    loop's torch engine in (``TrainEngine``: one tier, full)."""

    name = "regional-worker"
    tiers: tuple[str, ...] = ("full",)

    def __init__(self, role: Role) -> None:
        cfg = role.cfg
        if cfg.region_store is None:
            raise BadInputError(f"worker {role.region}: its config names no region store")
        self.role = role
        self.cfg = cfg
        self.job = role.job
        self.region = role.region
        self.links = role.links
        self.H = cfg.local_steps
        self.total = self.job.training.steps
        self.plan = Rounds(self.total, self.H, cfg.first_local_steps)  # where rounds begin
        own = LinkedStore(open_spec(cfg.region_store), self.region, self.region, self.links)
        self.global_store = role.series(GLOBAL)
        self.updates = role.series(UPDATES)
        self.deltas = role.writer(delta_series(self.region))
        try:  # first: a worker without its shard is bad input, whatever else is missing
            shard = np.load(io.BytesIO(own.get_bytes(SHARD_KEY)))
            self.x_all, self.y_all = torch.from_numpy(shard["x"]), torch.from_numpy(shard["y"])
        except ObjectMissing:
            raise BadInputError(
                f"worker {self.region}: no shard at {SHARD_KEY} in {own.url}"
            ) from None
        self.rows = int(self.x_all.shape[0])
        if self.rows == 0:
            raise BadInputError(f"worker {self.region}: the shard at {own.url} is empty")
        self.codec = role.codec()
        self.region_index = cfg.regions.index(self.region)
        self.inner: TorchEngine | None = None
        self.stopping: Callable[[], bool] = lambda: False
        self.global_params: dict[str, torch.Tensor] = {}
        self.gen: torch.Generator | None = None
        self.pos: tuple[int, int] | None = None  # (round, inner step) the generator is at
        self.losses: list[float] = []
        self.rounds: list[dict[str, Any]] = []
        self.round = 0

    # ------------------------------------------------------------------ the hook

    def wrap(self, engine: TrainEngine, stopping: Callable[[], bool]) -> TrainEngine:
        if not isinstance(engine, TorchEngine):
            raise BadInputError(
                f"worker {self.region}: regional sync trains with training.engine torch on "
                f"one rank a region (not {engine.name})"
            )
        self.inner = engine
        self.stopping = stopping
        return self

    def _round_of_end(self, done: int) -> int | None:
        """The round that inner step count ``done`` ends, or None mid-round."""
        return self.plan.ending_at(done)

    def boundary(self, done: int) -> bool:
        r = self._round_of_end(done)
        if r is None:
            return False
        self.role.fault(f"worker-before-delta@{self.region}@{r}")
        n = self.plan.length(r)
        job = self.job
        tokens = n * job.training.batch_size * job.training.tokens_per_sample
        msg = make_message(
            self.region, r, tokens, self.global_params, _params(self._setup.model), self.codec
        )
        loss = float(np.mean(self.losses)) if self.losses else float("nan")
        commit(
            self.deltas,
            {
                "region": self.region,
                "round": r,
                "tokens": tokens,
                "loss": loss,
                "payload": payload_array(msg.payload),
            },
            r,
        )
        log.info("worker %s: round %d delta committed (%d bytes)", self.region, r, len(msg.payload))
        self.rounds.append({"round": r, "steps": n, "loss": loss, "delta_bytes": len(msg.payload)})
        return True

    def advance(self, done: int) -> int:
        r = self._round_of_end(done)
        assert r is not None
        newest = self._next_global(r)
        if newest == r + 1 and self.updates.exists(f"manifests/{newest:012d}.weights.json"):
            upd = payload_bytes(read(self.updates, newest).state["payload"])
            self.global_params = apply_update(self.global_params, upd)
            how = "update"
        else:
            self.global_params = dict(read(self.global_store, newest).state["weights"])
            how = "global checkpoint"
        log.info("worker %s: now at global round %d (from the %s)", self.region, newest, how)
        self.rounds[-1]["next_from"] = how
        _load(self._setup.model, self.global_params)
        self.round = newest
        return self.plan.start(newest)

    def result(self) -> dict[str, Any]:
        return {"region": self.region, "rounds": self.rounds, "final_round": self.round}

    # ------------------------------------------------------------------ waiting

    def _wait_global(self, after: int | None) -> int:
        """The newest global round (after ``after``): polls until there is one, gives up
        after the config's wait limit (exit 4), stops on a notice (``Interrupted``)."""

        def newer() -> int | None:
            if self.stopping():
                raise Interrupted(
                    f"worker {self.region}: a stop notice while waiting for the global round "
                    f"after {after}"
                    if after is not None
                    else f"worker {self.region}: a stop notice while waiting for a global round"
                )
            s = newest_step(self.global_store)
            return s if s is not None and (after is None or s > after) else None

        what = "global checkpoint" if after is None else f"global round after {after}"
        return int(self.role.wait_for(newer, what))

    def _next_global(self, after: int) -> int:
        return self._wait_global(after)

    # ------------------------------------------------------------------ the engine

    @property
    def _setup(self) -> Any:
        assert self.inner is not None, "wrap() first"
        return self.inner.setup

    def _start_round(self, r: int, i: int) -> None:
        """Ready inner step ``i`` of round ``r``: the round's generator drawn up to it; at
        the round's start, torch reseeded (mid-round, the restored RNG state stands)."""
        job = self.job
        self.links.round = r  # the fetch of the next global round counts to this round
        self.gen = torch.Generator().manual_seed(
            job.training.seed * 1_000_003 + self.region_index * 7919 + r
        )
        for _ in range(i):
            torch.randint(0, self.rows, (job.training.batch_size,), generator=self.gen)
        if i == 0:
            torch.manual_seed(job.training.seed + 31 * r + self.region_index)
            self.losses = []
        self._setup.model.train()
        self.pos = (r, i)

    def step(self, step: int) -> float:
        setup, job = self._setup, self.job
        r, i = self.plan.locate(step)
        if self.pos != (r, i):
            self._start_round(r, i)
        assert self.gen is not None
        idx = torch.randint(0, self.rows, (job.training.batch_size,), generator=self.gen)
        setup.optimizer.zero_grad(set_to_none=True)
        loss = setup.loss_fn(setup.model(self.x_all[idx]), self.y_all[idx])
        loss.backward()
        setup.optimizer.step()
        if setup.scheduler is not None:
            setup.scheduler.step()
        value = float(loss.detach())
        self.losses.append(value)
        self.pos = (r, i + 1)
        if i == self.plan.length(r) // 2:
            self.role.fault(f"worker-mid-round@{self.region}@{r}")
        return value

    def _state(self, step: int) -> dict[str, Any]:
        state = capture_setup(self._setup, step, "full")
        state["residual"] = dict(self.codec.residual)
        return state

    def save(self, store: RunCheckpoints, step: int, tier: str) -> float:
        return store.save(step, self._state(step), "full")

    def restore(self, store: RunCheckpoints) -> int | None:
        g = self._wait_global(None)
        self.round = g
        self.links.round = g
        self.global_params = dict(read(self.global_store, g).state["weights"])
        restored = store.restore_full()
        setup = self._setup
        if restored is None:
            _load(setup.model, self.global_params)
            return self.plan.start(g) if g > 0 else None
        s, state = restored
        self.codec.residual = dict(state.get("residual") or {})
        ended = self._round_of_end(s)
        if ended is None and self.plan.locate(s)[0] == g:  # mid-round, the round still open
            apply_setup(setup, state, f"worker {self.region}'s own state at step {s}")
            log.info("worker %s: resumed mid-round %d at inner step %d", self.region, g, s)
            return s
        setup.optimizer.load_state_dict(state["optimizer"])
        if setup.scheduler is not None and state.get("scheduler") is not None:
            setup.scheduler.load_state_dict(state["scheduler"])
        if ended is not None and ended >= g:
            # its delta of round g is committed (the delta goes first): only the next
            # global round is left to wait for
            g = self._next_global(g)
            self.round = g
            self.global_params = dict(read(self.global_store, g).state["weights"])
        _load(setup.model, self.global_params)
        log.info("worker %s: resumed at global round %d (own state of step %d)", self.region, g, s)
        return self.plan.start(g)

    def nbytes(self, tier: str) -> int:
        return state_nbytes(self._state(0))

    def weights_sha256(self) -> str:
        assert self.inner is not None
        return self.inner.weights_sha256()

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


def own_store(cfg: RoleConfig) -> ObjectStore:
    """The worker's own state: ``worker/`` of its region's store (the loop's run store)."""
    from burst.storage import store_from_spec

    assert cfg.region_store is not None
    return store_from_spec(subdir_spec(cfg.region_store, WORKER))


def run_worker(
    cfg: RoleConfig, plan: PlanDocument | None = None, infra: ProvisionDocument | None = None
) -> TrainDocument:
    """One attempt of a region's worker: the train loop with the regional hook. Returns its
    train document (also ``train.json`` in its state directory) and writes the rounds it
    took part in to ``cfg.out``. ``plan`` and ``infra`` (the region's provision document):
    what it rents and at what price, which its attempt records charge."""
    role = Role.open(cfg, chunk_cache=True)
    worker = RegionalWorker(role)
    run_dir = Path(cfg.state_dir)
    run = TrainRun(
        role.job,
        cfg.run_id or current().run_id or role.job.name,
        run_dir,
        store=own_store(cfg),
        hook=worker,
        heartbeat_role=f"worker-{role.region}",
        # the driver's heartbeat is the run's, not in this worker's scratch
        heartbeat_dir=Path(cfg.run_dir) if cfg.run_dir else None,
        plan=plan,
        infra=infra,
    )
    try:
        doc = run.run()
    except BaseException as exc:
        _write_doc(run_dir, getattr(exc, "doc", None))
        raise
    _write_doc(run_dir, doc)
    role.write_result(worker.result())
    return doc


def _write_doc(run_dir: Path, doc: object) -> None:
    if isinstance(doc, TrainDocument):
        from burst.runs import write_json_atomic

        write_json_atomic(run_dir / "train.json", doc.to_json())
