"""Every environment variable burst reads, declared once: name, type, default, one line of meaning.

The style is dstack's ``settings.py``: one module, one typed declaration per variable, one
reference table generated from it (the README's configuration section; a test fails when the
two differ). No other module reads ``os.environ`` for a ``BURST_*`` variable (a test greps).

The environment is read once, at the edge: the CLI (``burst ...``) and ``stepio`` (every
``python -m burst.steps.<name>``) take a snapshot with ``Settings.from_env()`` and install it for
the length of the command with ``use(...)``; library code asks ``current()`` for it. Outside an
edge (a library call from a test or a notebook) ``current()`` takes a fresh snapshot, so
``monkeypatch.setenv`` still works. A snapshot is frozen; each typed attribute parses its raw
text when read and a bad value is one ``BadInputError`` line naming the variable (exit 2).

Regenerate the README table with ``python -m burst.settings --readme README.md``.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, TypeVar, overload

from burst.errors import BadInputError
from burst.inputs import short
from burst.step_names import FAULT_POINTS

T = TypeVar("T")

# Who sets a variable (the README's table lists them in this order).
USER = "user"  # a person or a CI job configures burst with it
FAULT = "fault"  # a test or demo hook (see burst.faults)
INTERNAL = "internal"  # burst sets it for its own steps and pods
DEV = "dev"  # the repository's own tests and make targets


# -- parsers: (name, raw text) -> value; raw text is never empty here ---------------------------


def _text(name: str, raw: str) -> str:
    return raw.strip()


def _path(name: str, raw: str) -> Path:
    return Path(raw.strip())


def _flag(name: str, raw: str) -> bool:
    return raw.strip().lower() not in ("", "0", "false", "no", "off")


def _words(name: str, raw: str) -> tuple[str, ...]:
    """A comma-separated list (blanks dropped)."""
    return tuple(w.strip() for w in raw.split(",") if w.strip())


def _paths(name: str, raw: str) -> tuple[Path, ...]:
    """Paths separated by ``os.pathsep``."""
    return tuple(Path(p) for p in raw.split(os.pathsep) if p.strip())


def _seconds(minimum: float, inclusive: bool) -> Callable[[str, str], float]:
    bound = f"{minimum:g} or more" if inclusive else f"more than {minimum:g}"
    bound = "zero or more" if inclusive and minimum == 0 else bound

    def parse(name: str, raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise BadInputError(f"{name}={short(raw)}: not a number of seconds") from None
        if value < minimum or (value == minimum and not inclusive) or value != value:
            raise BadInputError(f"{name}={short(raw)}: must be {bound} seconds")
        if value == float("inf"):  # "wait for ever" is a hang, not a setting
            raise BadInputError(f"{name}={short(raw)}: must be a finite number of seconds")
        return value

    return parse


def _positive(name: str, raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise BadInputError(f"{name}={short(raw)} is not a number") from None
    if not 0 < value < float("inf"):
        raise BadInputError(f"{name}={short(raw)} must be a positive finite number")
    return value


def _count(name: str, raw: str) -> int:
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise BadInputError(f"{name}={short(raw)} must be a whole number (at most 18 digits)")
    return int(text)


def _choice(*allowed: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        value = raw.strip()
        if value not in allowed:
            raise BadInputError(f"{name}={short(value)} is not one of {', '.join(allowed)}")
        return value

    return parse


def _executable(name: str, raw: str) -> str:
    """A program: a path to an executable file, or a name found on ``PATH``."""
    import shutil

    value = raw.strip()
    found = shutil.which(value)
    if found is None or not Path(found).is_file():
        raise BadInputError(f"{name}={short(value)}: no such executable file")
    return value


def _directory(name: str, raw: str) -> Path:
    """An existing directory."""
    path = Path(raw.strip())
    if not path.is_dir():
        raise BadInputError(f"{name}={short(raw)}: no such directory")
    return path


def _file_or_directory(name: str, raw: str) -> Path:
    """An existing regular file or directory (a FIFO, socket or device is refused: reading one
    blocks or never ends)."""
    path = Path(raw.strip())
    if not (path.is_dir() or path.is_file()):
        what = "not a regular file or directory" if path.exists() else "no such file"
        raise BadInputError(f"{name}={short(raw)}: {what}")
    return path


def _fault_points(name: str, raw: str) -> tuple[str, ...]:
    """Named fault points (``burst.step_names.FAULT_POINTS``): a typo fails the run up front
    instead of arming nothing."""
    words = _words(name, raw)
    for word in words:
        if word not in FAULT_POINTS:
            raise BadInputError(
                f"{name}={short(raw)}: {short(word)} is not a fault point "
                f"({', '.join(FAULT_POINTS)})"
            )
    return words


#: One item of BURST_PREEMPT_AT_STEPS: ``STEP`` or ``STEP:notice`` (a preemption notice, the
#: window BURST_SIGTERM_GRACE_S), ``STEP:notice=SECONDS`` (a notice with that window),
#: ``STEP:node`` (the node is lost, no notice), ``STEP:rank`` (the rank dies, its node stays)
DEMO_EVENT_RE = re.compile(r"^(\d{1,18})(?::(notice(?:=(\d+(?:\.\d+)?))?|node|rank))?$")


def _demo_events(name: str, raw: str) -> str:
    """Comma-separated demo events (``DEMO_EVENT_RE``); the text is kept as given."""
    for item in raw.split(","):
        item = item.strip()
        m = DEMO_EVENT_RE.match(item) if item.isascii() else None
        if item and (m is None or not int(m.group(1)) or m.group(3) == "0"):
            raise BadInputError(
                f"{name}={short(raw)}: {short(item)} is not STEP[:notice[=SECONDS]|:node|:rank] "
                "(STEP 1 or more)"
            )
    return raw.strip()


NO_PATHS: tuple[Path, ...] = ()
NO_WORDS: tuple[str, ...] = ()


# -- the declaration ----------------------------------------------------------------------------


class Var(Generic[T]):
    """One environment variable: its name, parser, default, and one line of meaning."""

    def __init__(
        self,
        name: str,
        parse: Callable[[str, str], T],
        default: T,
        meaning: str,
        *,
        shown: str,
        audience: str = USER,
    ) -> None:
        self.name = name
        self.parse = parse
        self.default = default
        self.meaning = meaning
        self.shown = shown  # the default as the README says it
        self.audience = audience
        self.attr = ""

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr

    @overload
    def __get__(self, obj: None, owner: type) -> Var[T]: ...
    @overload
    def __get__(self, obj: Settings, owner: type) -> T: ...
    def __get__(self, obj: Settings | None, owner: type) -> Var[T] | T:
        if obj is None:
            return self
        raw = obj.raw(self.name)
        if raw is None or not raw.strip():
            return self.default
        return self.parse(self.name, raw)


class Settings:
    """A frozen snapshot of the variables below; each attribute is typed and parsed on read."""

    __slots__ = ("_raw",)
    _raw: Mapping[str, str]

    # -- where things live
    runs_root = Var(
        "BURST_RUNS_ROOT", _path, Path("runs"),
        "where run directories (and the local state store) live", shown="`./runs`",
    )  # fmt: skip
    policies = Var(
        "BURST_POLICIES", _path, None,
        "the policy directory (facts, rules, exceptions, keys)", shown="the checkout's `policies/`",
    )  # fmt: skip
    policies_dir_retired = Var(
        "BURST_POLICIES_DIR", _text, "",
        "retired: no longer read (a warning names `BURST_POLICIES`)", shown="none",
    )  # fmt: skip
    keys_dir_retired = Var(
        "BURST_KEYS_DIR", _text, "",
        "retired: no longer read (keys live in `<BURST_POLICIES>/keys`)", shown="none",
    )  # fmt: skip
    catalog = Var(
        "BURST_CATALOG", _paths, NO_PATHS,
        "catalog files overriding prices, MTBF, links (`os.pathsep`-separated; see"
        " `docs/planning.md`)", shown="none",
    )  # fmt: skip
    # -- Terraform
    terraform_bin = Var(
        "BURST_TERRAFORM_BIN", _executable, "",
        "an external `terraform` or `tofu` binary", shown="embedded Terraform 1.15",
    )  # fmt: skip
    terraform_dir = Var(
        "BURST_TERRAFORM_DIR", _directory, None,
        "the Terraform modules and stacks", shown="the checkout's `terraform/`",
    )  # fmt: skip
    tf_stack = Var(
        "BURST_TF_STACK", _choice("local", "aws", "gcp", "azure", "nebius", "cloud"), "local",
        "`aws`, `gcp`, `azure`, `nebius` apply that provider's stack in `terraform/stacks/` "
        "(the three below); `cloud`: each candidate's provider picks its stack",
        shown="`local`",
    )  # fmt: skip
    tf_state_bucket = Var(
        "BURST_TF_STATE_BUCKET", _text, "",
        "the state bucket of the cloud stacks (azure: `<account>/<container>`), one value or "
        "`aws=...,gcp=...` per stack (aws: also `burst reap`'s state store)",
        shown="none",
    )  # fmt: skip
    tf_state_region = Var(
        "BURST_TF_STATE_REGION", _text, "",
        "the region of that bucket (aws, nebius), one value or per stack", shown="none",
    )  # fmt: skip
    tf_site_vars = Var(
        "BURST_TF_SITE_VARS", _file_or_directory, None,
        "the site's tfvars: a file, or a directory of `<region>.tfvars` / `<stack>.tfvars`",
        shown="none",
    )  # fmt: skip
    tf_timeout_s = Var(
        "BURST_TF_TIMEOUT_S", _seconds(0, inclusive=False), 7200.0,
        "the limit of one Terraform apply or destroy, in seconds", shown="`7200`",
    )  # fmt: skip
    target = Var(
        "BURST_TARGET", _choice("local", "aws", "gcp", "azure", "nebius", "cloud"), "local",
        "not `local`: teardown's leak scan also asks the run's cloud for what carries its run "
        "id (aws: listed; gcp/azure/nebius: `unverified-scan` unless the provider's client "
        "answers)",
        shown="`local`",
    )  # fmt: skip
    reap_regions = Var(
        "BURST_REAP_REGIONS", _words, NO_WORDS,
        "regions `burst reap` scans for tagged resources (comma-separated)", shown="none",
    )  # fmt: skip
    # -- observability
    log_json = Var(
        "BURST_LOG_JSON", _flag, False,
        "JSON-line logs with run id and step on every record", shown="terminal: off; steps: on",
    )  # fmt: skip
    pushgateway = Var(
        "BURST_PUSHGATEWAY", _text, "", "push the steps' metrics to a Pushgateway", shown="none",
    )  # fmt: skip
    # -- images and registries
    steps_image = Var(
        "BURST_STEPS_IMAGE", _text, "",
        "`burst submit`: the steps image, pinned by digest", shown="the template's",
    )  # fmt: skip
    trainer_image = Var(
        "BURST_TRAINER_IMAGE", _text, "",
        "`burst run --containers`: the image train runs in", shown="what `make images` built",
    )  # fmt: skip
    container_store = Var(
        "BURST_CONTAINER_STORE", _path, None,
        "podman's storage and `containers.conf` for `make images` and `burst run --containers`",
        shown="`~/.cache/burst/containers` once `make images` made it, else podman's own",
    )  # fmt: skip
    insecure_registries = Var(
        "BURST_INSECURE_REGISTRIES", _words, NO_WORDS,
        "registries reached over plain HTTP (comma-separated; loopback always is)",
        shown="none",
    )  # fmt: skip
    signing_key_password = Var(
        "BURST_SIGNING_KEY_PASSWORD", _text, "",
        "the password of an encrypted signing key (`burst image sign`; else `COSIGN_PASSWORD`)",
        shown="none",
    )  # fmt: skip
    rclone = Var(
        "BURST_RCLONE", _text, "",
        "the `rclone` binary of the loopback S3 server", shown="the venv's, else `PATH`'s",
    )  # fmt: skip
    # -- checkpoints
    checkpoint_shm_dir = Var(
        "BURST_CHECKPOINT_SHM_DIR", _path, None,
        "a RAM-backed directory for the checkpoint buffer", shown="a memfd, else `/dev/shm`",
    )  # fmt: skip
    checkpoint_log_level = Var(
        "BURST_CHECKPOINT_LOG_LEVEL", _text, "WARNING",
        "the log level of the checkpoint upload worker", shown="`WARNING`",
    )  # fmt: skip
    entrypoint_check_s = Var(
        "BURST_ENTRYPOINT_CHECK_S", _seconds(0, inclusive=False), 120.0,
        "time limit of the check that the entrypoint builds, before renting (at most 3600)",
        shown="`120`",
    )  # fmt: skip
    store_check_s = Var(
        "BURST_STORE_CHECK_S", _seconds(0, inclusive=False), 60.0,
        "time limit of the probe write to the checkpoint stores, before renting (at most 3600)",
        shown="`60`",
    )  # fmt: skip
    sync_wait_s = Var(
        "BURST_SYNC_WAIT_S", _seconds(0, inclusive=True), 120.0,
        "how long teardown waits for the last checkpoint to reach the durable store",
        shown="`120`",
    )  # fmt: skip
    checkpoint_retry_s = Var(
        "BURST_CHECKPOINT_RETRY_S", _seconds(0, inclusive=True), 300.0,
        "how long a failed checkpoint save (dead worker, store down) is retried before "
        "train exits 4", shown="`300`",
    )  # fmt: skip
    # -- one trainer per run, heartbeats (burst.lease)
    lease_ttl_s = Var(
        "BURST_LEASE_TTL_S", _seconds(1, inclusive=True), 180.0,
        "the trainer lease and the run's heartbeats lapse this long after their last renewal "
        "(renewed every quarter of it)", shown="`180`",
    )  # fmt: skip
    lease_settle_s = Var(
        "BURST_LEASE_SETTLE_S", _seconds(0, inclusive=True), None,
        "how long taking a lease waits before reading it back", shown="`2` (`0.2` local store)",
    )  # fmt: skip
    # -- team budgets (burst.admission)
    ledger = Var(
        "BURST_LEDGER", _text, "",
        "the team ledger and budgets (`teams.yaml`): an object store URL",
        shown="`s3://<aws state bucket>/burst/ledger` when `BURST_TF_STATE_BUCKET` names one, "
        "else `<runs root>/ledger`",
    )  # fmt: skip
    kueue_wait_s = Var(
        "BURST_KUEUE_WAIT_S", _seconds(0, inclusive=True), 21600.0,
        "on a cluster with Kueue, how long provision waits in the team's queue for its "
        "Workload's admission before renting anything (then exit 75: requeue)",
        shown="`21600`",
    )  # fmt: skip
    kueue_poll_s = Var(
        "BURST_KUEUE_POLL_S", _seconds(0, inclusive=False), 5.0,
        "how often provision (waiting) and train (for an eviction) read the run's Kueue "
        "Workload, in seconds", shown="`5`",
    )  # fmt: skip
    kueue_redispatch_s = Var(
        "BURST_KUEUE_REDISPATCH_S", _seconds(0, inclusive=False), 60.0,
        "while provision waits in a full Kueue queue, how often it asks dispatch again (with "
        "the time waited): a queue of another candidate with room now takes the run, a pinned "
        "run's once its wait outweighs the move's cost", shown="`60`",
    )  # fmt: skip
    # -- preemption
    dist_timeout_s = Var(
        "BURST_DIST_TIMEOUT_S", _positive, 120.0,
        "with several ranks, the longest a collective waits for a peer (then exit 75)",
        shown="`120`",
    )  # fmt: skip
    sigterm_grace_s = Var(
        "BURST_SIGTERM_GRACE_S", _seconds(0, inclusive=True), 30.0,
        "seconds between SIGTERM and the kill, for the emergency save", shown="`30`",
    )  # fmt: skip
    preempt_watchers = Var(
        "BURST_PREEMPT_WATCHERS", _text, "",
        "metadata watchers: `aws`, `gcp`, `azure` (comma-separated), `provider` or `none`",
        shown="none",
    )  # fmt: skip
    local_preempt_watchers = Var(
        "BURST_LOCAL_PREEMPT_WATCHERS", _text, "none",
        "the watchers of a `burst run` on this machine", shown="`none`",
    )  # fmt: skip
    preempt_poll_s = Var(
        "BURST_PREEMPT_POLL_S", _seconds(0, inclusive=False), 5.0,
        "how often a watcher polls its metadata service, in seconds", shown="`5`",
    )  # fmt: skip
    aws_imds_url = Var(
        "BURST_AWS_IMDS_URL", _text, "http://169.254.169.254",
        "the AWS instance metadata service", shown="`http://169.254.169.254`",
    )  # fmt: skip
    gcp_metadata_url = Var(
        "BURST_GCP_METADATA_URL", _text, "http://metadata.google.internal",
        "the GCP metadata server", shown="`http://metadata.google.internal`",
    )  # fmt: skip
    azure_metadata_url = Var(
        "BURST_AZURE_METADATA_URL", _text, "http://169.254.169.254",
        "the Azure metadata service (Scheduled Events)", shown="`http://169.254.169.254`",
    )  # fmt: skip
    # -- Argo (burst submit, status, reap)
    argo_server = Var(
        "ARGO_SERVER", _text, "", "`burst submit` / `status`: the Argo server URL", shown="none",
    )  # fmt: skip
    argo_token = Var(
        "ARGO_TOKEN", _text, "", "a bearer token for that server", shown="none",
    )  # fmt: skip
    argo_namespace = Var(
        "ARGO_NAMESPACE", _text, "", "the namespace of the template and the runs",
        shown="`argo`",
    )  # fmt: skip
    argo_insecure = Var(
        "ARGO_INSECURE_SKIP_VERIFY", _flag, False,
        "accept a self-signed server certificate (development)", shown="off",
    )  # fmt: skip
    # -- test and demo hooks (named fault points: burst/faults.py)
    fail_at = Var(
        "BURST_FAIL_AT", _fault_points, NO_WORDS,
        "fail these steps or points on purpose (`provision`, `provision:midway`, `teardown`: its "
        "first two destroy attempts)",
        shown="none", audience=FAULT,
    )  # fmt: skip
    simulate_no_capacity = Var(
        "BURST_SIMULATE_NO_CAPACITY", _words, NO_WORDS,
        "regions whose local node group reports no capacity", shown="none", audience=FAULT,
    )  # fmt: skip
    preempt_at_steps = Var(
        "BURST_PREEMPT_AT_STEPS", _demo_events, "",
        "training steps after which a fault is demonstrated, once each: `STEP` a preemption "
        "notice (`STEP:notice=SECONDS`: with that window), `STEP:node` the node lost, "
        "`STEP:rank` the rank killed (training.command: notices only, at the program's "
        "optimizer step N, or once a checkpoint of step N or later has committed when it has "
        "no torch optimizer)",
        shown="none", audience=FAULT,
    )  # fmt: skip
    budget_time_scale = Var(
        "BURST_BUDGET_TIME_SCALE", _positive, 1.0,
        "how many budget seconds one real second counts for", shown="`1`",
        audience=FAULT,
    )  # fmt: skip
    step_pace_s = Var(
        "BURST_STEP_PACE_S", _seconds(0, inclusive=True), 0.0,
        "stretch every training step to at least this many seconds (a long run, for tests)",
        shown="`0`", audience=FAULT,
    )  # fmt: skip
    node_loss = Var(
        "BURST_NODE_LOSS", _words, NO_WORDS,
        "`STEP[@N][+SECONDS]`, comma-separated: `burst run` loses the node under STEP's N-th "
        "pod (0 = first, retries and requeues counted) SECONDS (virtual) in",
        shown="none", audience=FAULT,
    )  # fmt: skip
    checkpoint_fault = Var(
        "BURST_CHECKPOINT_FAULT", _text, "",
        "`POINT[:N]`: kill the checkpoint worker at the N-th hit of a point", shown="none",
        audience=FAULT,
    )  # fmt: skip
    checkpoint_fault_once = Var(
        "BURST_CHECKPOINT_FAULT_ONCE", _text, "",
        "a file: fire the checkpoint fault once across processes (created when it fires)",
        shown="none", audience=FAULT,
    )  # fmt: skip
    checkpoint_fault_action = Var(
        "BURST_CHECKPOINT_FAULT_ACTION", _text, "kill",
        "`kill`, or `pause:DIR`: hold the worker at the point until `DIR/resume` exists",
        shown="`kill`", audience=FAULT,
    )  # fmt: skip
    checkpoint_fault_rank = Var(
        "BURST_CHECKPOINT_FAULT_RANK", _text, "",
        "with several ranks, only rank N's checkpoint worker is killed", shown="every rank's",
        audience=FAULT,
    )  # fmt: skip
    preempt_rank = Var(
        "BURST_PREEMPT_RANK", _count, None,
        "with several ranks, the rank `BURST_PREEMPT_AT_STEPS` signals", shown="the last",
        audience=FAULT,
    )  # fmt: skip
    # -- set by burst in a program's environment for the demo preemption at step N
    # (burst/preempt/program_steps.py, a sitecustomize of the standard library only: it runs
    # in the program's interpreter, which need not have burst)
    demo_record = Var(
        "BURST_DEMO_RECORD", _path, None,
        "training.command with `--preempt-at-step`: the file the step counter records N in",
        shown="none", audience=INTERNAL,
    )  # fmt: skip
    demo_target_pid = Var(
        "BURST_DEMO_TARGET_PID", _count, None,
        "training.command with `--preempt-at-step`: the train step the counter signals",
        shown="none", audience=INTERNAL,
    )  # fmt: skip
    demo_from_step = Var(
        "BURST_DEMO_FROM_STEP", _count, None,
        "training.command with `--preempt-at-step`: the step the program resumed at",
        shown="none", audience=INTERNAL,
    )  # fmt: skip
    demo_notified = Var(
        "BURST_DEMO_NOTIFIED", _path, None,
        "training.command with `--preempt-at-step`: the file burst writes once the notice "
        "was sent (the counter holds its rank until then)", shown="none", audience=INTERNAL,
    )  # fmt: skip
    program_mark = Var(
        "BURST_PROGRAM_MARK", _text, "",
        "training.command: a value of the program's own, by which burst finds every process "
        "of it (burst/program/tree.py)", shown="none", audience=INTERNAL,
    )  # fmt: skip
    # -- set by burst for its own steps
    driver_heartbeat = Var(
        "BURST_DRIVER_HEARTBEAT", _flag, False,
        "a driver renews the run's driver heartbeat: train stops, saving, when it lapses",
        shown="off", audience=INTERNAL,
    )  # fmt: skip
    run_id = Var(
        "BURST_RUN_ID", _text, "", "the run id, on every log record", shown="none",
        audience=INTERNAL,
    )  # fmt: skip
    step = Var(
        "BURST_STEP", _text, "", "the step's name, on every log record", shown="none",
        audience=INTERNAL,
    )  # fmt: skip
    submitted_at = Var(
        "BURST_SUBMITTED_AT", _text, "",
        "when the run was submitted (epoch seconds or ISO 8601): time to first step",
        shown="none", audience=INTERNAL,
    )  # fmt: skip
    region = Var(
        "BURST_REGION", _text, "",
        "the region a regional-sync step provisions (set by the burst-regional template)",
        shown="none", audience=INTERNAL,
    )  # fmt: skip
    region_site = Var(
        "BURST_REGION_SITE", _path, None,
        "what the local runner gives a pod of a region: its store, keys, link emulator "
        "(burst.regional.site)", shown="none", audience=INTERNAL,
    )  # fmt: skip
    pod_dir = Var(
        "BURST_POD_DIR", _path, None,
        "the local runner's directory of this pod: a fault point that loses the node marks "
        "it there", shown="none", audience=INTERNAL,
    )  # fmt: skip
    workflow_team = Var(
        "BURST_WORKFLOW_TEAM", _text, None,
        "the workflow's `team` parameter as the templates hand it to provision, which "
        "refuses a run whose spec names another team before renting "
        "(burst.admission.identity)", shown="none", audience=INTERNAL,
    )  # fmt: skip
    workflow_priority = Var(
        "BURST_WORKFLOW_PRIORITY", _text, None,
        "the workflow's `priority` parameter as the templates hand it to provision, which "
        "refuses a run whose spec names another band before renting "
        "(burst.admission.identity)", shown="none", audience=INTERNAL,
    )  # fmt: skip
    recovery_event = Var(
        "BURST_RECOVERY_EVENT", _choice("start", "requeue", "restart"), "start",
        "what a placement starts on (burst.recovery): the run's first, a requeue after "
        "losses, a restart after a kill", shown="`start`",
        audience=INTERNAL,
    )  # fmt: skip
    # -- set by burst for a user's own program (training.command; burst.program.contract)
    program_checkpoint_dir = Var(
        "BURST_CHECKPOINT_DIR", _path, None,
        "training.command: the node-local directory the program saves its checkpoints into",
        shown="none", audience=INTERNAL,
    )  # fmt: skip
    program_resume_from = Var(
        "BURST_RESUME_FROM", _path, None,
        "training.command, on a resume: the restored checkpoint the program resumes from",
        shown="none", audience=INTERNAL,
    )  # fmt: skip
    program_notice_file = Var(
        "BURST_NOTICE_FILE", _path, None,
        "training.command: the file (JSON: deadline_unix, reason) written on a preemption "
        "notice", shown="none", audience=INTERNAL,
    )  # fmt: skip
    program_notice_signal = Var(
        "BURST_NOTICE_SIGNAL", _text, "SIGUSR1",
        "training.command: the signal the program receives on a notice (training.notice_signal)",
        shown="`SIGUSR1`", audience=INTERNAL,
    )  # fmt: skip
    program_checkpoint_store = Var(
        "BURST_CHECKPOINT_STORE", _text, "",
        "burst.adapters.dcp_storage: the store (URL) a DCP program saves into directly when "
        "none is passed", shown="none", audience=INTERNAL,
    )  # fmt: skip
    program_step_deadline = Var(
        "BURST_STEP_DEADLINE", _text, "",
        "training.command: unix seconds by which the train step must end (budget.max_hours)",
        shown="none", audience=INTERNAL,
    )  # fmt: skip
    gang = Var(
        "BURST_GANG", _flag, False,
        "a gang pod: `burst.steps.train` joins the other nodes' ranks (Volcano's env)", shown="off",
        audience=INTERNAL,
    )  # fmt: skip
    nproc_per_node = Var(
        "BURST_NPROC_PER_NODE", _count, None,
        "a gang pod's ranks (its GPUs)", shown="`training.processes_per_node`",
        audience=INTERNAL,
    )  # fmt: skip
    rank_exit_dir = Var(
        "BURST_RANK_EXIT_DIR", _path, None,
        "where each torchrun rank of the train step records its exit", shown="none",
        audience=INTERNAL,
    )  # fmt: skip
    spec_b64 = Var(
        "BURST_SPEC_B64", _text, "",
        "a gang pod's spec, base64 (read by the pod's shell command)", shown="none",
        audience=INTERNAL,
    )  # fmt: skip
    infra_b64 = Var(
        "BURST_INFRA_B64", _text, "",
        "a gang pod's provision document, base64 (read by the pod's shell command)",
        shown="none", audience=INTERNAL,
    )  # fmt: skip
    plan_b64 = Var(
        "BURST_PLAN_B64", _text, "",
        "a gang pod's plan, base64 (read by the pod's shell command)", shown="none",
        audience=INTERNAL,
    )  # fmt: skip
    peer_addresses = Var(
        "BURST_PEER_ADDRESSES", _text, "",
        "checkpoint.memory_tiers: each node's peer memory server, HOST:PORT in node order, "
        "comma-separated (set by the train step for its ranks: the servers it started, or on "
        "a gang pod the pods' DNS names and BURST_PEER_PORT)", shown="none", audience=INTERNAL,
    )  # fmt: skip
    peer_port = Var(
        "BURST_PEER_PORT", _count, None,
        "a gang pod: the port of its peer memory sidecar (checkpoint.memory_tiers)",
        shown="none", audience=INTERNAL,
    )  # fmt: skip
    # -- the repository's own tests
    update_goldens = Var(
        "BURST_UPDATE_GOLDENS", _flag, False, "rewrite the Terraform plan golden",
        shown="off", audience=DEV,
    )  # fmt: skip
    checkov_venv = Var(
        "BURST_CHECKOV_VENV", _path, None, "the virtualenv with checkov",
        shown="`~/.cache/burst/venv-checkov-<version>`", audience=DEV,
    )  # fmt: skip

    def __init__(self, raw: Mapping[str, str] | None = None) -> None:
        names = declared_names()
        snapshot = {k: v for k, v in (raw or {}).items() if k in names}
        object.__setattr__(self, "_raw", MappingProxyType(snapshot))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Settings are frozen: build another with replace()")

    def __repr__(self) -> str:
        shown = {k: ("***" if _secret(k) else v) for k, v in self._raw.items()}
        return f"Settings({shown})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Settings) and dict(self._raw) == dict(other._raw)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._raw.items())))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """A snapshot of ``env`` (default: this process's environment)."""
        return cls(os.environ if env is None else env)

    def raw(self, name: str) -> str | None:
        """The text of one variable as it was set (None when unset)."""
        if name not in declared_names():
            raise KeyError(f"{name} is not declared in burst.settings")
        return self._raw.get(name)

    def check(self) -> None:
        """Parse every variable that is set: the first bad one is a ``BadInputError`` line
        (exit 2). A command that starts a run calls it first, so a bad setting fails before
        anything is created or rented rather than in the step that reads it."""
        for var in declared():
            raw = self._raw.get(var.name)
            if raw is not None and raw.strip():
                var.parse(var.name, raw)

    def replace(self, **values: str | None) -> Settings:
        """Another snapshot with these variables (by name) set, or unset when None."""
        for name in values:
            if name not in declared_names():
                raise KeyError(f"{name} is not declared in burst.settings")
        raw = dict(self._raw)
        for name, value in values.items():
            if value is None:
                raw.pop(name, None)
            else:
                raw[name] = value
        return Settings(raw)


def _secret(name: str) -> bool:
    return name.endswith(("TOKEN", "PASSWORD"))


def declared() -> list[Var[Any]]:
    """Every declared variable, in declaration order."""
    return [v for v in vars(Settings).values() if isinstance(v, Var)]


_NAMES: frozenset[str] | None = None


def declared_names() -> frozenset[str]:
    global _NAMES
    if _NAMES is None:
        _NAMES = frozenset(v.name for v in declared())
    return _NAMES


# -- the edge -----------------------------------------------------------------------------------

_installed: list[Settings] = []


def current() -> Settings:
    """The snapshot the edge installed, else a fresh one of this process's environment."""
    return _installed[-1] if _installed else Settings.from_env()


def resolve(given: Settings | Mapping[str, str] | None) -> Settings:
    """``given`` as settings: a snapshot as is, a mapping as an environment, None: ``current()``."""
    if given is None:
        return current()
    if isinstance(given, Settings):
        return given
    return Settings.from_env(given)


def per_stack(raw: str, kind: str) -> str | None:
    """A setting given once for every stack (``value``) or per stack (``aws=v1,gcp=v2``):
    the value for stack ``kind`` (``BURST_TF_STATE_BUCKET``, ``BURST_TF_STATE_REGION``)."""
    raw = raw.strip()
    if "=" not in raw:
        return raw or None
    for part in raw.split(","):
        key, _, value = part.partition("=")
        if key.strip() == kind:
            return value.strip() or None
    return None


@contextlib.contextmanager
def use(snapshot: Settings) -> Iterator[Settings]:
    """Install ``snapshot`` as ``current()`` for the length of a command (the CLI, a step)."""
    depth = len(_installed)
    _installed.append(snapshot)
    try:
        yield snapshot
    finally:
        del _installed[depth:]


def export(name: str, value: str) -> None:
    """Set a variable for this process's children (torchrun, workers) and for ``current()``."""
    if name not in declared_names():
        raise KeyError(f"{name} is not declared in burst.settings")
    os.environ[name] = value
    if _installed:
        _installed[-1] = _installed[-1].replace(**{name: value})


# -- the README's reference table ---------------------------------------------------------------

TABLE_BEGIN = "<!-- settings table: generated by `python -m burst.settings --readme README.md` -->"
TABLE_END = "<!-- end of settings table -->"


def markdown_table(audiences: tuple[str, ...] = (USER, FAULT, INTERNAL, DEV)) -> str:
    """The configuration table of the README, generated from the declarations."""
    lines = ["| variable | default | what |", "|---|---|---|"]
    for audience in audiences:
        for var in declared():
            if var.audience != audience:
                continue
            what = var.meaning if audience == USER else f"{audience}: {var.meaning}"
            lines.append(f"| `{var.name}` | {var.shown} | {what} |")
    return "\n".join(lines)


def readme_with_table(text: str) -> str:
    """``text`` with the block between the table markers replaced by ``markdown_table()``."""
    start = text.find(TABLE_BEGIN)
    end = text.find(TABLE_END)
    if start < 0 or end < start:
        raise BadInputError(f"README: the settings table markers are missing ({TABLE_BEGIN!r})")
    return text[: start + len(TABLE_BEGIN)] + "\n" + markdown_table() + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--readme":
        path = Path(args[1])
        path.write_text(readme_with_table(path.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    print(markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
