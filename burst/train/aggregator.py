"""The regional aggregator: waits for the workers' deltas of a round (all of them, or the
round deadline), averages them by tokens, takes the outer step and commits the next global
round through the checkpoint engine.

It runs in the aggregation region and uses only the exchange store. A round ``r``:

1. wait until every region has committed its delta of round ``r`` (``deltas/<region>/``), or
   ``round_deadline_s`` has passed since the round began and at least one usable delta is
   there (otherwise it keeps waiting, at most ``wait_limit_s``);
2. read every delta not consumed before (the newest of each region); the staleness rule
   (``max_staleness``) drops those computed from a global round older than ``r - max_staleness``;
   a region with nothing new is *late* this round;
3. ``aggregate_round``; commit, in this order, the aggregator's state (weights, outer momentum,
   the consumed rounds, the downlink residual, the round history: ``aggregator/``), the
   compressed update (``updates/``) and the global weights (``global/``), each as checkpoint
   ``r + 1``. The aggregator's state is the commit of the round: a restarted aggregator reads
   its newest state, publishes again an update or global checkpoint the crash left out, and
   goes on with the next round; a delta is never applied twice (``consumed``).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import numpy as np
import torch

from burst.admission.kueue_watch import kueue_watcher
from burst.checkpoint.writer import CheckpointWriter
from burst.errors import InfraError, Preempted
from burst.preempt.notice import NoticeBoard
from burst.preempt.watch import start_watchers
from burst.regional.aggregate import DeltaMessage, aggregate_round
from burst.regional.compression import Codec
from burst.regional.defaults import resolve_outer
from burst.regional.outer import NesterovOuterOptimizer, OuterSettings, StalenessRule
from burst.regional.runtime import (
    Role,
    RoleConfig,
    commit,
    newest_step,
    payload_array,
    payload_bytes,
    read,
)
from burst.regional.stores import (
    AGGREGATOR,
    GLOBAL,
    UPDATES,
    delta_series,
)
from burst.train.setup import build_setup

log = logging.getLogger(__name__)


def run_aggregator(cfg: RoleConfig) -> dict[str, Any]:
    """One attempt of the aggregator, under the notice watchers every step has: a notice
    (SIGTERM, a provider's metadata notice) stops it with exit 75 (``Preempted``) before
    the next read of the deltas; its state is committed with every round, so the retry goes
    on from the last committed round."""
    # first: a notice while it starts is kept, not lost (a Kueue eviction too)
    watchers = start_watchers(extra=(kueue_watcher,))
    try:
        return _aggregate(cfg, watchers.board)
    finally:
        watchers.stop()


def _stop_if_noticed(board: NoticeBoard, round_: int) -> None:
    notice = board.stop_notice()
    if notice is not None:
        raise Preempted(
            f"aggregator: stop notice ({notice.source}) at round {round_}: rounds before it "
            "are committed; exit 75 to requeue"
        )


def _aggregate(cfg: RoleConfig, board: NoticeBoard) -> dict[str, Any]:
    role = Role.open(cfg, chunk_cache=False)  # in its own region: nothing crosses
    job, rs = role.job, role.settings
    agg_store, global_store, update_store = (
        role.series(AGGREGATOR),
        role.series(GLOBAL),
        role.series(UPDATES),
    )
    state_w = CheckpointWriter(agg_store, concurrency=2)
    global_w = CheckpointWriter(global_store, concurrency=2)
    update_w = CheckpointWriter(update_store, concurrency=2)
    delta_stores = {r: role.series(delta_series(r)) for r in cfg.regions}
    resolved = resolve_outer(
        rs.outer.optimizer, rs.outer.lr, rs.outer.momentum, len(cfg.regions), cfg.local_steps
    )
    log.info(
        "aggregator: outer %s lr %g momentum %g (%s)",
        rs.outer.optimizer,
        resolved.lr,
        resolved.momentum,
        resolved.basis,
    )
    outer = NesterovOuterOptimizer(
        OuterSettings(
            lr=resolved.lr,
            momentum=resolved.momentum,
            nesterov=resolved.nesterov,
            local_steps=cfg.local_steps,
        )
    )
    downlink = role.codec()
    rule = StalenessRule(max_lag=rs.max_staleness)

    last = newest_step(agg_store)
    history: list[dict[str, Any]]
    consumed: dict[str, int]
    if last is None:
        torch.manual_seed(job.training.seed)
        params = {k: v.detach().clone() for k, v in build_setup(job).model.state_dict().items()}
        round_, consumed, history = 0, {}, []
        _commit_round(state_w, params, outer, consumed, downlink, history, b"", 0)
        commit(global_w, {"round": 0, "weights": params}, 0)
        log.info("aggregator: initial global weights committed as round 0")
    else:
        st = read(agg_store, last).state
        round_ = last
        params = dict(st["weights"])
        outer.load_state_dict(dict(st["momentum"]))
        consumed = {str(k): int(v) for k, v in st["consumed"].items()}
        downlink.residual = dict(st.get("residual") or {})
        history = json.loads(st["history"])
        update = payload_bytes(st["update"])
        log.warning("aggregator: restarted at round %d (from its committed state)", round_)
        if round_ > 0 and newest_step(update_store) != round_:
            commit(update_w, {"round": round_, "payload": payload_array(update)}, round_)
        if newest_step(global_store) != round_:
            commit(global_w, {"round": round_, "weights": params}, round_)
        if history and history[-1]["round"] == round_ - 1:
            history[-1]["aggregator_restarted_after"] = True

    while round_ < cfg.rounds:
        role.links.round = round_
        started = time.monotonic()
        deadline = started + rs.round_deadline_s
        limit = started + cfg.wait_limit_s
        superseded: dict[str, int] = {}  # stale deltas seen, then replaced by a newer one
        while True:
            _stop_if_noticed(board, round_)
            newest = {r: newest_step(s) for r, s in delta_stores.items()}
            fresh = {r: s for r, s in newest.items() if s is not None and s > consumed.get(r, -1)}
            for r, s in fresh.items():
                if s < round_ and not rule.accepts(s, round_):
                    superseded[r] = s
            current = [r for r, s in fresh.items() if s == round_]
            usable = [r for r, s in fresh.items() if rule.accepts(s, round_)]
            now = time.monotonic()
            if len(current) == len(cfg.regions) or (now >= deadline and usable):
                break
            if now > limit:
                raise InfraError(
                    f"aggregator: no usable delta for round {round_} after {cfg.wait_limit_s:g}s"
                )
            time.sleep(cfg.poll_s)
        messages = []
        losses: dict[str, float] = {}
        for r, s in sorted(fresh.items()):
            st = read(delta_stores[r], s).state
            messages.append(
                DeltaMessage(r, int(st["round"]), int(st["tokens"]), payload_bytes(st["payload"]))
            )
            losses[r] = float(st["loss"])
        result = aggregate_round(params, messages, round_, outer, downlink, rule)
        for m in messages:
            consumed[m.region] = m.round
        weights = {m.region: m.tokens for m in messages if m.region in result.accepted}
        total = sum(weights.values())
        late = sorted(set(cfg.regions) - set(fresh))
        record = {
            "round": round_,
            "accepted": list(result.accepted),
            "dropped": list(result.dropped),
            "late": late,
            "staleness": {m.region: round_ - m.round for m in messages},
            # a late delta replaced by the region's next one before it was read: never applied
            "superseded": {r: s for r, s in superseded.items() if fresh.get(r) != s},
            "tokens": result.tokens,
            "delta_bytes": result.bytes_in,
            "update_bytes": result.bytes_out,
            "loss": (sum(losses[r] * n for r, n in weights.items()) / total if total else None),
            "loss_by_region": losses,
            "waited_s": round(time.monotonic() - started, 3),
        }
        history.append(record)
        params = result.params
        round_ = result.round
        _commit_round(state_w, params, outer, consumed, downlink, history, result.update, round_)
        role.fault(f"aggregator-between-commits@{round_}")
        commit(update_w, {"round": round_, "payload": payload_array(result.update)}, round_)
        commit(global_w, {"round": round_, "weights": params}, round_)
        log.info(
            "aggregator: round %d committed (%s accepted, %s dropped, %s late)",
            round_,
            ",".join(result.accepted) or "-",
            ",".join(result.dropped) or "-",
            ",".join(late) or "-",
        )
        role.fault(f"aggregator-after-commit@{round_}")
    digest = _weights_digest(params)
    out = {"final_round": round_, "rounds": history, "final_weights_sha256": digest}
    role.write_result(out)
    return out


def _commit_round(
    writer: CheckpointWriter,
    params: dict[str, torch.Tensor],
    outer: NesterovOuterOptimizer,
    consumed: dict[str, int],
    downlink: Codec,
    history: list[dict[str, Any]],
    update: bytes,
    round_: int,
) -> None:
    commit(
        writer,
        {
            "round": round_,
            "weights": params,
            "momentum": outer.state_dict(),
            "consumed": dict(consumed),
            "residual": dict(downlink.residual),
            "history": json.dumps(history),
            "update": payload_array(update),
        },
        round_,
        tier="full",
    )


def _weights_digest(params: dict[str, torch.Tensor]) -> str:
    import hashlib

    h = hashlib.sha256()
    for k in sorted(params):
        h.update(k.encode())
        h.update(np.ascontiguousarray(params[k].detach().numpy()).tobytes())
    return h.hexdigest()
