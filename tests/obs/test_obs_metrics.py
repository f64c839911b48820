"""RunMetrics: every family the issue names, labelled for FinOps; served over HTTP, written
as text files the report merges, and pushed to a real Pushgateway on loopback."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from burst.errors import BadInputError
from burst.obs.metrics import RunMetrics, export_from_env, metrics_file, read_metric_files
from burst.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
LABELS = {"run_id": "r-1", "team": "ml-research", "experiment": "exp-a", "priority": "high"}
ISSUE_SAMPLES = (
    "burst_gpu_wait_seconds",
    "burst_preemptions_total",
    "burst_checkpoint_bytes_sum",
    "burst_checkpoint_seconds_sum",
    "burst_checkpoint_stall_seconds_sum",
    "burst_egress_bytes_total",
    "burst_provision_attempts_total",
    "burst_cost_usd",
    "burst_resources_leaked",
    "burst_checkpoints_committed_total",
)


def _full() -> RunMetrics:
    m = RunMetrics(**LABELS)
    m.set_gpu_wait(42.5)
    m.record_preemption()
    m.record_checkpoint("full", 1_000_000, 0.5)
    m.record_checkpoint("weights", 1_000_000, 2.0)
    m.record_stall(0.02)
    m.record_egress("ap-southeast-1", "me-central-1", 5_000)
    m.record_provision_attempt("ap-southeast-3", "no_capacity")
    m.record_provision_attempt("ap-southeast-1", "ok")
    m.set_cost("compute", 12.5)
    m.set_leaked(0)
    return m


def test_every_issue_metric_is_exposed_with_the_finops_labels() -> None:
    samples = [
        s
        for fam in text_string_to_metric_families(_full().exposition())
        for s in fam.samples
        if s.name.startswith("burst_")
    ]
    names = {s.name for s in samples}
    for wanted in ISSUE_SAMPLES:
        assert wanted in names, wanted
    for s in samples:
        for k, v in LABELS.items():
            assert s.labels.get(k) == v, (s.name, s.labels)
    by = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in samples}
    tiers = {dict(k[1])["tier"] for k in by if k[0] == "burst_checkpoint_bytes_count"}
    assert tiers == {"full", "weights"}
    outcomes = {
        dict(k[1])["outcome"]: v for k, v in by.items() if k[0] == "burst_provision_attempts_total"
    }
    assert outcomes == {"no_capacity": 1.0, "ok": 1.0}


def test_labels_come_from_the_job_spec() -> None:
    job = load_spec(REPO / "examples" / "quickstart.yaml")
    m = RunMetrics.for_job("quickstart-1", job)
    assert (m.team, m.experiment, m.priority) == ("ml-research", "quickstart", "normal")


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.record_checkpoint("Full Tier!", 1, 1.0),
        lambda m: m.record_checkpoint("full", -1, 1.0),
        lambda m: m.record_stall(float("nan")),
        lambda m: m.set_cost("gpu", 1.0),
        lambda m: m.record_provision_attempt("ap-southeast-1", "maybe"),
    ],
)
def test_bad_values_are_refused(call: object) -> None:
    m = RunMetrics(**LABELS)
    with pytest.raises(BadInputError):
        call(m)  # type: ignore[operator]


def test_a_label_with_a_newline_is_refused() -> None:
    with pytest.raises(BadInputError, match="team"):
        RunMetrics(run_id="r", team="a\nb")


def test_files_of_several_attempts_add_up(tmp_path: Path) -> None:
    """Train preempted once: two attempt files. Counters and histograms add, gauges keep the
    largest (the cost gauge is the run's running estimate)."""
    a1 = RunMetrics(**LABELS)
    a1.record_preemption()
    a1.record_checkpoint("full", 100, 0.1)
    a1.set_cost("compute", 1.0)
    a1.write_textfile(metrics_file(tmp_path, "train", 1))
    a2 = RunMetrics(**LABELS)
    a2.record_preemption()
    for _ in range(3):
        a2.record_checkpoint("full", 100, 0.1)
    a2.set_cost("compute", 2.5)
    where = export_from_env(a2, tmp_path, "train", attempt=2)
    assert where == [str(tmp_path / "metrics" / "train.2.prom")]
    (tmp_path / "metrics" / "broken.prom").write_text("burst_x{ 1 2 3\n")
    totals = read_metric_files((tmp_path / "metrics").glob("*.prom"))
    assert totals.total("burst_preemptions_total") == 2
    assert totals.total("burst_checkpoints_committed_total", tier="full") == 4
    assert totals.total("burst_checkpoint_bytes_sum") == 400
    assert totals.by_label("burst_cost_usd", "component") == {"compute": 2.5}
    assert len(totals.files) == 2  # the broken file is skipped


def test_serve_exposes_metrics_over_http() -> None:
    m = _full()
    server = m.serve(0)
    try:
        body = requests.get(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10).text
    finally:
        server.shutdown()
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    pre = fams["burst_preemptions"].samples
    assert [(s.name, s.value) for s in pre if s.name.endswith("_total")] == [
        ("burst_preemptions_total", 1.0)
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.e2e
@pytest.mark.slow
def test_push_to_a_real_pushgateway(tmp_path: Path) -> None:
    """prometheus-pushgateway (Debian package) on loopback, not a fake."""
    binary = shutil.which("prometheus-pushgateway")
    assert binary, "install it: apt-get install -y --no-install-recommends prometheus-pushgateway"
    port = _free_port()
    proc = subprocess.Popen(
        [binary, f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if requests.get(f"{url}/-/ready", timeout=1).ok:
                    break
            except requests.ConnectionError:
                time.sleep(0.1)
        m = _full()
        m.push(url, "train")
        m.record_preemption()
        m.push(url, "train")  # PUT replaces the group: 2 preemptions, not 1 + 2
        body = requests.get(f"{url}/metrics", timeout=10).text
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    pre = [
        s
        for f in text_string_to_metric_families(body)
        for s in f.samples
        if s.name == "burst_preemptions_total"
    ]
    assert len(pre) == 1
    assert pre[0].value == 2.0
    assert pre[0].labels["step"] == "train"
    assert pre[0].labels["job"] == "burst"
    assert pre[0].labels["team"] == "ml-research"


def test_exported_writes_the_file_even_when_the_block_raises(tmp_path: Path) -> None:
    from burst.errors import Preempted
    from burst.obs.metrics import exported

    with pytest.raises(Preempted), exported(RunMetrics(**LABELS), tmp_path, "train", 3) as m:
        m.record_checkpoint("full", 10, 0.1)
        m.record_preemption()
        raise Preempted("notice")
    totals = read_metric_files([tmp_path / "metrics" / "train.3.prom"])
    assert totals.total("burst_preemptions_total") == 1
    assert totals.total("burst_checkpoints_committed_total", tier="full") == 1
