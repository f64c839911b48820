"""IAM reach: every object URI the train pod writes (and reads back) is allowed by the pod's
rendered IAM policy (terraform/modules/aws-run-iam, the ``pod`` policy document).

The policy document is evaluated directly (not with moto): its statements are read from the
module's HCL, the run's variables substituted, and each request judged as IAM's policy
evaluation logic does for one identity policy without a boundary
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html):
denied unless an Allow statement matches the action and the resource (``*`` and ``?``
wildcards, case-sensitive ARNs) and its conditions hold (``StringLike`` / ``StringEquals``
on ``s3:prefix``, which S3 sets on ListObjects requests). S3 actions per request
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/using-with-s3-actions.html): PUT ->
s3:PutObject, GET -> s3:GetObject, list -> s3:ListBucket; a GET of a missing key without
s3:ListBucket answers 403, not 404.

What the pod writes, from burst's own code: its checkpoint store (the spec's
``storage.checkpoint_uri`` under the run id: chunks, manifests, ``lease/trainer.json``;
burst/train/checkpoints.py. The first version of this test modelled the stack's bucket
instead, which train never writes: the independent walk's finding, tested below with
``run_store_*``; the stack's bucket stays granted), the run's heartbeat
(burst.lease.heartbeat_store + heartbeat_key: the state bucket's
``burst/runs/<run id>/heartbeat/trainer.json``), and, when the namespace's artifact
repository archives logs, its log (Argo's keyFormat).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
MODULE = REPO / "terraform" / "modules" / "aws-run-iam" / "main.tf"
BEFORE = REPO / "tests" / "deploy" / "before"
RUN_ID = "burst-abc12"
STATE_BUCKET = "burst-state-111122223333"
CKPT_BUCKET = "burst-ckpt-abc12"
PREFIX = f"runs/{RUN_ID}/"  # aws-checkpoint-bucket: coalesce(var.checkpoint_prefix, "runs/<id>/")
VARS = {
    "var.run_id": RUN_ID,
    "var.bucket_arn": f"arn:aws:s3:::{CKPT_BUCKET}",
    "var.checkpoint_prefix": PREFIX,
    "var.state_bucket_arn": f"arn:aws:s3:::{STATE_BUCKET}",
    "var.kms_key_arn": "arn:aws:kms:ap-southeast-1:111122223333:key/k",
    "data.aws_region.current.region": "ap-southeast-1",
}


@dataclass
class Statement:
    actions: list[str]
    resources: list[str]
    conditions: list[tuple[str, str, list[str]]] = field(default_factory=list)


def _subst(text: str, local: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        return VARS.get(name) or local.get(name.removeprefix("local."), m.group(0))

    return re.sub(r"\$\{([a-z_.]+)\}", one, text)


def _strings(text: str, local: dict[str, str]) -> list[str]:
    out = []
    for item in re.findall(r'"((?:[^"\\]|\\.)*)"|(var\.[a-z_]+)', text):
        value = item[0] if item[0] else "${" + item[1] + "}"
        out.append(_subst(value, local))
    return out


def pod_statements(path: Path) -> list[Statement]:
    """The ``pod`` policy document's statements, variables substituted (dynamic statements
    whose ``for_each`` tests a variable this test sets are present)."""
    text = path.read_text()
    local = {
        m.group(1): m.group(2)
        for m in re.finditer(r'^\s+([a-z_]+)\s*=\s*"([^"]*)"\s*$', text, re.M)
    }
    local = {k: _subst(v, {}) for k, v in local.items()}
    doc = text.split('data "aws_iam_policy_document" "pod" {', 1)[1].split("\nresource ", 1)[0]
    out = []
    for block in re.split(r"\n  (?:statement|dynamic \"statement\") \{", doc)[1:]:
        actions = re.search(r"actions\s*=\s*\[(.*?)\]", block, re.S)
        resources = re.search(r"resources\s*=\s*\[(.*?)\]", block, re.S)
        assert actions and resources, block
        conds = [
            (c[0], c[1], _strings(c[2], local))
            for c in re.findall(
                r'condition \{\s*test\s*=\s*"(\w+)"\s*variable\s*=\s*"([^"]+)"\s*values\s*=\s*\[(.*?)\]',
                block,
                re.S,
            )
        ]
        out.append(
            Statement(_strings(actions.group(1), local), _strings(resources.group(1), local), conds)
        )
    return out


def allowed(statements: list[Statement], action: str, resource: str, prefix: str = "") -> bool:
    for st in statements:
        if not any(fnmatch.fnmatchcase(action, a) for a in st.actions):
            continue
        if not any(fnmatch.fnmatchcase(resource, r) for r in st.resources):
            continue
        ok = True
        for test, variable, values in st.conditions:
            if variable != "s3:prefix":
                continue
            if test == "StringLike":
                ok = ok and any(fnmatch.fnmatchcase(prefix, v) for v in values)
            elif test == "StringEquals":
                ok = ok and prefix in values
        if ok:
            return True
    return False


def requests(archive_logs: bool) -> list[tuple[str, str, str]]:
    """(action, resource ARN, list prefix) of everything the train pod does in S3."""
    from burst.lease import TRAINER_KEY, heartbeat_key

    ckpt = f"arn:aws:s3:::{CKPT_BUCKET}/{PREFIX}"
    beat = f"burst/runs/{RUN_ID}/heartbeat/"  # burst.lease.heartbeat_store's prefix
    out = [
        ("s3:PutObject", f"{ckpt}{TRAINER_KEY}", ""),
        ("s3:GetObject", f"{ckpt}{TRAINER_KEY}", ""),
        ("s3:PutObject", f"{ckpt}chunks/ab/abcdef", ""),
        ("s3:PutObject", f"{ckpt}manifests/000010.json", ""),
        ("s3:ListBucket", f"arn:aws:s3:::{CKPT_BUCKET}", PREFIX),
        ("s3:PutObject", f"arn:aws:s3:::{STATE_BUCKET}/{beat}{heartbeat_key('trainer')}", ""),
        ("s3:GetObject", f"arn:aws:s3:::{STATE_BUCKET}/{beat}{heartbeat_key('trainer')}", ""),
        ("s3:ListBucket", f"arn:aws:s3:::{STATE_BUCKET}", beat),
    ]
    if archive_logs:
        out.append(
            ("s3:PutObject", "arn:aws:s3:::burst-argo-artifacts/burst/wf/wf-train-1/main.log", "")
        )
    return out


def _archive_logs(path: Path) -> bool:
    doc = yaml.safe_load(path.read_text())
    key = doc["metadata"]["annotations"]["workflows.argoproj.io/default-artifact-repository"]
    return bool(yaml.safe_load(doc["data"][key]).get("archiveLogs"))


def reach_problems(module: Path, artifact_repository: Path) -> list[str]:
    statements = pod_statements(module)
    return [
        f"{action} {resource} (prefix {prefix!r}) is denied to the train pod's role"
        for action, resource, prefix in requests(_archive_logs(artifact_repository))
        if not allowed(statements, action, resource, prefix)
    ]


def test_the_evaluator_denies_what_no_statement_allows() -> None:
    st = pod_statements(MODULE)
    assert allowed(st, "s3:PutObject", f"arn:aws:s3:::{CKPT_BUCKET}/{PREFIX}x")
    assert not allowed(st, "s3:PutObject", f"arn:aws:s3:::{CKPT_BUCKET}/runs/other/x")
    assert not allowed(st, "s3:ListBucket", f"arn:aws:s3:::{CKPT_BUCKET}", "runs/")
    assert not allowed(st, "s3:DeleteBucket", f"arn:aws:s3:::{CKPT_BUCKET}")


def test_before_issue_28_the_heartbeat_and_the_log_archive_were_denied() -> None:
    problems = reach_problems(
        BEFORE / "terraform_modules_aws-run-iam_main.tf",
        BEFORE / "deploy_artifact-repository.yaml",
    )
    assert any("heartbeat" in p for p in problems)
    assert any("main.log" in p for p in problems)


def test_every_uri_the_train_pod_writes_is_allowed() -> None:
    assert reach_problems(MODULE, REPO / "deploy" / "artifact-repository.yaml") == []


def test_the_stack_gets_its_state_bucket_from_burst(tmp_path: Path) -> None:
    """The heartbeat statements exist only when the stack gets the state bucket: the
    burst-run stack turns ``state_bucket`` into the module's ARN, and burst's aws workspace
    passes its backend's bucket."""
    from burst.infra.workspace import Workspace
    from burst.spec import TAG_COST_CENTRE, TAG_EXPIRES_AT, TAG_OWNER, TAG_TEAM

    main = (REPO / "terraform" / "stacks" / "burst-run" / "main.tf").read_text()
    assert re.search(r"state_bucket_arn\s*=.*var\.state_bucket", main)
    ws = Workspace("aws", RUN_ID, tmp_path, backend_config={"bucket": STATE_BUCKET})
    tags = {
        TAG_EXPIRES_AT: "2030-01-01T00:00:00Z",
        TAG_OWNER: "o",
        TAG_TEAM: "t",
        TAG_COST_CENTRE: "c",
    }
    variables = ws.variables(
        run_id=RUN_ID,
        candidate={"region": "ap-southeast-1", "provider": "aws", "instance": "p5.48xlarge"},
        gpu_type="h100",
        node_count=1,
        tags=tags,
    )
    assert variables["state_bucket"] == STATE_BUCKET


