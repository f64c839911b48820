"""The regional worker: H local steps on its own region's shard, then its compressed
pseudo-gradient to the aggregator, then the next global weights.

Reads only its own region's store (the shard, its own state) and the exchange store in the
aggregation region, each through a ``LinkedStore`` so every byte is measured. A round:

1. train ``H`` inner steps (the entrypoint's model, inner optimizer and loss) on batches drawn
   from the shard with a generator seeded by (seed, region, round): a rerun of a round reads
   the same batches;
2. ``make_message`` (global - local, compressed) committed through the checkpoint engine as
   checkpoint ``round`` of ``deltas/<region>/`` in the exchange store; the inner optimizer's
   state committed to its own store (``worker/``);
3. wait for the global round after its own: if it is exactly the next one and this worker
   holds the previous global weights, fetch only the compressed update (``updates/``) and
   apply it (bit-identical to the aggregator's copy); otherwise (late, or resumed) restore
   the newest global checkpoint, fetching only the chunks its cache does not hold.

A preempted worker (killed anywhere) starts again from the newest global checkpoint and its
newest own state and rejoins the round the aggregator is collecting; a round whose delta it
did not deliver is the aggregator's to complete without it.
"""

from __future__ import annotations

import io
import logging
from typing import Any

import numpy as np
import torch

from burst.checkpoint.writer import CheckpointWriter
from burst.errors import BadInputError
from burst.regional.aggregate import apply_update, make_message
from burst.regional.runtime import (
    Role,
    RoleConfig,
    commit,
    newest_step,
    payload_array,
    payload_bytes,
    read,
    steps_in_round,
)
from burst.regional.stores import (
    GLOBAL,
    SHARD_KEY,
    UPDATES,
    WORKER,
    LinkedStore,
    delta_series,
    open_spec,
    series,
)
from burst.storage.base import ObjectMissing
from burst.train.setup import build_setup

log = logging.getLogger(__name__)


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _load(model: torch.nn.Module, params: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for k, v in model.state_dict().items():
            v.copy_(params[k])


def _next_global(role: Role, global_store: Any, after: int) -> int:
    def newer() -> int | None:
        s = newest_step(global_store)
        return s if s is not None and s > after else None

    return int(role.wait_for(newer, f"global round after {after}"))


def run_worker(cfg: RoleConfig) -> dict[str, Any]:
    role = Role.open(cfg, chunk_cache=True)
    job, region = role.job, role.region
    if cfg.region_store is None:
        raise BadInputError(f"worker {region}: its config names no region store")
    links = role.links
    own = LinkedStore(open_spec(cfg.region_store), region, region, links)
    global_store = role.series(GLOBAL)
    updates = role.series(UPDATES)
    deltas = role.writer(delta_series(region))
    local = series(own, WORKER)
    local_writer = CheckpointWriter(local, concurrency=2)

    try:
        shard = np.load(io.BytesIO(own.get_bytes(SHARD_KEY)))
        x_all, y_all = torch.from_numpy(shard["x"]), torch.from_numpy(shard["y"])
    except ObjectMissing:
        raise BadInputError(f"worker {region}: no shard at {SHARD_KEY} in {own.url}") from None
    rows = int(x_all.shape[0])
    if rows == 0:
        raise BadInputError(f"worker {region}: the shard at {own.url} is empty")

    setup = build_setup(job)
    model, optimizer, scheduler = setup.model, setup.optimizer, setup.scheduler
    codec = role.codec()
    region_index = cfg.regions.index(region)

    round_ = role.wait_for(lambda: newest_step(global_store), "global checkpoint")
    links.round = round_
    global_params = {k: v for k, v in read(global_store, round_).state["weights"].items()}
    _load(model, global_params)
    mine = newest_step(local)
    if mine is not None:
        st = read(local, mine).state
        optimizer.load_state_dict(st["optimizer"])
        if scheduler is not None and st.get("scheduler") is not None:
            scheduler.load_state_dict(st["scheduler"])
        codec.residual = dict(st.get("residual") or {})
        log.info(
            "worker %s: resumed at global round %d (own state of round %d)", region, round_, mine
        )
    # own state of this round or later: its delta is committed (the delta goes first), so a
    # worker killed after that only waits for the next global round
    delivered = mine is not None and mine >= round_
    rounds: list[dict[str, Any]] = []
    while round_ < cfg.rounds:
        if delivered:
            delivered = False
            round_ = _next_global(role, global_store, round_)
            global_params = dict(read(global_store, round_).state["weights"])
            _load(model, global_params)
            continue
        links.round = round_  # the fetch of the next global round counts to this round
        n = steps_in_round(round_, job.training.steps, cfg.local_steps)
        gen = torch.Generator().manual_seed(
            job.training.seed * 1_000_003 + region_index * 7919 + round_
        )
        torch.manual_seed(job.training.seed + 31 * round_ + region_index)
        model.train()
        losses: list[float] = []
        for i in range(n):
            idx = torch.randint(0, rows, (job.training.batch_size,), generator=gen)
            optimizer.zero_grad(set_to_none=True)
            loss = setup.loss_fn(model(x_all[idx]), y_all[idx])
            loss.backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            losses.append(float(loss.detach()))
            if i == n // 2:
                role.fault(f"worker-mid-round@{region}@{round_}")
        role.fault(f"worker-before-delta@{region}@{round_}")
        tokens = n * job.training.batch_size * job.training.tokens_per_sample
        msg = make_message(region, round_, tokens, global_params, _params(model), codec)
        commit(
            deltas,
            {
                "region": region,
                "round": round_,
                "tokens": tokens,
                "loss": float(np.mean(losses)),
                "payload": payload_array(msg.payload),
            },
            round_,
        )
        commit(
            local_writer,
            {
                "round": round_,
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
                "residual": dict(codec.residual),
            },
            round_,
            tier="full",
        )
        log.info("worker %s: round %d delta committed (%d bytes)", region, round_, len(msg.payload))
        rounds.append(
            {
                "round": round_,
                "steps": n,
                "loss": float(np.mean(losses)),
                "delta_bytes": len(msg.payload),
            }
        )
        newest = _next_global(role, global_store, round_)
        if newest == round_ + 1 and updates.exists(f"manifests/{newest:012d}.weights.json"):
            upd = payload_bytes(read(updates, newest).state["payload"])
            global_params = apply_update(global_params, upd)
            how = "update"
        else:
            global_params = dict(read(global_store, newest).state["weights"])
            how = "global checkpoint"
        log.info("worker %s: now at global round %d (from the %s)", region, newest, how)
        rounds[-1]["next_from"] = how
        _load(model, global_params)
        round_ = newest
    result = {"region": region, "rounds": rounds, "final_round": round_}
    role.write_result(result)
    return result
