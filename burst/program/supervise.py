"""The train loop's ``training.command`` mode: the user's program trains, burst keeps its
checkpoints and handles the notices.

``burst.train.loop.TrainRun`` opens the attempt as in every mode (notice watchers, trainer
lease, attempt records, the run's checkpoint store and writer) and hands over to ``supervise``
instead of running its own steps:

1. the checkpoint directory (node-local: the pod's ``burst-runs`` emptyDir) is emptied and the
   newest committed checkpoint restored into it (an older one when it does not verify);
   ``BURST_RESUME_FROM`` points at it;
2. the program starts with the environment contract (``burst.program.contract``), in a
   session of its own;
3. a watcher (``burst.program.watcher``) hands each complete checkpoint the program saves to
   the writer in the background: chunks, manifest-last commit, retention (as any save);
4. a stop notice: the notice file is written, each process of the program that handles
   ``training.notice_signal`` gets it (``burst.program.tree``: torchrun's workers, a shell's
   children, ...; recorded in ``program.notified``); burst waits for a new checkpoint to commit
   or the deadline to near, stops the program and exits 75 (requeue), reporting the work lost
   when the program did not save in time;
5. the program's exit: 0 -> the last checkpoint commits, replication, exit 0; non-zero -> the
   step fails with the program's code and the line that carries its error (not requeued); a
   worker its launcher reports killed by signal N -> the step exits 128 + N, as a program
   killed so (``burst.program.exits``: recovery restarts a SIGKILL);
6. the store down for good (every save refused for longer than the retry window,
   ``BURST_CHECKPOINT_RETRY_S``): burst stops the program and exits 4, as the built-in loop
   does; a budget stop exits 3.

Every ending but the program's own failure is the loop's (``burst.train.endings``): the same
outcome, message and exit code in both modes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from burst.budget import BudgetExceeded
from burst.documents import TrainDocument
from burst.documents.base import Detail
from burst.documents.train import EmergencySave
from burst.documents.train import Notice as NoticeRecord
from burst.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    EXIT_INFRA,
    EXIT_PREEMPTED,
    EXIT_REFUSED,
    CheckpointError,
)
from burst.obs.events import PREEMPTION, emit
from burst.preempt.emergency import RESERVE_S
from burst.preempt.notice import Notice
from burst.preempt.watch import Watchers
from burst.program import contract
from burst.program.exits import error_line, killed_worker
from burst.program.process import Program, expand, program_argv, program_env
from burst.program.snapshot import Snapshot, is_program_state, resumed_step, write_entry
from burst.program.tree import Proc
from burst.program.watcher import DirWatcher, Handed
from burst.settings import current
from burst.storage.base import StoreError
from burst.train import endings, wrapup
from burst.train.checkpoints import RunCheckpoints, SaveAbandoned
from burst.train.endings import ProgramFailed
from burst.train.preemption import exit_by

if TYPE_CHECKING:
    from burst.train.loop import TrainRun

log = logging.getLogger(__name__)

#: seconds the program gets between SIGTERM and SIGKILL when burst stops it
STOP_S = 2.0
POLL_S = 0.1
#: after a notice, how often burst looks for processes that installed a handler since
RENOTIFY_S = 0.5
#: file times come from the kernel's coarse clock, a tick behind time.time()
MTIME_SLACK_S = 0.02
#: exit codes that mean something to burst's retry policy: a program's own is reported as 1
RESERVED = frozenset({EXIT_BAD_INPUT, EXIT_REFUSED, EXIT_INFRA, EXIT_PREEMPTED})


def checkpoint_dir(run_dir: Path) -> Path:
    """Node-local: under the run directory, which the pod keeps on its emptyDir."""
    return run_dir / "program" / "checkpoints"


def restore_newest(store: RunCheckpoints, directory: Path) -> tuple[Path, int] | None:
    """Empty ``directory`` and restore the newest committed checkpoint that verifies into it."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    if store.latest("full") is None:
        return None
    restored = store.mgr.restore(tier="full", fallback=True)
    if not is_program_state(restored.state):
        raise CheckpointError(
            f"the checkpoint of step {restored.step} was not saved by a training.command "
            "program (a run started with training.entrypoint): start a new run",
            where=store.location,
        )
    path = write_entry(restored.state, directory)
    log.info("restored the checkpoint of step %d into %s", restored.step, path)
    # the step the framework's own state in the restored files names (its global_step)
    return path, resumed_step(path, restored.step)