# --- a regional-sync run (walk: docs/reference/walk-burst-regional.md) -------------------
WORKFLOW = "burst-reg1"
EXCHANGE_BUCKET = "team-ckpts"
EXCHANGE_PREFIX = f"regional/{WORKFLOW}/exchange/"


def exchange_requests() -> list[tuple[str, str, str]]:
    """What a region's worker (and the aggregator) do in the exchange store
    (burst.regional.runtime: series of the exchange store: puts, gets, listings)."""
    arn = f"arn:aws:s3:::{EXCHANGE_BUCKET}"
    return [
        ("s3:PutObject", f"{arn}/{EXCHANGE_PREFIX}worker-a/manifests/000001.json", ""),
        ("s3:GetObject", f"{arn}/{EXCHANGE_PREFIX}aggregator/manifests/000001.json", ""),
        ("s3:ListBucket", arn, f"{EXCHANGE_PREFIX}aggregator/"),
    ]


def exchange_problems(module: Path) -> list[str]:
    VARS["var.exchange_bucket_arn"] = f"arn:aws:s3:::{EXCHANGE_BUCKET}"
    VARS["var.exchange_prefix"] = EXCHANGE_PREFIX
    VARS["var.store_kms_key_arn"] = "arn:aws:kms:ap-southeast-1:111122223333:key/x"
    try:
        statements = pod_statements(module)
    finally:
        for k in ("var.exchange_bucket_arn", "var.exchange_prefix", "var.store_kms_key_arn"):
            VARS.pop(k)
    return [
        f"{action} {resource} (prefix {prefix!r}) is denied to the region's pod role"
        for action, resource, prefix in exchange_requests()
        if not allowed(statements, action, resource, prefix)
    ]


