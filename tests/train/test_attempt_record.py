"""The running attempt record is a typed ``TrainAttempt`` (JSON only where it is written): the
JSON it writes is the one the dict-based record wrote. ``attempt_record.golden.json`` holds
what burst wrote before the change for the record built here (every kind of field: nested
notice, emergency save and rank figures, details with keys of their own), closed and, left
running, as the next reader settles it."""

from __future__ import annotations

import json
from pathlib import Path

from burst.attempt_records import next_number, read_file, record_json, settle_unclosed
from burst.documents.base import Detail
from burst.documents.train import (
    CheckpointInterval,
    EmergencySave,
    Notice,
    RankFigures,
    TrainAttempt,
)
from burst.train.attempts import AttemptLog

GOLDEN = json.loads((Path(__file__).parent / "attempt_record.golden.json").read_text())


def _record() -> TrainAttempt:
    """As the train loop builds it (burst.train.records, loop, preemption), field by field."""
    rec = TrainAttempt(started_at="2026-11-27T06:00:00Z", preempted=False)
    rec.attempt = 2
    rec.usd_per_hour = 2.5
    rec.budget_spent_before = {"usd": 0.125, "hours": 0.05}
    rec.engine = "torch"
    rec.world_size = 2
    rec.resumed_from = 4
    rec.watchers = ["local", "aws"]
    rec.losses = []
    for step, loss in ((5, 1.5), (6, 1.25), (7, 1.0)):
        rec.at_step = step
        rec.losses.append(loss)
    advisory = {"source": "aws", "kind": "rebalance", "at_step": 5}
    rec.advisories = [*(rec.advisories or []), Detail.model_validate(advisory)]
    rec.saving_step = 6
    rec.outcome = "preempted"
    rec.preempted = True
    rec.ended_at_step = 7
    rec.notice = Notice.model_validate(
        {"source": "local", "received_at": 1000.5, "deadline": 1030.5, "notice_s": 30.0}
    )
    rec.emergency_save = EmergencySave.model_validate(
        {
            "tier": "weights",
            "reason": "fits",
            "committed": True,
            "committed_step": 7,
            "seconds_left": 29.5,
            "in_flight_step": None,
            "last_committed": {"step": 7, "tier": "weights"},
        }
    )
    rec.notice_to_exit_s = 1.234
    rec.ranks = [
        RankFigures(rank=0, checkpoint_bytes=100, uploaded_bytes=50, stall_s=0.01),
        RankFigures.model_validate(
            {"rank": 1, "checkpoint_bytes": 100, "uploaded_bytes": 60, "stall_s": 0.02}
        ),
    ]
    rec.cost_usd = 0.01
    rec.hours = 0.004
    rec.finished_at = "2026-11-27T06:10:00Z"
    rec.commits = 3
    rec.save_failures = []
    rec.measured = {"step_s": 0.1, "blocking_s": 0.01}
    rec.checkpoint_retries = ["put chunk: timeout"]
    rec.save_meter = {"blocking_s_per_byte": 1e-09, "fixed_s": 0.001, "bytes_per_s": 1000000.0}
    rec.checkpoint_interval = CheckpointInterval.model_validate(
        {
            "mode": "young_daly",
            "interval_steps": 3,
            "interval_s": None,
            "why": "measured",
            "changes": [],
        }
    )
    rec.replica = Detail.model_validate({"region": "us-east-1", "steps": [3, 6]})
    rec.late_notice = None
    rec.error = None
    return rec


def test_the_typed_record_writes_the_json_the_dict_record_wrote(tmp_path: Path) -> None:
    rec = _record()
    # closing it adds what ended it (issue 44: a notice from "local" is a preemption)
    label = ' "recovery_source": "preemption",'
    assert record_json(rec) == GOLDEN["closed"].replace(label, "")
    log = AttemptLog(tmp_path / "train-attempts.jsonl")
    log.append(rec)
    # round trip: what a reader gets back writes the same text again
    (back,) = read_file(tmp_path / "train-attempts.jsonl")
    assert record_json(back) == GOLDEN["closed"]
    assert back.to_json() == json.loads(GOLDEN["closed"])


def test_a_record_left_running_is_settled_as_before() -> None:
    running = TrainAttempt.model_validate_json(
        record_json(_record().model_copy(update={"outcome": "running"}))
    )
    settled = settle_unclosed([running])
    assert json.dumps([r.to_json() for r in settled], sort_keys=True) == GOLDEN["settled"]
    assert settled[0].killed and settled[0].outcome == "died"
    assert next_number(settled) == 3
    assert next_number([]) == 1


def test_a_dead_attempts_record_is_closed_once_for_every_later_reader(tmp_path: Path) -> None:
    """The next attempt closes the records it finds left open, in the store and the local
    copy: a node loss's as a lost node, a killed train's (the placement after it a restart)
    as a failure; the report and its recovery split read the local copy and see them."""
    from burst.storage import open_store

    store = open_store(f"file://{tmp_path / 'store'}")
    local = tmp_path / "train-attempts.jsonl"
    first = AttemptLog(local, store)
    first.begin(_record().model_copy(update={"attempt": 1}))  # then the node goes
    second = AttemptLog(local, store)
    past = second.past()
    assert [r.recovery_source for r in past] == ["node_loss"]
    second.close_dead()
    second.close_dead()  # once only
    (stored,) = AttemptLog(tmp_path / "elsewhere.jsonl", store).read()
    assert (stored.outcome, stored.killed, stored.recovery_source) == ("died", True, "node_loss")
    assert [r.attempt for r in read_file(local)] == [1]
    second.begin(_record().model_copy(update={"attempt": 2}))  # then SIGKILLed: exit 137
    third = AttemptLog(local, store)
    after = third.past(after_restart=True)
    assert [r.recovery_source for r in after] == ["node_loss", "failure"]
    third.close_dead()
    assert [(r.attempt, r.recovery_source) for r in read_file(local)] == [
        (1, "node_loss"),
        (2, "failure"),
    ]
    # the restart placement's next attempt, retried in place after its node was lost: the
    # one kill of its one restart is accounted for, the lost node stays a lost node
    third.begin(_record().model_copy(update={"attempt": 3}))
    fourth = AttemptLog(local, store)
    assert [r.recovery_source for r in fourth.past(after_restart=True, restarts=1)] == [
        "node_loss",
        "failure",
        "node_loss",
    ]
