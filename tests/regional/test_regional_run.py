"""The regional runtime end to end: the compiled burst-regional template executed by the
local runner (burst.runner), real processes (aggregator and one worker per region), one store
per region, every cross-region byte through the link emulator.

Each run trains the quickstart's small MLP for 3 rounds of 4 local steps; each region is
provisioned for real: its own Terraform stack (the embedded local stack, run id
``<run>-<region>``). ``burst run`` (the two- and three-region tests) gives each region its own
S3 server on loopback with keys of its own; the fault tests use directory stores
(``stores="dir"``) to keep the suite short. Fault runs use the named fault points of the role
configs (``burst.faults.regional``), never a timer.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from burst.documents import ProvisionDocument, RunReport, TeardownDocument
from burst.documents.regional import RegionalSection
from burst.errors import EXIT_PREEMPTED
from burst.regional.runtime import RoleConfig
from burst.regional.stores import SHARD_KEY, open_spec, read_link_log
from burst.runner.local import REGIONAL_TEMPLATE
from burst.runner.pods import Pod
from burst.runner.regional import RegionalOptions, run_regional
from burst.runner.regions import RegionSites, StoreMode, objects_dir
from burst.spec import load_spec
from burst.storage.base import ObjectMissing, StoreError
from burst.storage.local import LocalStore

from .regional_specs import (
    REPO,
    THREE,
    TWO,
    TWO_REGIONS_GROUP,
    BurstCli,
    cli_run,
    regional_spec,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _section(report: RunReport) -> RegionalSection:
    """The report's regional section (every regional run's report has one)."""
    assert report.regional is not None, report.failure
    return report.regional


def _check_complete(doc: dict[str, Any], regions: list[str]) -> None:
    report = RunReport.model_validate(doc)  # the document's own model, strictly
    assert report.status == "succeeded", report.failure
    assert report.exit_code == 0 and report.failure is None
    section = _section(report)
    assert section.rounds_completed == section.rounds_planned == 3
    assert [r.round for r in section.rounds] == [0, 1, 2]
    assert sorted(section.provisioned) == sorted(regions)
    assert sorted(section.torn_down) == sorted(regions)
    assert report.final_weights_sha256 and report.resources_remaining == 0
    # one step record a region's pod, named as the pod, with its region
    names = {s.name: s.region for s in report.steps}
    for i, region in enumerate(regions):
        assert names[f"regions({i}:{region}).train"] == region
        assert names[f"teardown({i}:{region})"] == region
    for r in section.rounds:
        assert r.loss is not None and r.delta_bytes > 0 and r.update_bytes > 0


def _check_shards_stay_home(run_dir: Path, regions: list[str], agg: str, mode: StoreMode) -> None:
    """No byte of a shard leaves its region: every store and the whole link log."""
    stores = run_dir / "stores"
    names = sorted(p.name for p in stores.iterdir() if p.is_dir())
    assert names == sorted([*regions, f"{agg}-exchange"])
    shard_bytes = {}
    for region in regions:
        store = LocalStore(objects_dir(run_dir, region, mode))
        shard_bytes[region] = store.get_bytes(SHARD_KEY)
        # a region's store holds its shard and its worker's own state, nothing else
        heads = {info.key.split("/", 1)[0] for info in store.list()}
        assert heads <= {"shard", "worker"}, heads
    assert len(set(shard_bytes.values())) == len(regions)  # each region its own shard
    exchange = LocalStore(objects_dir(run_dir, f"{agg}-exchange", mode))
    heads = {info.key.split("/", 1)[0] for info in exchange.list()}
    assert heads == {"aggregator", "deltas", "global", "updates"}, heads
    # no object anywhere outside a region's own store holds a shard's bytes
    for path in exchange.root.rglob("*"):
        if path.is_file():
            assert path.read_bytes() not in shard_bytes.values()
    records = read_link_log(run_dir / "links.jsonl")
    assert records, "the link log is empty"
    for rec in records:
        if rec["kind"] == "shard":
            assert rec["src"] == rec["dst"], rec  # read inside its region only
    shard_reads = [r for r in records if r["kind"] == "shard"]
    assert sorted(r["src"] for r in shard_reads) == sorted(regions)
    sizes = {r["src"]: r["bytes"] for r in shard_reads}
    assert sizes == {r: len(b) for r, b in shard_bytes.items()}
    crossing = [r for r in records if r["src"] != r["dst"]]
    assert {r["kind"] for r in crossing} <= {"delta", "update", "global"}
    assert all(agg in (r["src"], r["dst"]) for r in crossing)  # a star around the aggregator


@pytest.mark.xdist_group(TWO_REGIONS_GROUP)
def test_burst_run_two_regions(two_regions: tuple[Path, dict[str, Any]]) -> None:
    """examples/regional.yaml as shipped: ``local_steps: null``, the run takes the planner's H
    (4 for its 0.6 s step, see test_regional_errors.py) and reports it with its basis."""
    spec = REPO / "examples" / "regional.yaml"
    runs, doc = two_regions
    regions = list(TWO)
    _check_complete(doc, regions)
    section = doc["regional"]
    assert section["local_steps"] == 4 and section["local_steps_basis"].startswith("planner:")
    _check_shards_stay_home(runs / "two", regions, "ap-southeast-1", "s3")
    _check_regions_provisioned_alone(runs, "two", regions)
    # one executor: the local runner ran the compiled burst-regional template
    assert doc["workflow"]["template"] == str(REGIONAL_TEMPLATE)
    assert doc["workflow"]["phase"] == doc["workflow"]["exit_handler_phase"] == "Succeeded"
    _check_branches_overlap(runs / "two", regions)
    cfg = RoleConfig.load(runs / "two" / "worker-me-central-1.config.json")
    run_dir = (runs / "two").resolve()
    assert Path(cfg.spec).resolve().is_relative_to(run_dir)  # the run's own copy
    assert Path(cfg.spec).read_text() == spec.read_text()
    links = section["links"]
    # me-central-1 <-> ap-southeast-1 is a cross-continent link: priced, and time was spent
    assert links["egress_usd"] > 0 and links["link_seconds"] > 0.1
    assert links["shard_bytes_crossing"] == 0
    # a worker in sync fetches the compressed update, not the global weights
    worker = json.loads((runs / "two" / "worker-me-central-1.json").read_text())
    assert [r["next_from"] for r in worker["rounds"]] == ["update"] * 3
    # every round: me-central-1's delta up, the update down (the aggregation region's own
    # worker moves nothing across); the first global checkpoint is read once
    per_round = [r["delta_bytes"] // 2 + r["update_bytes"] for r in section["rounds"]]
    # measured per round on the link log: after round 0 (which also fetches the first global
    # checkpoint in full) a round moves the two compressed payloads and a little metadata
    assert sum(r["bytes_crossing"] for r in section["rounds"]) == links["bytes_crossing"]
    for r, payload in zip(section["rounds"][1:], per_round[1:], strict=True):
        assert payload <= r["bytes_crossing"] <= 1.1 * payload, (r, payload)
    assert links["bytes_by_kind"]["delta"] >= sum(r["delta_bytes"] // 2 for r in section["rounds"])
    assert links["bytes_crossing"] >= sum(per_round)


def test_burst_run_three_regions(
    tmp_path: Path, burst_cli: BurstCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``BURST_TF_SITE_VARS`` a directory of ``<region>.tfvars``, each region's stack is
    applied with its own region's site file (the local stack records it in its ``site``).

    Run from the user's own directory with ``training.entrypoint`` the user's module there
    (bug 3, issue 25): burst-train's steps imported it from there, but a regional worker and
    the aggregator ran from the checkout and could not (on the code before issue 25 the run
    failed: ``aggregator:ap-southeast-1 exited 2: ... cannot import 'mymodel'``). Every role
    now runs, as every step, in the user's working directory."""
    user = tmp_path / "project"
    user.mkdir()
    (user / "mymodel.py").write_text(
        '"""The user\'s model."""\nfrom burst.train.example import build  # noqa: F401\n'
    )
    spec = regional_spec(tmp_path, THREE, name="regional-three")
    text = spec.read_text().replace("burst.train.example:build", "mymodel:build")
    text = text.replace("oci-layout://examples/", f"oci-layout://{REPO}/examples/")
    assert "mymodel:build" in text and f"oci-layout://{REPO}" in text
    spec.write_text(text)
    sites = tmp_path / "sites"
    sites.mkdir()
    for region in THREE:
        (sites / f"{region}.tfvars").write_text(f'vpc_id = "vpc-{region}"\n')
    env = {"BURST_TF_SITE_VARS": str(sites)}
    monkeypatch.chdir(user)
    doc = cli_run(burst_cli, spec, tmp_path / "runs", "three", env)
    regions = list(THREE)
    _check_complete(doc, regions)
    for r in doc["regional"]["rounds"]:
        assert sorted(r["accepted"]) == sorted(regions)
    run_dir = tmp_path / "runs" / "three"
    _check_shards_stay_home(run_dir, regions, "ap-southeast-1", "s3")
    _check_regions_provisioned_alone(tmp_path / "runs", "three", regions)
    for region in regions:
        prov = json.loads((run_dir / f"provision-{region}.json").read_text())
        assert prov["attempts"][0]["site_vars"] == f"{region}.tfvars"
        assert json.loads(prov["outputs"]["site"]["vpc_id"]) == f"vpc-{region}", prov["outputs"]