def test_before_the_walk_no_role_reached_the_exchange_store() -> None:
    assert len(exchange_problems(BEFORE / "terraform_modules_aws-run-iam_main.tf")) == 3


def test_a_regions_pod_role_reaches_the_exchange_store() -> None:
    assert exchange_problems(MODULE) == []


def test_a_regional_stack_gets_the_exchange_store_from_burst(tmp_path: Path) -> None:
    """Each region's stack (run id ``<workflow>-<region>``) gets the exchange store the
    region's provision hands its roles (burst.storage.location.exchange_url), and the
    burst-run stack turns it into the module's bucket ARN and prefix."""
    from types import SimpleNamespace

    from burst.infra.provision import Provisioner
    from burst.infra.workspace import Workspace
    from burst.spec import TAG_COST_CENTRE, TAG_EXPIRES_AT, TAG_OWNER, TAG_TEAM, parse_spec

    main = (REPO / "terraform" / "stacks" / "burst-run" / "main.tf").read_text()
    iam = main.split('module "iam" {', 1)[1].split("\n}", 1)[0]
    assert re.search(r"exchange_bucket_arn\s*=.*var\.exchange_uri", iam)
    assert re.search(r"exchange_prefix\s*=.*var\.exchange_uri", iam)
    text = (REPO / "examples" / "regional.yaml").read_text()
    job = parse_spec(text.replace("file://checkpoints", f"s3://{EXCHANGE_BUCKET}/regional"))
    region = "ap-southeast-3"
    given = Provisioner._stores(  # type: ignore[arg-type]
        SimpleNamespace(job=job, run_id=f"{WORKFLOW}-{region}"), region
    )
    assert given["exchange_uri"] == f"s3://{EXCHANGE_BUCKET}/{EXCHANGE_PREFIX}".rstrip("/")
    ws = Workspace("aws", f"{WORKFLOW}-{region}", tmp_path, backend_config={})
    tags = {
        TAG_EXPIRES_AT: "2030-01-01T00:00:00Z",
        TAG_OWNER: "o",
        TAG_TEAM: "t",
        TAG_COST_CENTRE: "c",
    }
    variables = ws.variables(
        run_id=f"{WORKFLOW}-{region}",
        candidate={"region": region, "provider": "aws", "instance": "p5.48xlarge"},
        gpu_type="h100",
        node_count=1,
        tags=tags,
        **given,
    )
    assert variables["exchange_uri"] == given["exchange_uri"]


