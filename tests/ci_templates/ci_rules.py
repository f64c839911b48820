"""Rule checks for the CI templates, beyond what their JSON Schemas (and actionlint) can say:
no stored keys, cloud access through OIDC only (pinned to a protected environment), teardown
always runs where the CI job owns the run (`burst run`), and never under a running workflow
where Argo owns it (`burst submit`: `burst finish`, with `argo stop` on cancel), a token that
is renewed while following, job-level concurrency, a run id stable across re-runs, a GitLab
include that leaves the host's stages, rules and variables alone, the report kept. Each check
returns a list of problems (empty when the template follows the rules)."""

from __future__ import annotations

import re
from typing import Any

SHA_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
STATIC_KEY_NAMES = re.compile(
    r"aws[-_]access[-_]key[-_]id|aws[-_]secret[-_]access[-_]key|aws[-_]session[-_]token|"
    r"GOOGLE_APPLICATION_CREDENTIALS|AZURE_CLIENT_SECRET",
    re.IGNORECASE,
)
TEARDOWN = re.compile(r"python -m steps\.teardown\b.*--run-id")
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
    on = doc.get("on", doc.get(True))
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
    rules = job.get("rules")
    if isinstance(rules, list) and rules:
        return all(isinstance(r, dict) and r.get("when") == "always" for r in rules)
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
    return bool(re.search(r"pip install[^\n]*(torch|TORCH_SPEC)", text))


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
            m = re.match(r"(\d+)\s*hours?", str(job.get("timeout", "")))
            limit = int(m.group(1)) * 3600 if m else 3600
        if limit < deadline_s + 600:
            out.append(
                f"job {name}: its limit ({limit} s) ends before the run's deadline ({deadline_s} s)"
            )
    return out