def _run(tmp_path: Path, spec: Path, name: str, faults: dict[str, dict[str, str]]) -> RunReport:
    opts = RegionalOptions(time_scale=0.0, faults=faults, wait_limit_s=120, stores="dir")
    return run_regional(load_spec(spec), spec, tmp_path / name, name, opts)


@pytest.mark.xdist_group(TWO_REGIONS_GROUP)
def test_preempted_and_lost_workers_and_a_killed_aggregator_end_as_an_undisturbed_run(
    tmp_path: Path, two_regions: tuple[Path, dict[str, Any]]
) -> None:
    """A worker whose node is lost mid-round (SIGKILL, Argo's "pod deleted") is retried by the
    template's retryStrategy and rejoins from the newest global checkpoint and its own state.
    A worker preempted mid-round (a real SIGTERM: the notice) saves there, exits 75, is
    retried and resumes from that save, as an attempt of burst-train does (issue 25: regional
    sync is a hook of the one train loop). The aggregator given notice between rounds (a real
    SIGTERM, as the kubelet sends on preemption) exits 75 and the template's retry restarts it
    (issue 42: before the fix it handled no notice, died of the signal, 143, which no retry
    rule takes, and the run ended failed); lost later between its state commit and the global
    commit, it is retried too; each time it restarts from its last committed round.
    The batches are a function of (seed, region, round), so the final weights equal those of
    a run without faults: the shipped two-region example's (the same training: the
    quickstart's model, seed, batch and 12 steps in rounds of 4 over the same shards; its
    stores are S3 servers, these directories)."""
    spec = regional_spec(tmp_path, TWO)
    clean_report = RunReport.model_validate(two_regions[1])
    clean = _section(clean_report)
    h = clean.local_steps
    assert h == 4 and clean.rounds_planned == 3
    faulty = _run(
        tmp_path,
        spec,
        "faulty",
        {
            "worker:me-central-1": {"worker-mid-round@me-central-1@1": "kill"},
            "worker:ap-southeast-1": {"worker-mid-round@ap-southeast-1@1": "preempt"},
            "aggregator:ap-southeast-1": {
                "aggregator-after-commit@1": "preempt",
                "aggregator-between-commits@2": "kill",
            },
        },
    )
    _check_complete(faulty.to_json(), list(TWO))
    attempts = {(a.role, a.region): a.exit_codes for a in _section(faulty).attempts}
    # a lost node leaves no exit code: Argo's -1 (lastRetry.exitCode), "pod deleted"
    assert attempts[("worker", "me-central-1")] == [-1, 0]
    # given notice (75), then lost: each retry went on from its committed state (each round
    # aggregated once: checked above)
    assert attempts[("aggregator", "ap-southeast-1")] == [EXIT_PREEMPTED, -1, 0]
    assert attempts[("worker", "ap-southeast-1")] == [EXIT_PREEMPTED, 0]
    assert faulty.final_weights_sha256 == clean_report.final_weights_sha256
    assert [r.accepted for r in _section(faulty).rounds] == [r.accepted for r in clean.rounds]
    # the preempted worker saved mid-round 1 and its retry resumed from that save
    scratch = tmp_path / "faulty" / "scratch" / "worker-ap-southeast-1"
    first, second = json.loads((scratch / "train.json").read_text())["attempts"]
    assert first["outcome"] == "preempted" and first["preempted"] is True
    save = first["emergency_save"]
    assert save["tier"] == "full" and save["committed"] is True, save
    mid = save["committed_step"]
    assert h < mid < 2 * h, f"step {mid} is not inside round 1"
    assert second["outcome"] == "done" and second["resumed_from"] == mid
    result = json.loads((tmp_path / "faulty" / "worker-ap-southeast-1.json").read_text())
    assert [r["round"] for r in result["rounds"]] == [1, 2]  # it rejoined in round 1