# --- the run's own store (walk: docs/reference/walk-terraform.md) --------------------------
SPEC_BUCKET = "team-ckpts"
RUN_STORE_PREFIX = f"burst/{RUN_ID}/"  # run_url("s3://team-ckpts/burst", RUN_ID) + "/"


def run_store_requests() -> list[tuple[str, str, str]]:
    """What train does in its store: ``run_url(storage.checkpoint_uri, run id)``
    (burst/train/checkpoints.py RunCheckpoints), not the stack's bucket."""
    from burst.lease import TRAINER_KEY

    arn = f"arn:aws:s3:::{SPEC_BUCKET}"
    return [
        ("s3:PutObject", f"{arn}/{RUN_STORE_PREFIX}chunks/ab/abcdef", ""),
        ("s3:PutObject", f"{arn}/{RUN_STORE_PREFIX}manifests/000010.json", ""),
        ("s3:GetObject", f"{arn}/{RUN_STORE_PREFIX}{TRAINER_KEY}", ""),
        ("s3:ListBucket", arn, RUN_STORE_PREFIX),
    ]


def run_store_problems(module: Path) -> list[str]:
    VARS["var.run_store_bucket_arn"] = f"arn:aws:s3:::{SPEC_BUCKET}"
    VARS["var.run_store_prefix"] = RUN_STORE_PREFIX
    try:
        statements = pod_statements(module)
    finally:
        for k in ("var.run_store_bucket_arn", "var.run_store_prefix"):
            VARS.pop(k)
    return [
        f"{action} {resource} (prefix {prefix!r}) is denied to the train pod's role"
        for action, resource, prefix in run_store_requests()
        if not allowed(statements, action, resource, prefix)
    ]


def test_train_writes_the_specs_store_not_the_stacks_bucket(tmp_path: Path) -> None:
    """The premise: train's checkpoints go to the spec's store under the run id."""
    from burst.storage.location import run_url
    from burst.train.checkpoints import RunCheckpoints

    text = (REPO / "examples" / "quickstart.yaml").read_text()
    from burst.spec import parse_spec

    job = parse_spec(text)
    store = tmp_path / "store"
    job = job.model_copy(
        update={"storage": job.storage.model_copy(update={"checkpoint_uri": f"file://{store}"})}
    )
    assert RunCheckpoints(job, RUN_ID).location == run_url(f"file://{store}", RUN_ID)


def test_before_the_walk_the_train_pods_role_did_not_reach_its_store() -> None:
    assert len(run_store_problems(BEFORE / "terraform_modules_aws-run-iam_main.tf")) == 4


def test_the_train_pods_role_reaches_its_store() -> None:
    assert run_store_problems(MODULE) == []


def test_a_single_region_stack_gets_the_run_store_from_burst() -> None:
    from types import SimpleNamespace

    from burst.infra.provision import Provisioner
    from burst.spec import parse_spec

    main = (REPO / "terraform" / "stacks" / "burst-run" / "main.tf").read_text()
    iam = main.split('module "iam" {', 1)[1].split("\n}", 1)[0]
    assert re.search(r"run_store_bucket_arn\s*=.*var\.run_store_uri", iam)
    text = (REPO / "examples" / "quickstart.yaml").read_text()
    job = parse_spec(text)
    job = job.model_copy(
        update={
            "storage": job.storage.model_copy(
                update={"checkpoint_uri": f"s3://{SPEC_BUCKET}/burst"}
            )
        }
    )
    given = Provisioner._stores(  # type: ignore[arg-type]
        SimpleNamespace(job=job, run_id=RUN_ID), "ap-southeast-1"
    )
    assert given["run_store_uri"] == f"s3://{SPEC_BUCKET}/{RUN_STORE_PREFIX}".rstrip("/")
    assert "exchange_uri" not in given
