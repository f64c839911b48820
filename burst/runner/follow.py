"""Follow a submitted run from CI, and decide at the end of the CI job what may be torn down.

A CI job holds a short-lived Argo token (``aws eks get-token``: about 15 minutes) and sees
transient server errors; neither says anything about the workflow, which keeps training.
So the follow loop gets a fresh token from ``--token-command`` when the old one is refused,
and rides out an unreachable server for ``max_outage_s``. When it cannot follow any more it
says so (exit 4): it never reports the run as failed.

At the end of the job (:func:`finish`), teardown from CI is allowed only when no workflow
drives the run any more: the workflow finished (its exit handler has torn down already; the
CI teardown is the idempotent safety net) or never existed. When the CI job was cancelled
while the workflow runs, the workflow is stopped as ``argo stop`` does, so that its own exit
handler tears down. Anything else (still running, or Argo cannot be asked) leaves the
infrastructure alone: destroying under a running workflow is the one thing never done; the
workflow's deadline, its exit handler and the reaper remain.
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from burst.endings import cancel_message
from burst.errors import BadInputError, InfraError
from burst.runner import DEFAULT_MAX_OUTAGE_S
from burst.runner.argo import (
    ArgoNotFound,
    ArgoSettings,
    ArgoUnauthorized,
    WorkflowState,
    status,
    stop,
)

log = logging.getLogger(__name__)

Decision = Literal["teardown", "stopped", "leave"]


@dataclass
class TokenSource:
    """A command printing a fresh bearer token (``aws eks get-token ... --output text``)."""

    command: str | None

    def refresh(self) -> str:
        if not self.command:
            raise ArgoUnauthorized(
                "the Argo server refused ARGO_TOKEN and no --token-command can renew it"
            )
        try:
            proc = subprocess.run(
                shlex.split(self.command), capture_output=True, text=True, timeout=120, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InfraError(f"--token-command could not run: {exc}") from None
        token = proc.stdout.strip()
        if proc.returncode != 0 or not token:
            raise InfraError(
                f"--token-command exited {proc.returncode} without a token: "
                f"{proc.stderr.strip()[:200]}"
            )
        return token if token.lower().startswith("bearer ") else f"Bearer {token}"


@dataclass
class Follower:
    """Asks Argo for one workflow's state, renewing the token and riding out outages."""

    name: str
    settings: ArgoSettings
    tokens: TokenSource
    max_outage_s: float = DEFAULT_MAX_OUTAGE_S
    interval_s: float = 10.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    answered: bool = False  # the server has answered once: a later refusal is an expiry

    def state(self) -> WorkflowState:
        outage_since: float | None = None
        renewed = False
        while True:
            try:
                st = status(self.name, self.settings)
                self.answered = True
                return st
            except ArgoUnauthorized as exc:
                if renewed or (not self.tokens.command and not self.answered):
                    raise  # a fresh token refused too, or never a good one: bad input
                if not self.tokens.command:
                    raise InfraError(
                        f"{exc.message} after following it (expired) and no --token-command "
                        f"renews it: workflow {self.name} may still be running"
                    ) from None
                log.warning("Argo refused the token: getting a fresh one (--token-command)")
                self.settings = dataclasses.replace(self.settings, token=self.tokens.refresh())
                renewed = True
            except InfraError as exc:
                now = self.clock()
                outage_since = now if outage_since is None else outage_since
                if now - outage_since >= self.max_outage_s:
                    raise InfraError(
                        f"lost the Argo server for {now - outage_since:.0f} s ({exc.message}): "
                        f"workflow {self.name} may still be running"
                    ) from None
                log.warning("Argo server: %s; asking again", exc.message)
                self.sleep(self.interval_s)

    def follow(self, on_state: Callable[[WorkflowState], None]) -> WorkflowState:
        while True:
            st = self.state()
            on_state(st)
            if st.finished:
                return st
            self.sleep(self.interval_s)


def finish(follower: Follower, *, cancelled: bool, wait_s: float = 1800.0) -> Decision:
    """What the CI job may do at its end (see the module's docstring)."""
    try:
        st = follower.state()
    except ArgoNotFound:
        log.info("workflow %s does not exist: nothing drives the run; teardown", follower.name)
        return "teardown"
    except (InfraError, BadInputError) as exc:
        log.error("cannot ask Argo about %s (%s): leaving it alone", follower.name, exc)
        return "leave"
    if st.finished:
        log.info("workflow %s finished (%s): teardown (idempotent)", follower.name, st.phase)
        return "teardown"
    if not cancelled:
        log.error(
            "workflow %s is %s: not tearing down under it (its exit handler will)",
            follower.name,
            st.phase,
        )
        return "leave"
    stop(
        follower.name,
        follower.settings,
        cancel_message("the cancel of the CI job that submitted it"),
    )
    deadline = follower.clock() + wait_s
    while not st.finished and follower.clock() < deadline:
        follower.sleep(follower.interval_s)
        try:
            st = follower.state()
        except (InfraError, BadInputError) as exc:
            log.warning("while waiting for the stop: %s", exc)
    log.info("workflow %s stopped (%s): its exit handler tears down", follower.name, st.phase)
    return "stopped"