def test_late_worker_round_completes_without_it(tmp_path: Path) -> None:
    """me-central-1 holds its round-1 delta 8 s; the round deadline is 2 s: round 1 is
    aggregated without it, its late delta is never applied (max_staleness 0), and it rejoins
    from the newest global checkpoint. (On a loaded machine me-central-1 can also miss round
    0's deadline, its worker starting later: then round 1 reads and drops that stale delta
    instead of listing it late; either way it is not applied.)"""
    spec = regional_spec(tmp_path, TWO, deadline_s=2)
    report = _run(
        tmp_path,
        spec,
        "late",
        {"worker:me-central-1": {"worker-before-delta@me-central-1@1": "sleep:8"}},
    )
    _check_complete(report.to_json(), list(TWO))
    r1 = _section(report).rounds[1]
    assert r1.accepted == ["ap-southeast-1"]
    assert "me-central-1" in {*r1.late, *r1.dropped, *r1.superseded}, r1
    for r in _section(report).rounds:
        # nothing older was ever applied: a delta read with a lag (me-central-1's round-0
        # delta, when it missed round 0 too) is dropped, never accepted
        assert all(r.staleness[k] == 0 for k in r.accepted), r
        assert all(k in r.dropped for k, v in r.staleness.items() if v > 0), r
        assert "me-central-1" not in r.accepted or r.round == 0 or r.round > 1
    worker = json.loads((tmp_path / "late" / "worker-me-central-1.json").read_text())
    assert worker["rounds"][1]["round"] == 1
    assert worker["rounds"][1]["next_from"] == "global checkpoint"  # it skipped a round


