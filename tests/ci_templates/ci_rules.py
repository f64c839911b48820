"""Rule checks for the CI templates, beyond what their JSON Schemas (and actionlint) can say:
no stored keys, cloud access through OIDC only (pinned to a protected environment), teardown
always runs where the CI job owns the run (`burst run`), and never under a running workflow
where Argo owns it (`burst submit`: `burst finish`, with `argo stop` on cancel), a token that
is renewed while following, job-level concurrency, a run id stable across re-runs, a GitLab
include that leaves the host's stages, rules and variables alone, the report kept. Each check
returns a list of problems (empty when the template follows the rules)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

SHA_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
STATIC_KEY_NAMES = re.compile(
    r"aws[-_]access[-_]key[-_]id|aws[-_]secret[-_]access[-_]key|aws[-_]session[-_]token|"
    r"GOOGLE_APPLICATION_CREDENTIALS|AZURE_CLIENT_SECRET",
    re.IGNORECASE,
)
TEARDOWN = re.compile(r"python -m (?:burst\.)?steps\.teardown\b.*--run-id")
FINISH = re.compile(r"\bburst finish\b.*--token-command")
FOLLOW = re.compile(r"\bburst status\b.*--follow")
LAUNCH = re.compile(r"\bburst (run|submit)\b")


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    steps = job.get("steps")
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


def _always(cond: Any) -> bool:
    return (
        isinstance(cond, str) and re.search(r"\balways\(\)", cond) is not None and "&&" not in cond
    )


def _even_on_failure(cond: Any) -> bool:
    """Runs after a failed step: always(), or !cancelled() (GitHub adds no success())."""
    return isinstance(cond, str) and bool(re.search(r"always\(\)|!\s*cancelled\(\)", cond))


def check_github(doc: dict[str, Any], text: str) -> list[str]:
    problems: list[str] = []
    # PyYAML reads the key `on` as True.
    on = _triggers(doc)
    if not isinstance(on, dict) or "workflow_dispatch" not in on:
        problems.append("trigger: workflow_dispatch missing")
    pr = on.get("pull_request") if isinstance(on, dict) else None
    if not isinstance(pr, dict) or "labeled" not in (pr.get("types") or []):
        problems.append("trigger: pull_request with types [labeled] missing")
    if isinstance(on, dict) and "pull_request_target" in on:
        problems.append("trigger: pull_request_target runs fork code with secrets; not allowed")
    if "secrets." in text:
        problems.append("stored secrets referenced (secrets.*): use OIDC and variables")
    if STATIC_KEY_NAMES.search(text):
        problems.append("static cloud key named in the workflow")
    if doc.get("permissions") not in ({}, "read-all", {"contents": "read"}):
        problems.append("top-level permissions must be empty or read-only")
    if "concurrency" in doc:
        problems.append(
            "concurrency: workflow-level (any other label's run would cancel a queued run); "
            "put it on the launching jobs"
        )
    run_id = str((doc.get("env") or {}).get("BURST_RUN_ID", ""))
    if "run_attempt" in run_id or "github.run_id" not in run_id:
        problems.append("BURST_RUN_ID must be stable across re-runs (github.run_id only)")

    jobs = doc.get("jobs") or {}
    launchers = 0
    for name, job in jobs.items():
        if not isinstance(job, dict):
            continue
        where = f"job {name}"
        if "timeout-minutes" not in job:
            problems.append(f"{where}: timeout-minutes missing")
        elif str(job.get("runs-on", "")).startswith("ubuntu-") and not (
            isinstance(job["timeout-minutes"], int) and job["timeout-minutes"] <= 360
        ):
            problems.append(f"{where}: GitHub-hosted jobs stop at 360 minutes; set at most that")
        steps = _steps(job)
        perms = job.get("permissions") or {}
        for i, st in enumerate(steps):
            uses = st.get("uses")
            if uses and not SHA_PIN.match(str(uses).split(" ")[0]):
                problems.append(f"{where} step {i}: action {uses} is not pinned by commit SHA")
            if (
                uses
                and str(uses).startswith("actions/checkout@")
                and (st.get("with") or {}).get("persist-credentials") is not False
            ):
                problems.append(f"{where} step {i}: checkout must set persist-credentials: false")
            if uses and "configure-aws-credentials" in str(uses):
                if not (st.get("with") or {}).get("role-to-assume"):
                    problems.append(f"{where} step {i}: AWS access without role-to-assume")
                if perms.get("id-token") != "write":
                    problems.append(f"{where}: uses OIDC but lacks permissions id-token: write")
            run = st.get("run")
            if isinstance(run, str) and "${{" in run:
                problems.append(
                    f"{where} step {i}: expression inside run: (script injection);"
                    " pass it through env:"
                )
        if perms.get("id-token") == "write" and not job.get("environment"):
            problems.append(
                f"{where}: OIDC without a protected environment (the role's trust must name "
                "environment:<name>, not any ref)"
            )
        runs = [(i, str(s.get("run", ""))) for i, s in enumerate(steps)]
        launch = [i for i, r in runs if LAUNCH.search(r)]
        if not launch:
            continue
        launchers += 1
        conc = job.get("concurrency")
        if not isinstance(conc, dict) or "github." not in str(conc.get("group", "")):
            problems.append(f"{where}: concurrency: a group per run (spec and ref) is missing")
        elif conc.get("cancel-in-progress") is not False:
            problems.append(f"{where}: concurrency: cancel-in-progress must be false")
        first = launch[0]
        submits = "burst submit" in " ".join(r for _, r in runs)
        if submits:
            problems += _github_submit_end(where, steps, runs, first)
            ends = [i for i, r in runs if FINISH.search(r) and i > first]
        else:
            ends = [i for i, r in runs if TEARDOWN.search(r) and i > first]
            if not ends:
                problems.append(f"{where}: no teardown step after the launch")
            for i in ends:
                if not _always(steps[i].get("if")):
                    problems.append(f"{where} step {i}: teardown must run with if: always()")
        for i in ends[:1]:
            creds = [
                j
                for j in range(first + 1, i)
                if "configure-aws-credentials" in str(steps[j].get("uses", ""))
            ]
            if not creds or not all(_always(steps[j].get("if")) for j in creds):
                problems.append(
                    f"{where}: credentials are not refreshed (if: always()) before teardown"
                )
        uploads = [s for s in steps if "upload-artifact" in str(s.get("uses", ""))]
        if not any(
            _always(s.get("if")) and "report" in str((s.get("with") or {}).get("path"))
            for s in uploads
        ):
            problems.append(f"{where}: the report is not uploaded with if: always()")
        if "burst run" in " ".join(r for _, r in runs):
            labels = job.get("runs-on")
            labels = labels if isinstance(labels, list) else [labels]
            if "self-hosted" not in labels or "gpu" not in labels:
                problems.append(f"{where}: burst run must target a self-hosted gpu runner")
    if launchers < 2:
        problems.append("both modes (burst submit and burst run) must be present")
    return problems


def _github_submit_end(
    where: str, steps: list[dict[str, Any]], runs: list[tuple[int, str]], first: int
) -> list[str]:
    """Argo owns a submitted run: the job follows it with a renewed token, and at its end
    `burst finish` decides (teardown only a finished workflow; `argo stop` if cancelled);
    a direct teardown could destroy under a running workflow."""
    problems = []
    if any(TEARDOWN.search(r) for _, r in runs):
        problems.append(f"{where}: teardown under a submitted workflow; use burst finish")
    if not any(FOLLOW.search(r) and "--token-command" in r for _, r in runs):
        problems.append(f"{where}: the follow loop does not renew its token (--token-command)")
    ends = [i for i, r in runs if FINISH.search(r) and i > first]
    plain = [i for i in ends if "--cancelled" not in runs[i][1]]
    cancel = [i for i in ends if "--cancelled" in runs[i][1]]
    if not plain or not all(_even_on_failure(steps[i].get("if")) for i in plain):
        problems.append(f"{where}: no burst finish that runs after a failure (!cancelled())")
    if not cancel or not all(
        re.search(r"(?<!!)cancelled\(\)", str(steps[i].get("if"))) for i in cancel
    ):
        problems.append(f"{where}: no burst finish --cancelled when the job is cancelled")
    return problems


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base.get(k), v) if k in base else v
        return out
    return over


def resolve_gitlab(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Jobs with ``extends`` merged in (GitLab's deep merge of hashes), hidden keys dropped."""

    def resolve(name: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
        job = doc.get(name)
        if not isinstance(job, dict) or name in seen:
            return {}
        parents = job.get("extends", [])
        parents = [parents] if isinstance(parents, str) else parents
        merged: dict[str, Any] = {}
        for p in parents:
            merged = _merge(merged, resolve(p, (*seen, name)))
        return _merge(merged, {k: v for k, v in job.items() if k != "extends"})

    reserved = {
        "workflow",
        "variables",
        "stages",
        "default",
        "include",
        "image",
        "services",
        "before_script",
        "after_script",
        "cache",
    }
    return {
        n: resolve(n)
        for n, j in doc.items()
        if isinstance(j, dict) and not n.startswith(".") and n not in reserved
    }


def flat(script: Any) -> list[str]:
    if isinstance(script, str):
        return [script]
    if isinstance(script, list):
        return [line for item in script for line in flat(item)]
    return []


BUILTIN_STAGES = (".pre", ".post")


def _gitlab_always(job: dict[str, Any]) -> bool:
    """Every rule that adds the job adds it when: always (rules that leave it out, when:
    never, e.g. on an unprotected ref, do not count)."""
    rules = job.get("rules")
    if isinstance(rules, list) and rules:
        adding = [r for r in rules if not (isinstance(r, dict) and r.get("when") == "never")]
        return bool(adding) and all(
            isinstance(r, dict) and r.get("when") == "always" for r in adding
        )
    return job.get("when") == "always"


def check_gitlab(doc: dict[str, Any], text: str) -> list[str]:
    problems: list[str] = []
    if STATIC_KEY_NAMES.search(text):
        problems.append("static cloud key named in the template")
    for key in ("workflow", "stages", "variables"):
        if key in doc:
            problems.append(
                f"global {key}: an include must not change the host project's {key}; "
                "put it on the burst jobs"
            )
    jobs = resolve_gitlab(doc)
    modes = set()
    launchers = []
    for name, job in jobs.items():
        where = f"job {name}"
        if job.get("stage") not in BUILTIN_STAGES:
            problems.append(f"{where}: stage {job.get('stage')!r} may not exist in the host")
        rules = str(job.get("rules"))
        if "merge_request_event" not in rules or '"web"' not in rules:
            problems.append(f"{where}: rules: manual (web) and merge-request label triggers")
        script = " ".join(flat(job.get("script")))
        if not LAUNCH.search(script):
            continue
        launchers.append(name)
        modes.add(LAUNCH.search(script).group(1))  # type: ignore[union-attr]
        after = flat(job.get("after_script"))
        if "burst submit" in script:
            if any(TEARDOWN.search(line) for line in after):
                problems.append(f"{where}: teardown under a submitted workflow; use burst finish")
            if not any(FINISH.search(line) and "CI_JOB_STATUS" in " ".join(after)
                       for line in after):  # fmt: skip
                problems.append(f"{where}: no burst finish (cancel-aware) in after_script")
            if not FOLLOW.search(script) or "--token-command" not in script:
                problems.append(f"{where}: the follow loop does not renew its token")
        elif not any(TEARDOWN.search(line) for line in after):
            problems.append(f"{where}: no teardown in after_script")
        tokens = job.get("id_tokens") or {}
        if not tokens or not all(isinstance(t, dict) and t.get("aud") for t in tokens.values()):
            problems.append(f"{where}: no OIDC id_tokens with an audience")
        if job.get("interruptible") is not False:
            problems.append(f"{where}: must set interruptible: false")
        art = job.get("artifacts") or {}
        if art.get("when") != "always":
            problems.append(f"{where}: artifacts must be kept when: always")
        if "burst run" in script:
            tags = job.get("tags") or []
            if "gpu" not in tags or "rubin" not in tags:
                problems.append(f"{where}: burst run must run on runners tagged gpu and rubin")
            if not job.get("resource_group"):
                problems.append(f"{where}: resource_group missing")
    if modes != {"run", "submit"}:
        problems.append("both modes (burst submit and burst run) must be present")
    backstop = [
        (n, j)
        for n, j in jobs.items()
        if any(TEARDOWN.search(line) for line in flat(j.get("script")))
    ]
    if not backstop:
        problems.append("no teardown job")
    for n, j in backstop:
        if not _gitlab_always(j):
            problems.append(f"job {n}: the teardown job must have when: always")
        needs = {x.get("job") if isinstance(x, dict) else x for x in j.get("needs") or []}
        if not set(launchers) <= needs:
            problems.append(f"job {n}: the teardown job must come after training (needs)")
        if not (j.get("id_tokens") or {}):
            problems.append(f"job {n}: the teardown job has no OIDC id_tokens")
        art = j.get("artifacts") or {}
        if art.get("when") != "always" or "report" not in str(art.get("paths")) + str(
            j.get("script")
        ):
            problems.append(f"job {n}: the report must be kept as an artifact when: always")
    return problems


# -- issue 28: installs, namespace, time limits and credential lifetimes -------------------
#: deploy/kustomization.yaml's namespace: where the templates and the runs live
ASKS_ARGO = re.compile(r"\bburst (submit|status|finish)\b")
VALIDATE = re.compile(r"\bburst validate\b(?![^\n]*--offline)")


def _job_text(job: dict[str, Any]) -> str:
    """Every command a job runs (GitHub steps' run:, GitLab's scripts)."""
    parts = [str(s.get("run", "")) for s in _steps(job)]
    for key in ("before_script", "script", "after_script"):
        parts += flat(job.get(key))
    return "\n".join(parts)


def _installs_torch(text: str) -> bool:
    return bool(re.search(r"pip install[^\n]*(torch|TORCH_SPEC)|TORCH_SPEC[^\n]*pip install", text))


def install_problems(jobs: dict[str, dict[str, Any]], namespace: str) -> list[str]:
    """What each job runs, it installs: ``burst validate`` without ``--offline`` builds the
    entrypoint (imports torch) and probes the stores (needs the cloud role); the training
    extras need torch installed first (DeepSpeed builds against it; pyproject.toml lists torch
    nowhere); a job that asks Argo names the namespace deploy/ installs into (burst's default
    is ``argo``: burst.runner.argo.DEFAULT_NAMESPACE) and, when it renews its token with
    ``aws eks get-token``, installs the AWS CLI."""
    out = []
    for name, job in jobs.items():
        text = _job_text(job)
        env = {**(job.get("env") or {}), **(job.get("variables") or {})}
        if VALIDATE.search(text) and not _installs_torch(text):
            out.append(f"job {name}: burst validate (not --offline) needs torch, not installed")
        if ".[train]" in text + str(env) and not _installs_torch(text):
            out.append(f"job {name}: installs .[train] without torch first")
        if ASKS_ARGO.search(text):
            ns = str(env.get("ARGO_NAMESPACE", ""))
            if namespace not in ns:
                out.append(f"job {name}: asks Argo without ARGO_NAMESPACE {namespace}")
            if "ARGO_SERVER" not in env:
                out.append(f"job {name}: asks Argo without ARGO_SERVER")
            uses_cli = "--token-command" in text and "get-token" in str(env) + text
            has_cli = re.search(r"pip install[^\n]*awscli", text) or any(
                "configure-aws-credentials" in str(s.get("uses", "")) for s in _steps(job)
            )
            if uses_cli and not has_cli and not str(job.get("runs-on", "")).startswith("ubuntu"):
                out.append(f"job {name}: renews its token with the AWS CLI it never installs")
    return out


def time_limit_problems(doc: dict[str, Any]) -> list[str]:
    """GitHub: a job that reaches its own timeout-minutes ends *cancelled* (conclusion
    cancelled, "The job has exceeded the maximum execution time"), so its cancelled()-gated
    steps run: a submit job whose follow step can last until the job's limit would stop the
    live workflow (`burst finish --cancelled`). The follow step needs a shorter limit of its
    own, and continue-on-error (a step's timeout fails that step only)."""
    out = []
    for name, job in (doc.get("jobs") or {}).items():
        steps = _steps(job)
        stops = [s for s in steps if "--cancelled" in str(s.get("run", ""))]
        if not stops:
            continue
        limit = int(job.get("timeout-minutes", 360))
        for s in steps:
            if FOLLOW.search(str(s.get("run", ""))):
                own = s.get("timeout-minutes")
                if not isinstance(own, int) or own > limit - 15:
                    out.append(
                        f"job {name}: the follow step may run into the job's {limit}-minute "
                        "limit, which cancels the job and stops the live run"
                    )
                if s.get("continue-on-error") is not True:
                    out.append(f"job {name}: the follow step's timeout must not fail the job")
    return out


def credential_problems(doc: dict[str, Any]) -> list[str]:
    """GitHub: credentials live as long as the steps that use them. A role session lasts
    role-duration-seconds (configure-aws-credentials' default 3600; STS allows at most the
    role's MaxSessionDuration, 12 h); `burst run` may last the job's timeout-minutes. It needs
    a session that long, or a web identity token file the SDKs re-assume from."""
    out = []
    for name, job in (doc.get("jobs") or {}).items():
        steps = _steps(job)
        runs = [
            i for i, s in enumerate(steps) if re.search(r"\bburst run\b", str(s.get("run", "")))
        ]
        if not runs:
            continue
        limit_s = int(job.get("timeout-minutes", 360)) * 60
        before = steps[: runs[0]]
        renewable = any("AWS_WEB_IDENTITY_TOKEN_FILE" in str(s.get("run", "")) for s in before)
        sessions = [
            int((s.get("with") or {}).get("role-duration-seconds", 3600))
            for s in before
            if "configure-aws-credentials" in str(s.get("uses", ""))
        ]
        if not renewable and (not sessions or sessions[-1] < limit_s):
            out.append(
                f"job {name}: `burst run` may last {limit_s} s; its credentials last "
                f"{sessions[-1] if sessions else 0} s"
            )
    return out


def run_deadline_problems(doc: dict[str, Any], kind: str, deadline_s: int) -> list[str]:
    """A job that runs `burst run` must outlast the run's own deadline (the workflow's:
    train's budget plus the hour provision and teardown get, pipelines.burst_train
    WORKFLOW_DEADLINE_S with the default 24-hour budget). A job that reaches its limit is
    cancelled: burst run gets SIGINT, then SIGTERM 7.5 s later and SIGKILL 2.5 s after that
    (GitHub) or is killed (GitLab), far inside train's 120-second emergency save, and the
    teardown that follows destroys the checkpoint bucket with the run."""
    out = []
    jobs = (doc.get("jobs") or {}) if kind == "github" else resolve_gitlab(doc)
    for name, job in jobs.items():
        if not re.search(r"\bburst run\b", _job_text(job)):
            continue
        if kind == "github":
            limit = int(job.get("timeout-minutes", 360)) * 60
        else:
            # the script's own limit (RUNNER_SCRIPT_TIMEOUT) when it has one
            limit = gitlab_timeout_s(job.get("timeout"))
            script = go_duration_s(
                str((job.get("variables") or {}).get("RUNNER_SCRIPT_TIMEOUT", ""))
            )
            limit = min(limit, int(script)) if script else limit
        if limit < deadline_s + 600:
            out.append(
                f"job {name}: its limit ({limit} s) ends before the run's deadline ({deadline_s} s)"
            )
    return out


# -- CI cancel and protected environments ---------------------------------------------------
# Each check names the documented behaviour it comes from (docs/ci.md, "Rules and the
# documented behaviour behind them").

#: GitHub, workflow cancellation reference: "After the 5 minute cancellation timeout period,
#: the server will forcibly terminate all jobs and steps that are still running."
GITHUB_CANCEL_WINDOW_S = 300
#: GitLab Runner (common/build.go, getStageTimeoutContexts): after_script's limit when
#: RUNNER_AFTER_SCRIPT_TIMEOUT is unset.
GITLAB_AFTER_SCRIPT_DEFAULT_S = 300
#: GitLab Runner (common/build.go, runtimeStateAndError): the values of CI_JOB_STATUS that
#: after_script sees.
GITLAB_JOB_STATUSES = ("success", "failed", "canceled", "timedout")
#: Seconds a cancel path keeps besides its wait: the token, the stop request, the report.
CANCEL_PATH_MARGIN_S = 120
FORK_GATE = re.compile(
    r"github\.event\.pull_request\.head\.repo\.full_name\s*==\s*github\.repository"
)
_ENV_BY_EVENT = re.compile(
    r"^\$\{\{\s*github\.event_name\s*==\s*'([\w-]+)'\s*&&\s*'([\w-]+)'\s*\|\|\s*'([\w-]+)'\s*\}\}$"
)
ASKS_ARGO_CMD = re.compile(r"\bburst (submit|status|finish|cancel)\b")
WAIT = re.compile(r"--wait[ =](\d+(?:\.\d+)?)")
#: after_script taking the script's dotenv file back (sourced, or read line by line)
DOTENV_READ = re.compile(r"(?:^|[;\s])(?:\.|source)\s+\S*burst\.env\b|<\s*burst\.env\b")


def environment_for(value: Any, event: str) -> str | None:
    """The environment a job's ``environment:`` selects for ``event``: a name, or the one
    expression form the templates use (``github.event_name == 'E' && 'A' || 'B'``); None when
    the rules cannot read it."""
    if isinstance(value, dict):
        value = value.get("name")
    if not isinstance(value, str):
        return None
    if "${{" not in value:
        return value
    m = _ENV_BY_EVENT.match(value.strip())
    if m is None:
        return None
    return m.group(2) if event == m.group(1) else m.group(3)


def _triggers(doc: Mapping[Any, Any]) -> dict[str, Any]:
    """The workflow's `on:` (PyYAML reads the key `on` as True)."""
    on = doc.get("on", doc.get(True))
    return on if isinstance(on, dict) else {}


def _needs(job: dict[str, Any]) -> list[str]:
    needs = job.get("needs")
    return [str(n) for n in needs] if isinstance(needs, list) else [str(needs)]


def _oidc_jobs(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        n: j
        for n, j in (doc.get("jobs") or {}).items()
        if isinstance(j, dict) and (j.get("permissions") or {}).get("id-token") == "write"
    }


def github_environment_problems(
    doc: dict[str, Any], environments: dict[str, dict[str, str]], trust: str
) -> list[str]:
    """GitHub: a `pull_request` event runs on refs/pull/<n>/merge, so an environment whose
    deployment branches are the protected ones rejects the job ("Branch refs/pull/<n>/merge
    is not allowed to deploy"); a job that references an environment gets the OIDC subject
    repo:<org>/<repo>:environment:<name>. Every cloud job selects, for each event the workflow
    has, an environment docs/ci.md describes (``environments``: name -> its row); a labelled
    pull request's environment admits any branch and has required reviewers (it runs the
    PR's own code); the role's trust (``trust``: docs/ci.md's text) names each subject."""
    on = _triggers(doc)
    events = [e for e in ("workflow_dispatch", "pull_request") if e in on]
    out = []
    for name, job in _oidc_jobs(doc).items():
        for event in events:
            env = environment_for(job.get("environment"), event)
            where = f"job {name} ({event})"
            if env is None:
                out.append(f"{where}: no environment the rules can read")
                continue
            row = environments.get(env)
            if row is None:
                out.append(f"{where}: environment {env!r} is not documented in docs/ci.md")
                continue
            if f"repo:<org>/<repo>:environment:{env}" not in trust:
                out.append(f"{where}: the documented role trust does not name environment {env}")
            if event == "pull_request":
                if row["branches"].startswith("protected"):
                    out.append(
                        f"{where}: environment {env} admits protected branches only; a "
                        "pull_request job runs on refs/pull/<n>/merge and is rejected"
                    )
                if not row["reviewers"].startswith("yes"):
                    out.append(f"{where}: environment {env} runs a PR's code without a reviewer")
    return out


def github_fork_problems(doc: dict[str, Any]) -> list[str]:
    """GitHub withholds id-token: write from workflows of pull requests from forks: a cloud
    job a fork's labelled pull request could start fails at its credentials step. Its `if:`
    (or that of the job whose outputs its `if:` reads) admits same-repository pull requests
    only."""
    on = _triggers(doc)
    if "pull_request" not in on:
        return []
    jobs = doc.get("jobs") or {}
    out = []
    for name, job in _oidc_jobs(doc).items():
        cond = str(job.get("if", ""))
        gates = [cond] + [
            str((jobs.get(n) or {}).get("if", ""))
            for n in re.findall(r"needs\.([\w-]+)\.outputs", cond)
        ]
        if not any(FORK_GATE.search(g) for g in gates):
            out.append(f"job {name}: a fork's pull request can start it, without an OIDC token")
    return out


def _job_timeout_s(job: dict[str, Any]) -> int:
    return int(job.get("timeout-minutes", 360)) * 60


def github_cancel_problems(doc: dict[str, Any]) -> list[str]:
    """GitHub gives a cancelled job's remaining steps (always(), cancelled()) 5 minutes, then
    ends them (GITHUB_CANCEL_WINDOW_S); a job whose `if:` holds always() starts after a cancel
    and has its own limit. So: (a) the teardown of a `burst run` job also runs in a job of its
    own that needs it (always(), OIDC, the same environment, a limit past the window); (b) a
    step that stops a workflow after a cancel waits for it no longer than the window leaves
    (`burst finish --cancelled --wait`)."""
    jobs = doc.get("jobs") or {}
    out = []
    for name, job in jobs.items():
        if not isinstance(job, dict):
            continue
        for st in _steps(job):
            run = str(st.get("run", ""))
            if FINISH.search(run) and "--cancelled" in run:
                m = WAIT.search(run)
                wait = float(m.group(1)) if m else 1800.0
                if wait + CANCEL_PATH_MARGIN_S > GITHUB_CANCEL_WINDOW_S:
                    out.append(
                        f"job {name}: burst finish --cancelled may wait {wait:.0f} s; GitHub "
                        f"ends a cancelled job's steps after {GITHUB_CANCEL_WINDOW_S} s"
                    )
        if not any(re.search(r"\bburst run\b", str(s.get("run", ""))) for s in _steps(job)):
            continue
        backstops = [
            (n, j)
            for n, j in jobs.items()
            if isinstance(j, dict)
            and name in _needs(j)
            and re.search(r"\balways\(\)", str(j.get("if", "")))
            and any(TEARDOWN.search(str(s.get("run", ""))) for s in _steps(j))
        ]
        if not backstops:
            out.append(
                f"job {name}: after a cancel its teardown step gets {GITHUB_CANCEL_WINDOW_S} s; "
                "no teardown job (needs it, if: always()) finishes the teardown"
            )
        for n, j in backstops:
            if (j.get("permissions") or {}).get("id-token") != "write":
                out.append(f"job {n}: the teardown job has no OIDC token (id-token: write)")
            if str(j.get("environment")) != str(job.get("environment")):
                out.append(f"job {n}: the teardown job's environment is not job {name}'s")
            if _job_timeout_s(j) <= GITHUB_CANCEL_WINDOW_S:
                out.append(f"job {n}: the teardown job's limit is no longer than the window")
    return out


def github_result_problems(doc: dict[str, Any]) -> list[str]:
    """GitHub: `continue-on-error: true` lets the job pass when the step fails (the step's
    outcome is failure, its conclusion success). On the follow step it keeps a step timeout
    (the run handed over to Argo) from failing the job, and also hid `burst status` exit 1
    (the workflow failed) behind a green job. The step must record its exit status and a
    later step, run after failures, must fail the job on it."""
    out = []
    for name, job in (doc.get("jobs") or {}).items():
        steps = _steps(job) if isinstance(job, dict) else []
        for i, st in enumerate(steps):
            run = str(st.get("run", ""))
            if not (FOLLOW.search(run) and st.get("continue-on-error") is True):
                continue
            sid = st.get("id")
            later = [
                s
                for s in steps[i + 1 :]
                if sid
                and _even_on_failure(s.get("if"))
                and f"steps.{sid}.outputs." in str(s.get("env", "")) + str(s.get("run", ""))
                and "exit" in str(s.get("run", ""))
            ]
            if not sid or "GITHUB_OUTPUT" not in run or not later:
                out.append(
                    f"job {name}: the follow step's failure (the workflow failed) never fails "
                    "the job (continue-on-error without a later step re-raising its status)"
                )
    return out


# GitLab rules:if, the subset the templates use: $VAR, "text", /regex/, ==, !=, =~, !~, &&,
# ||, parentheses.
_TOKEN = re.compile(
    r"\s*(?:(\$\w+)|\"([^\"]*)\"|'([^']*)'|/((?:\\/|[^/])*)/(\w*)|(==|!=|=~|!~|&&|\|\||\(|\)))"
)


def _tokens(expr: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    expr = expr.strip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"cannot read rules:if {expr!r} at {pos}")
        var, dq, sq, rx, flags, op = m.groups()
        if var:
            out.append(("var", var[1:]))
        elif dq is not None or sq is not None:
            out.append(("str", dq if dq is not None else sq))
        elif rx is not None:
            out.append(("re", re.compile(rx.replace("\\/", "/"), re.I if "i" in flags else 0)))
        else:
            out.append(("op", op))
        pos = m.end()
    return out


def gitlab_if(expr: str, env: dict[str, str]) -> bool:
    """Evaluate a rules:if expression against ``env`` (unset variables are null)."""
    toks = _tokens(expr)
    pos = 0

    def peek() -> tuple[str, Any] | None:
        return toks[pos] if pos < len(toks) else None

    def take() -> tuple[str, Any]:
        nonlocal pos
        pos += 1
        return toks[pos - 1]

    def value(tok: tuple[str, Any]) -> Any:
        return env.get(tok[1]) if tok[0] == "var" else tok[1]

    def atom() -> bool:
        tok = take()
        if tok == ("op", "("):
            res = disj()
            take()
            return res
        left = value(tok)
        nxt = peek()
        if nxt and nxt[0] == "op" and nxt[1] in ("==", "!=", "=~", "!~"):
            op = take()[1]
            right = value(take())
            if op in ("==", "!="):
                return (left == right) == (op == "==")
            found = left is not None and right.search(str(left)) is not None
            return found == (op == "=~")
        return bool(left)

    def conj() -> bool:
        res = atom()
        while peek() == ("op", "&&"):
            take()
            res = atom() and res
        return res

    def disj() -> bool:
        res = conj()
        while peek() == ("op", "||"):
            take()
            res = conj() or res
        return res

    return disj()


def gitlab_job_runs(job: dict[str, Any], env: dict[str, str]) -> bool:
    """Whether GitLab adds the job to a pipeline with these variables: the first rule whose
    `if` holds decides (when: never leaves it out); no rule holding leaves it out."""
    rules = job.get("rules")
    if not isinstance(rules, list):
        return job.get("when") != "never"
    for rule in rules:
        if not isinstance(rule, dict):
            continue
        if "if" not in rule or gitlab_if(str(rule["if"]), env):
            return rule.get("when", "on_success") != "never"
    return False


#: Pipelines on a ref that is not protected: a labelled merge request (its pipeline runs on
#: refs/merge-requests/<iid>/head, or the source branch: not protected), a pipeline started by
#: hand or by the API on a branch, a schedule targeting one.
UNPROTECTED_PIPELINES: tuple[dict[str, str], ...] = (
    {"CI_PIPELINE_SOURCE": "merge_request_event", "CI_MERGE_REQUEST_LABELS": "burst"},
    {"CI_PIPELINE_SOURCE": "web"},
    {"CI_PIPELINE_SOURCE": "api"},
    {"CI_PIPELINE_SOURCE": "schedule", "BURST_REAP": "1"},
)


def gitlab_protected_ref_problems(doc: dict[str, Any]) -> list[str]:
    """GitLab: an ID token's sub is project_path:<group>/<project>:ref_type:<type>:ref:<ref>,
    and the documented role trusts protected refs only; protected CI/CD variables exist only
    in pipelines on protected refs (a merge request pipeline's is not protected, unless both
    branches are and the project protects such pipelines). A job with id_tokens therefore
    never joins a pipeline whose CI_COMMIT_REF_PROTECTED is not "true"."""
    out = []
    for name, job in resolve_gitlab(doc).items():
        if not job.get("id_tokens"):
            continue
        defaults = {k: str(v) for k, v in (job.get("variables") or {}).items()}
        for pipeline in UNPROTECTED_PIPELINES:
            for mode in ("submit", "run"):
                env = {**defaults, "BURST_MODE": mode, **pipeline}
                env["CI_COMMIT_REF_PROTECTED"] = "false"
                if gitlab_job_runs(job, env):
                    out.append(
                        f"job {name}: runs on an unprotected ref ({pipeline['CI_PIPELINE_SOURCE']}"
                        f" pipeline), where the role's trust refuses its ID token"
                    )
                    break
    return out


_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")
_GL_DURATION = re.compile(r"(\d+)\s*(hours?|h|minutes?|mins?|m|seconds?|s)\b")


def go_duration_s(text: str) -> float | None:
    """RUNNER_*_TIMEOUT values are Go durations (time.ParseDuration: 1h, 25h30m, 40s)."""
    text = text.strip()
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(a + b for a, b in parts) != text:
        return None
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def gitlab_timeout_s(text: Any, default: int = 3600) -> int:
    """A job's `timeout:` (GitLab reads it with ChronicDuration: "26 hours 30 minutes")."""
    parts = _GL_DURATION.findall(str(text or ""))
    if not parts:
        return default
    unit = {"h": 3600, "m": 60, "s": 1}
    return sum(int(n) * unit[u[0]] for n, u in parts)


def gitlab_after_script_problems(doc: dict[str, Any], teardown_deadline_s: int) -> list[str]:
    """GitLab runs after_script in a new shell with the job's variables only (variables
    exported by before_script/script are gone), under its own limit: RUNNER_AFTER_SCRIPT_TIMEOUT,
    5 minutes by default, within what is left of the job's timeout; after_script does not run
    once the job's timeout has passed (it does when RUNNER_SCRIPT_TIMEOUT ends the script and
    both limits fit in the job's). A cancelled pipeline cancels the jobs that have not started
    (the teardown job too): a launching job's after_script is its whole cancel path. So:
    every command that asks Argo gets its token in its own shell (ARGO_TOKEN assigned there,
    or --token-command); a variable the script set is set again before after_script reads
    it; after_script's limit holds its teardown (the run's teardown deadline) or its stop
    (--wait plus a margin); a job whose after_script tears down bounds its script so that
    after_script also runs when the script runs out of time."""
    out = []
    for name, job in resolve_gitlab(doc).items():
        variables = {k: str(v) for k, v in (job.get("variables") or {}).items()}
        before = flat(job.get("before_script")) + flat(job.get("script"))
        after = flat(job.get("after_script"))
        for section, lines in (("script", before), ("after_script", after)):
            token = False
            for line in lines:
                if re.search(r"(^|[;\s])(export\s+)?ARGO_TOKEN=", line):
                    token = True
                m = ASKS_ARGO_CMD.search(line)
                if m and not token and (m.group(1) == "submit" or "--token-command" not in line):
                    out.append(
                        f"job {name}: `burst {m.group(1)}` in {section} has no Argo token in "
                        "that shell (ARGO_TOKEN unset, no --token-command)"
                    )
        if after:
            written = set()
            for line in before:
                if "burst.env" in line and "printf" in line:
                    written |= set(re.findall(r"(\w+)=%s", line))
            reads_env = any(DOTENV_READ.search(line) for line in after)
            set_before = {
                n for line in before for n in re.findall(r"(?:^|[;\s])(?:export\s+)?(\w+)=", line)
            }
            set_after = {
                n for line in after for n in re.findall(r"(?:^|[;\s])(?:export\s+)?(\w+)=", line)
            } | (written if reads_env else set())
            used = {n for line in after for n in re.findall(r"\$\{?(\w+)", line)}
            # a job variable the script set again is back at the job's value there
            lost = sorted((used & set_before) - set_after)
            if lost:
                out.append(
                    f"job {name}: after_script reads {', '.join(lost)} as the script set it: "
                    "after_script runs in a new shell, with the job's variables only"
                )
            raw = variables.get("RUNNER_AFTER_SCRIPT_TIMEOUT")
            limit = go_duration_s(raw) if raw else GITLAB_AFTER_SCRIPT_DEFAULT_S
            if limit is None:
                out.append(f"job {name}: RUNNER_AFTER_SCRIPT_TIMEOUT {raw!r} is no Go duration")
                continue
            text = "\n".join(after)
            if TEARDOWN.search(text) and limit < teardown_deadline_s:
                out.append(
                    f"job {name}: after_script tears down within {limit:.0f} s; the run's "
                    f"teardown may take {teardown_deadline_s} s (RUNNER_AFTER_SCRIPT_TIMEOUT)"
                )
            for line in after:
                if FINISH.search(line) and "cancelled" in line:
                    m = WAIT.search(line)
                    wait = float(m.group(1)) if m else 1800.0
                    if wait + CANCEL_PATH_MARGIN_S > limit:
                        out.append(
                            f"job {name}: burst finish may wait {wait:.0f} s in an after_script "
                            f"limited to {limit:.0f} s"
                        )
            if TEARDOWN.search(text):
                script = go_duration_s(variables.get("RUNNER_SCRIPT_TIMEOUT", "") or "0s")
                total = gitlab_timeout_s(job.get("timeout"))
                if not script or script + limit > total:
                    out.append(
                        f"job {name}: when the job reaches its timeout GitLab skips after_script "
                        "(its teardown): RUNNER_SCRIPT_TIMEOUT + RUNNER_AFTER_SCRIPT_TIMEOUT "
                        "must fit in the job's timeout"
                    )
    return out


def gitlab_version_problems(doc: dict[str, Any]) -> list[str]:
    """GitLab runs after_script on a cancel from GitLab 17.0, and GitLab Runner sets
    CI_JOB_STATUS=canceled there from 17.0 (gitlab-runner e82d9a6e9): with older ones a
    cancelled launch job leaves its workflow, or its nodes, running. A job that launches a
    run and relies on after_script checks both versions before it launches."""
    out = []
    for name, job in resolve_gitlab(doc).items():
        script = flat(job.get("script"))
        launch = [i for i, line in enumerate(script) if LAUNCH.search(line)]
        if not launch or not flat(job.get("after_script")):
            continue
        guard = "\n".join(script[: launch[0]])
        if not (
            "CI_SERVER_VERSION_MAJOR" in guard and "CI_RUNNER_VERSION" in guard and "17" in guard
        ):
            out.append(
                f"job {name}: launches without checking GitLab and GitLab Runner >= 17.0 "
                "(after_script on cancel)"
            )
    return out


def documented_environments(markdown: str) -> dict[str, dict[str, str]]:
    """docs/ci.md's table of GitHub environments: | `name` | jobs | deployment branches |
    required reviewers | OIDC subject |."""
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"`[\w-]+`", cells[0]) and "environment:" in cells[4]:
            rows[cells[0].strip("`")] = {
                "jobs": cells[1],
                "branches": cells[2].lower(),
                "reviewers": cells[3].lower(),
                "subject": cells[4],
            }
    return rows


def gitlab_retry_problems(doc: dict[str, Any]) -> list[str]:
    """GitLab merges a host pipeline's `default:` keywords into every job that does not set
    them: a `default: retry` would run a failed (or timed-out) launching job again, which
    submits a second workflow beside a first that may still run, or rents the nodes again
    after the teardown. A launching job sets `retry: 0` itself."""
    out = []
    for name, job in resolve_gitlab(doc).items():
        if LAUNCH.search(" ".join(flat(job.get("script")))) and job.get("retry") not in (
            0,
            {"max": 0},
        ):
            out.append(f"job {name}: launches a run and may be retried by a host's default: retry")
    return out