class Supervisor:
    def __init__(self, run: TrainRun, store: RunCheckpoints, watchers: Watchers) -> None:
        self.trainer = run
        self.job = run.job
        self.records = run.records
        self.record = run.records.record
        self.store = store
        self.board = watchers.board
        self.watchers = watchers
        self.work = run.run_dir / "program"
        self.dir = checkpoint_dir(run.run_dir)
        self.notice_file = self.work / "notice.json"
        self.start_step = 0
        self.warnings: list[str] = []
        # the record's ``program`` detail, kept whole here (its keys are the program's own)
        self.program_info: dict[str, Any] = {}
        self.program: Program | None = None
        self.watcher = DirWatcher(self.dir, self._hand)
        # several nodes (a gang): node 0's directory is the run's checkpoint; the other nodes
        # restore it and run their part, committing nothing (their saves would race node 0's)
        self.commits = not current().gang or os.environ.get("RANK", "0") == "0"

    # ---------------------------------------------------------------- checkpoints

    def _hand(self, snap: Snapshot) -> None:
        """The watcher's hand-over: the snapshot to the run's checkpoint writer."""
        self.record.saving_step = snap.step
        self.store.save_via(lambda: self.store.mgr.save(snap.step, snap.state(), "full"))
        log.info(
            "program checkpoint %s (%s, step %d, %d bytes) handed to the writer",
            snap.name,
            snap.format,
            snap.step,
            snap.nbytes,
        )
        self.records.learn(self.store)

    def _committed_step(self) -> int | None:
        last = self.store.mgr.status().last_committed
        return None if last is None else last.step

    # ---------------------------------------------------------------- the attempt

    def run(self) -> TrainDocument:
        restored = restore_newest(self.store, self.dir)
        resume: Path | None = None
        if restored is not None:
            resume, self.start_step = restored
            self.watcher.known(resume)
        self.record.engine = "program"
        self.record.world_size = self.job.training.world_size
        self.record.resumed_from = self.start_step
        self.record.watchers = self.watchers.names
        self.program_info = {}
        self._note_program(
            command=list(self.job.training.command or []),
            launcher=self.job.training.launcher,
            checkpoint_dir=str(self.dir),
            resume_from=str(resume) if resume else None,
        )
        self.records.schedule.start_at(self.start_step)
        with contextlib.suppress(FileNotFoundError):
            self.notice_file.unlink()
        env = program_env(
            self.job, self.trainer.run_id, self.dir, self.notice_file, resume, self._deadline()
        )
        # --preempt-at-step: the program's own steps are counted (the demo's program half)
        env.update(self.trainer.demo.program_env(env, self.work, os.getpid(), self.start_step))
        argv = expand(program_argv(self.job), env)
        self.trainer._first_step(self.start_step)
        self.program = Program(argv, env, self.work / "program.log")
        if self.commits:
            self.watcher.start()
        try:
            return self._watch(self.program)
        finally:
            self.watcher.stop()
            if self.program.poll() is None:
                self.program.stop(STOP_S)
            else:
                self.program.end_the_rest()

    def _deadline(self) -> float | None:
        """When the step must end (budget.max_hours left), for ``BURST_STEP_DEADLINE``."""
        guard = self.records.guard
        left_h = guard.max_hours - guard.hours()
        return time.time() + max(0.0, left_h) * 3600.0

    def _watch(self, program: Program) -> TrainDocument:
        expect = self.job.training.checkpoint.expect_within_s
        since = program.started
        next_budget = 0.0
        while True:
            code = program.poll()
            if code is not None:
                return self._exited(program)
            if self.watcher.error is not None:
                self._watcher_failed(program, self.watcher.error)
            notice = self.board.stop_notice()
            if notice is not None:
                self._preempted(program, notice)
            now = time.time()
            if self.watcher.handed:
                since = max(since, self.watcher.handed[-1].at)
            if now - since > expect:
                self._warn(
                    f"no complete checkpoint from the program in {now - since:.0f}s "
                    f"(training.checkpoint.expect_within_s: {expect:g}); what it trains now is "
                    f"lost on a preemption (checkpoint directory {self.dir})"
                )
                since = now
            committed = self._committed_step()
            if committed is not None:
                self.record.at_step = committed
                # a program whose steps the demo cannot count (no torch optimizer): once a
                # checkpoint of step N or later has committed
                for n in sorted(self.trainer.demo.wanted):
                    if n <= committed:
                        self.trainer.demo.maybe_fire(n)
            down = self.store.down_for_good()  # (the writer's status: no store access)
            if down is not None:
                self._store_down(program, down)
            if now >= next_budget:
                next_budget = now + 1.0
                try:
                    self.records.guard.check()
                except BudgetExceeded as exc:
                    self._over_budget(program, exc)
            time.sleep(POLL_S)

    def _watcher_failed(self, program: Program, error: BaseException) -> None:
        """The watcher's hand-over raised ``error``. A hand-off given up (``SaveAbandoned``)
        is no bad input: the store down for good ends the attempt as the loop's does (exit
        4); a stop notice is acted on next (the watcher watches on); anything else is
        raised."""
        if not isinstance(error, SaveAbandoned):
            raise error
        down = self.store.down_for_good()
        if down is None and self.board.stop_notice() is None:
            down = error.message  # (given up at the bound: the store did not take the save)
        if down is not None:
            self._store_down(program, down)
        self.watcher.error = None
        self.watcher.start()

    def _warn(self, message: str) -> None:
        log.warning("%s", message)
        self.warnings.append(message)
        self._note_program(warnings=self.warnings)

    def _note_program(self, **fields: Any) -> None:
        """Add ``fields`` to the record's ``program`` detail."""
        self.program_info.update(fields)
        self.record.program = Detail.model_validate(self.program_info)

    # ---------------------------------------------------------------- endings

    def _final_commit(self, bound: float | None = None) -> str | None:
        """Stop watching, take what the stopped program left complete, wait for the commit;
        the failure in words, or None."""
        self.watcher.stop()
        try:
            # (within the bound: the hand-off waits for the save in flight until the notice's
            # deadline, and gives up then, one line, never a failed step)
            with self.store.bound(bound):
                if self.commits and (bound is None or time.time() < bound):
                    self.watcher.scan(final=True)
                self.store.commit()
        except (CheckpointError, StoreError) as exc:
            return exc.one_line()
        finally:
            self.records.learn(self.store)
        return None

    def _program_record(self, program: Program, code: int | None, **more: Any) -> None:
        reported = self.watcher.resumed_step()  # the adapter's word: where training resumed
        if reported is not None:
            self.record.resumed_from = reported
        self._note_program(
            exit_code=code,
            log=str(program.log_path),
            log_tail=list(program.tail),
            checkpoints_seen=[
                {"name": h.name, "step": h.step, "format": h.format, "bytes": h.nbytes}
                for h in self.watcher.handed
            ],
            not_committed={k: v for k, v in self.watcher.skipped.items()},
            **({"warnings": self.warnings} if self.warnings else {}),
            **more,
        )

    def _exited(self, program: Program) -> TrainDocument:
        code = program.exit_code()
        program.end_the_rest()
        program.finish_output()
        self.watcher.outputs = code == 0  # a clean end: its outputs commit with the last save
        problem = self._final_commit()
        # a worker killed by a signal under a launcher that exits 1 for it (torchrun): the
        # program was killed, as a plain program killed so is (128 + N: restarted on a kill)
        killed = killed_worker(program.recent) if 0 < code < 128 else None
        self._program_record(
            program, code, **({"killed_worker": killed.as_dict()} if killed else {})
        )
        latest = self.store.latest()
        final = latest.step if latest is not None else self.start_step
        if code != 0:
            last = error_line(program.recent)
            if killed is not None:
                step_code = 128 + killed.signum
                why = f" (reported as {step_code}, as a program killed by {killed.signal_name})"
                last = f"{killed.who} was killed by {killed.signal_name}"
            else:
                step_code = EXIT_FAILURE if code in RESERVED else code
                why = (
                    f" (reported as {step_code}: {code} is one of burst's own codes)"
                    if step_code != code
                    else ""
                )
            message = (
                f"training.command exited {code}"
                + why
                + (f": {last}" if last else "")
                + "; the last committed checkpoint: "
                + (f"step {final}" if latest is not None else "none")
                + f"; log: {program.log_path}"
            )
            log.error("%s", message)
            self.record.outcome = "failed"
            self.record.error = message
            self.record.ended_at_step = final
            self.records.finish(self.store)
            fail = ProgramFailed(message, step_code)
            fail.doc = self.records.doc(self.store, final)
            raise fail
        nothing = self.watcher.nothing_committed() if latest is None and self.commits else None
        if nothing is not None:  # one line naming the directory (teardown waits for nothing)
            log.error("%s", nothing)
            self.record.outcome = "failed"
            self.record.error = nothing
            self.record.ended_at_step = final
            self.records.finish(self.store)
            empty = ProgramFailed(nothing, EXIT_BAD_INPUT)
            empty.doc = self.records.doc(self.store, final)
            raise empty
        if problem is not None:
            endings.lost_save(
                self.records, self.store, final, problem, "the program's last checkpoint"
            )
        replica = wrapup.replicate(self.job, self.trainer.run_id, self.store)
        if replica is not None:
            self.record.replica = Detail.model_validate(replica)
        return endings.done(self.records, self.store, final)

    def _saved_since(self, before: int, received: float) -> list[Handed]:
        """The checkpoints handed since the notice (after the first ``before``) that the
        program wrote after it (their newest file): a periodic save the watcher saw complete
        only after the notice, under load, is no save on the notice (the program is then
        still saving its own, and stopping it there lost every step since)."""
        return [h for h in self.watcher.handed[before:] if h.saved_at >= received - MTIME_SLACK_S]

    def _preempted(self, program: Program, notice: Notice) -> None:
        """Tell the program, wait for its checkpoint (or the deadline), stop it, exit 75."""
        received = time.time()
        deadline = notice.deadline if notice.deadline is not None else received + 30.0
        self.records.metrics.record_preemption()
        emit(
            log,
            PREEMPTION,
            train_step=self._committed_step(),
            source=notice.source,
            seconds_left=deadline - received,
        )
        contract.write_notice(
            self.notice_file, contract.Notice(deadline_unix=deadline, reason=notice.source)
        )
        signame = self.job.training.notice_signal
        notified = self._notify(program, signame, [])
        self.trainer.demo.notified()
        if not notified:
            log.warning(
                "no process of the program handles %s (yet): it trains on until it is stopped "
                "or installs a handler",
                signame,
            )
        before = len(self.watcher.handed)
        stop_by = deadline - RESERVE_S - STOP_S
        log.warning(
            "preemption notice from %s: %s sent to the program; waiting up to %.1fs for its "
            "checkpoint",
            notice.source,
            self.job.training.notice_signal,
            max(0.0, stop_by - received),
        )
        look_again = time.time() + RENOTIFY_S
        while time.time() < stop_by and program.poll() is None:
            if self._saved_since(before, received) and not self.store.busy():
                break
            if time.time() >= look_again:  # a process that installed its handler since
                look_again = time.time() + RENOTIFY_S
                notified = self._notify(program, signame, notified)
            time.sleep(POLL_S)
        code = program.stop(min(STOP_S, max(0.1, deadline - RESERVE_S - time.time())))
        problem = self._final_commit(exit_by(notice))
        stopped = time.time()
        latest = self.store.latest()
        saved_after = [
            h for h in self._saved_since(before, received) if latest and h.step <= latest.step
        ]
        lost: dict[str, Any]
        if saved_after:  # it stopped training to save: nothing after that save was trained
            lost = {"lost_seconds": 0.0, "lost_gpu_seconds": 0.0, "lost_steps": 0}
        else:
            lost = self._lost(program, latest.step if latest else None, stopped)
        self._program_record(program, code, saved_on_notice=bool(saved_after), **lost)
        if not saved_after:
            log.warning(
                "the program saved no checkpoint after the notice: about %s steps and %.0f "
                "GPU-seconds are lost (resumes from %s)",
                lost.get("lost_steps", "?"),
                lost["lost_gpu_seconds"],
                f"step {latest.step}" if latest else "the start",
            )
        rec = self.record
        rec.notice = NoticeRecord.model_validate(notice.as_dict())
        rec.emergency_save = EmergencySave.model_validate(
            {
                "tier": "program",
                "reason": "the program's own save on the notice"
                if saved_after
                else "the program saved nothing after the notice: the last committed stands",
                "committed": bool(saved_after) and problem is None,
                "committed_step": latest.step if latest else None,
                "in_flight_step": self.store.mgr.status().in_flight,
                **({"error": problem} if problem else {}),
            }
        )
        rec.notice_to_exit_s = round(time.time() - notice.received_at, 3)
        endings.preempted(
            self.records,
            self.store,
            latest.step if latest else self.start_step,
            f"preempted by {notice.source}: the program "
            + (f"saved step {saved_after[-1].step}" if saved_after else "saved nothing new")
            + f"; the last committed checkpoint: {latest.step if latest else 'none'}; "
            f"exit {EXIT_PREEMPTED} to requeue",
        )

    def _notify(self, program: Program, signame: str, notified: list[Proc]) -> list[Proc]:
        """The notice signal to the processes of the program that handle it and did not get
        it yet; all that got it, recorded (``attempts[].program.notified``: pid, name,
        command line)."""
        sent = program.notify(signame, skip=[p.pid for p in notified])
        if sent or "notified" not in self.program_info:
            shown = [{"pid": p.pid, "name": p.name, "command": p.command()} for p in sent]
            notified = [*notified, *sent]
            self._note_program(
                notified_pids=[p.pid for p in notified],
                notified=[*(self.program_info.get("notified") or []), *shown],
            )
        return notified

    def _lost(self, program: Program, committed: int | None, stopped: float) -> dict[str, Any]:
        """The work after the last committed checkpoint: seconds, GPU-seconds, and steps
        (estimated from the pace between this attempt's checkpoints)."""
        mine = [h for h in self.watcher.handed if committed is not None and h.step <= committed]
        saved_at = mine[-1].saved_at if mine else program.started
        lost_s = max(0.0, stopped - saved_at)
        out: dict[str, Any] = {
            "lost_seconds": round(lost_s, 3),
            "lost_gpu_seconds": round(lost_s * self.job.compute.gpu_count, 3),
        }
        points = [(float(self.start_step), program.started)] + [
            (float(h.step), h.saved_at) for h in mine
        ]
        (s0, t0), (s1, t1) = points[0], points[-1]
        if len(points) > 1 and t1 > t0 and s1 > s0:
            out["lost_steps"] = round((s1 - s0) / (t1 - t0) * lost_s)
        return out

    def _over_budget(self, program: Program, exc: BudgetExceeded) -> None:
        log.error("%s: stopping the program", exc.message)
        code = program.stop(STOP_S)
        problem = self._final_commit()
        # the final save's failure, if any, in the program detail (the record has no field
        # of its own for it)
        self._program_record(program, code, **({"save_error": problem} if problem else {}))
        latest = self.store.latest()
        endings.over_budget(
            self.records, self.store, exc, latest.step if latest else self.start_step
        )

    def _store_down(self, program: Program, why: str) -> None:
        """The store refused every save for longer than the retry window: what the program
        trains from here could not be kept. Stop it (no final save: the store is not asked
        again) and end as the loop does (exit 4, outcome ``store-down``)."""
        log.error("%s: stopping the program", why)
        code = program.stop(STOP_S)
        self.watcher.stop()
        self._program_record(program, code)
        committed = self._committed_step()
        endings.store_down(
            self.records, self.store, why, committed if committed is not None else self.start_step
        )


def supervise(run: TrainRun, store: RunCheckpoints, watchers: Watchers) -> TrainDocument:
    return Supervisor(run, store, watchers).run()