def _check_regions_provisioned_alone(runs: Path, run_id: str, regions: list[str]) -> None:
    """Each region: its own stack applied and destroyed under its own run id
    ``<run>-<region>`` (provision and teardown documents, state empty, no leak), its own S3
    server; a worker's config names its own region's store and the exchange store only, and
    no credentials file is left once the run is over."""
    run_dir = runs / run_id
    endpoints = {}
    for region in regions:
        prov = ProvisionDocument.model_validate_json(
            (run_dir / f"provision-{region}.json").read_text()
        )
        assert prov.status == "provisioned" and prov.candidate is not None
        assert prov.candidate.region == region and prov.outputs["region"] == region
        stack = runs / f"{run_id}-{region}" / "terraform"
        assert prov.terraform_dir is not None
        assert Path(prov.terraform_dir).resolve() == stack.resolve()
        down = TeardownDocument.model_validate_json(
            (run_dir / f"teardown-{region}.json").read_text()
        )
        assert down.destroyed and down.resources_remaining == 0 and not down.leaks
        state = json.loads((stack / "terraform.tfstate").read_text())
        assert state["resources"] == []  # the stack was applied, then destroyed
        cfg = RoleConfig.load(run_dir / f"worker-{region}.config.json")
        assert cfg.region_store is not None and cfg.region_store["profile"] == "region"
        assert cfg.exchange_store["profile"] == "exchange"
        endpoints[region] = cfg.region_store["endpoint_url"]
    assert not list(run_dir.rglob("credentials"))  # every pod's keys removed at the end
    assert len(set(endpoints.values())) == len(regions)  # a server a region
    for region in regions:
        text = (run_dir / f"worker-{region}.config.json").read_text()
        for other, url in endpoints.items():
            assert (url in text) == (other == region)  # no address of another region's store


def _check_branches_overlap(run_dir: Path, regions: list[str]) -> None:
    """The regions' workers ran at the same time, read from the run's recorded events (each
    worker started before every other one ended), never from a duration."""
    events = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
    order = [(e["step"], e["status"]) for e in events]
    spans = {}
    for region in regions:
        (key,) = {s for s, _ in order if s.endswith(f":{region}).train")}
        spans[region] = (order.index((key, "started")), order.index((key, "succeeded")))
    for a in regions:
        for b in regions:
            assert spans[a][0] < spans[b][1], (a, b, spans)


