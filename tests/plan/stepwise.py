"""An independent, step-by-step reimplementation of the simulator's rules (a test oracle).

It advances one training step at a time instead of jumping between events, so it shares no
control flow with ``burst.plan.goodput.simulate_once``. Integer step counts; trace arrivals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Outcome:
    paid_s: float = 0.0
    lost_s: float = 0.0
    preemptions: int = 0
    emergency_saves: int = 0
    checkpoints: int = 0


def run(
    *,
    steps: int,
    step_s: float,
    every: int,
    c: float,
    u: float,
    notice: float,
    restart: float,
    trace: Sequence[float],
) -> Outcome:
    out = Outcome()
    kills = sorted(trace)
    t = 0.0
    done = 0  # steps done (may be rolled back)
    committed = 0
    since = 0  # steps since the last checkpoint or restore
    upload: tuple[float, int] | None = None  # (ends at, steps it holds)

    def next_kill(after: float) -> float:
        return next((k for k in kills if k > after), math.inf)

    kill = next_kill(0.0)

    def preempt(stopped: bool) -> None:
        nonlocal t, done, committed, since, upload, kill
        saved = False
        if stopped:
            wait = max(0.0, upload[0] - t) if upload else 0.0
            need = wait if (upload and upload[1] == done) else wait + c + u
            if t + need <= kill:
                saved, committed = True, done
                out.emergency_saves += 1
        if not saved and upload and upload[0] <= kill:
            committed = upload[1]
        out.lost_s += (done - committed) * step_s
        if not stopped:
            out.lost_s += kill - t  # the partial step that never ended
        out.preemptions += 1
        t = kill + restart
        done, since, upload = committed, 0, None
        kill = next_kill(t)

    while done < steps:
        notice_at = max(t, kill - notice)
        if since == every:  # a checkpoint falls due at this step boundary
            if upload is not None:
                if upload[0] > notice_at:
                    t = notice_at
                    preempt(stopped=True)
                    continue
                t = max(t, upload[0])
                committed, upload = upload[1], None
            if t + c > kill:
                t = kill
                preempt(stopped=True)
                continue
            t += c
            out.checkpoints += 1
            upload = (t + u, done)
            since = 0
            continue
        # one step
        if t + step_s <= notice_at:
            t += step_s
            done += 1
            since += 1
            if upload is not None and upload[0] <= t:
                committed, upload = upload[1], None
            continue
        if kill - notice <= t:  # the notice is already here: stop at this boundary
            preempt(stopped=True)
        elif t + step_s <= kill:  # it arrives during this step, which still ends in time
            t += step_s
            done += 1
            preempt(stopped=True)
        else:  # the kill comes before the step ends
            preempt(stopped=False)
    out.paid_s = t
    return out
