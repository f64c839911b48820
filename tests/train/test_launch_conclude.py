"""The train step's one exit from its ranks' records (burst.train.launch.conclude)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from burst.stepio import RANK_DOC
from burst.train.launch import RanksFailed, conclude


def records(tmp: Path, codes: dict[int, int], doc: dict | None = None) -> Path:
    for r, code in codes.items():
        error = None if code == 0 else f"rank {r} said exit {code}"
        (tmp / f"rank-{r}.json").write_text(
            json.dumps({"rank": r, "exit_code": code, "error": error})
        )
    if doc is not None:
        (tmp / RANK_DOC).write_text(json.dumps(doc))
    return tmp


def test_all_ranks_done_returns_rank_0s_document(tmp_path: Path) -> None:
    assert conclude(records(tmp_path, {0: 0, 1: 0}, {"final_step": 5}), [0, 1], 0) == {
        "final_step": 5
    }


def test_ranks_done_before_a_late_kill_are_done(tmp_path: Path) -> None:
    """Kill trial 401: a rank SIGKILLed after writing its record; torchrun exits 1."""
    assert conclude(records(tmp_path, {0: 0, 1: 0}, {"final_step": 5}), [0, 1], 1) == {
        "final_step": 5
    }


def test_all_preempted_is_75_with_the_document(tmp_path: Path) -> None:
    with pytest.raises(RanksFailed) as err:
        conclude(records(tmp_path, {0: 75, 1: 75}, {"final_step": 3}), [0, 1], 1)
    assert err.value.exit_code == 75 and "every rank exited 75" in err.value.one_line()
    assert err.value.doc == {"final_step": 3}


def test_a_killed_rank_is_named_and_requeued(tmp_path: Path) -> None:
    with pytest.raises(RanksFailed) as err:
        conclude(records(tmp_path, {0: 75}), [0, 1], 1)
    assert err.value.exit_code == 75
    assert "rank(s) 1 " in err.value.one_line() and "left no exit record" in str(err.value)


def test_a_rank_s_own_failure_wins_over_peers_stopped_or_killed(tmp_path: Path) -> None:
    """Bad input on rank 1 is exit 2, not a requeue, even if rank 0 was killed meanwhile."""
    with pytest.raises(RanksFailed) as err:
        conclude(records(tmp_path, {1: 2, 2: 75}), [0, 1, 2], 1)
    assert err.value.exit_code == 2 and err.value.one_line().startswith("rank 1:")