def test_a_workers_credentials_are_refused_by_another_regions_store(tmp_path: Path) -> None:
    """What the runner gives a pod of region A (``RegionSites.prepare_pod``): none of the
    runner's AWS variables, a credentials file with A's keys and the exchange store's, A's
    site. They open A's store and the exchange store; region B's server refuses them (its
    keys are its own). A pod of no region is left as it is; the keys go when the run ends."""
    job = load_spec(regional_spec(tmp_path, TWO))
    a, b = "me-central-1", "ap-southeast-1"
    sites = RegionSites(job, tmp_path / "run", list(TWO), b)
    pod_a = tmp_path / "pods" / "001-worker"

    def pod(region: str | None) -> Pod:
        return Pod(
            step="worker",
            key="worker",
            template="train",
            path="main/worker",
            argv=["python"],
            env={"AWS_ACCESS_KEY_ID": "the-runner's", "PATH": "/usr/bin"},
            cwd=str(tmp_path),
            pod_dir=pod_a,
            log_file=pod_a / "log.txt",
            inputs={"region": region} if region else {},
        )

    try:
        sites.start()
        sites.stand_up(b)  # B's store and shard, as its first pod would
        assert sites.prepare_pod(pod(None)) == pod(None)
        env = sites.prepare_pod(pod(a)).env
        assert "AWS_ACCESS_KEY_ID" not in env and env["PATH"] == "/usr/bin"
        assert Path(env["BURST_REGION_SITE"]) == tmp_path / "run" / "sites" / f"{a}.json"
        creds = Path(env["AWS_SHARED_CREDENTIALS_FILE"])
        assert creds.parent == pod_a and creds.stat().st_mode & 0o777 == 0o600
        assert sorted(configparser_sections(creds)) == ["exchange", "region"]
        with _environment({k: v for k, v in env.items() if k.startswith("AWS_")}):
            assert open_spec(sites.region_spec(a)).get_bytes(SHARD_KEY)  # a's shard, at home
            open_spec(sites.exchange_spec()).put_bytes("probe", b"x")
            # B's store, opened with what A's worker holds: refused by B's server
            with pytest.raises(StoreError) as refused:
                open_spec(sites.region_spec(b)).get_bytes(SHARD_KEY)
            assert "403" in str(refused.value) or "Access" in str(refused.value), refused.value
            assert not isinstance(refused.value, ObjectMissing)
    finally:
        sites.close()
    assert not creds.exists()


def configparser_sections(path: Path) -> list[str]:
    import configparser

    parser = configparser.ConfigParser()
    parser.read(path)
    return parser.sections()


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """Only ``env``'s AWS variables for the length of the block (no other credentials)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    for k in saved:
        del os.environ[k]
    os.environ.update(env)
    try:
        yield
    finally:
        for k in env:
            os.environ.pop(k, None)
        os.environ.update(saved)


def test_a_region_that_cannot_be_provisioned_stops_the_run_and_every_region_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """me-central-1 has no capacity (the local stack's named fault point): no role starts
    anywhere (the template's ``stacks`` group ends before any branch begins), the run fails as
    an infrastructure fault (exit 4), and both regions' stacks, the one that was applied and
    the one that failed half-way, are destroyed and proven empty."""
    monkeypatch.setenv("BURST_SIMULATE_NO_CAPACITY", "me-central-1")
    spec = regional_spec(tmp_path, TWO)
    opts = RegionalOptions(time_scale=0.0, stores="dir", wait_limit_s=30)
    report = run_regional(load_spec(spec), spec, tmp_path / "nocap", "nocap", opts)
    # the template's barrier: every region's stack before any branch (burst/pipelines/burst_regional)
    assert report.status == "failed" and report.exit_code == 4, report.failure
    failure = report.failure
    assert failure is not None and failure.step == "stacks(1:me-central-1)", failure
    assert failure.message is not None and "capacity" in failure.message, failure
    section = _section(report)
    assert section.attempts == [] and section.rounds_completed == 0  # nothing ran
    assert section.provisioned == section.torn_down == list(TWO)
    for region in TWO:
        down = TeardownDocument.model_validate_json(
            (tmp_path / "nocap" / f"teardown-{region}.json").read_text()
        )
        assert down.destroyed and down.resources_remaining == 0 and not down.leaks
    applied = ProvisionDocument.model_validate_json(
        (tmp_path / "nocap" / "provision-ap-southeast-1.json").read_text()
    )
    assert applied.status == "provisioned"
