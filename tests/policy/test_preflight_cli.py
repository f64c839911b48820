"""`burst preflight`, `burst policy` and `python -m burst.steps.preflight`, as real processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from policy_helpers import POLICIES, REPO

from burst.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_REFUSED
from burst.policy.loader import policy_sha256
from burst.spec import load_spec

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, **kw)  # type: ignore[call-overload]


def test_preflight_table_quickstart(burst_cmd: list[str]) -> None:
    proc = run([*burst_cmd, "preflight", "examples/quickstart.yaml"])
    assert proc.returncode == 0, proc.stderr
    assert "ap-southeast-1" in proc.stdout and "allow" in proc.stdout
    assert "allowed" in proc.stdout
    # an allowed candidate shows what it rests on (its waiver), not "no rule objects"
    assert "no rule objects" not in proc.stdout
    assert "example-labs-sg-hq-outside-d5" in " ".join(proc.stdout.split())


def test_preflight_json_is_the_record(burst_cmd: list[str], tmp_path: Path) -> None:
    out = tmp_path / "record.json"
    proc = run([*burst_cmd, "preflight", "examples/quickstart.yaml", "--json", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record == json.loads(out.read_text())
    assert record["spec_sha256"] == load_spec(REPO / "examples/quickstart.yaml").sha256()
    assert record["policy_sha256"] == policy_sha256(POLICIES)
    assert {"region": "ap-southeast-1", "provider": "aws"} in record["allowed"]


def test_preflight_json_lists_what_satisfied_each_allow(
    burst_cmd: list[str], tmp_path: Path
) -> None:
    """An allow explains itself: EU personal data to Singapore on SCC + TIA lists the
    safeguard and the article, the assessment, the inbound rule, and every fact relied on
    with its source, besides the waivers it rests on."""
    spec = tmp_path / "eu.yaml"
    spec.write_text(
        (REPO / "examples/quickstart.yaml")
        .read_text()
        .replace("classification: internal", "classification: personal")
        .replace("origin: SG", "origin: EU\n  transfer_safeguards: [scc, tia]")
        .replace("  region: ap-southeast-1\n", "")
    )
    proc = run([*burst_cmd, "preflight", str(spec), "--json", "--today", "2026-11-23"])
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    d = next(d for d in record["decisions"] if d["region"] == "ap-southeast-1")
    assert d["verdict"] == "allow"
    sat = {(s["rule"], s.get("fact")): s for s in d["satisfied"]}
    xfer = sat[("XFER-NO-SAFEGUARD", "jurisdictions.EU.outbound")]
    assert "scc" in xfer["message"] and "GDPR Chapter V" in xfer["message"]
    assert xfer["source"].startswith("https://")
    assert "tia" in sat[("XFER-ASSESSMENT", "jurisdictions.EU.outbound")]["message"]
    assert ("INBOUND-UNKNOWN", "jurisdictions.SG.inbound_rented_region") in sat
    relied = {f for (rule, f) in sat if rule == "FACT-LOW-CONFIDENCE"}
    assert {"jurisdictions.EU.outbound", "jurisdictions.SG.inbound_rented_region"} <= relied
    for s in d["satisfied"]:
        assert s["rule"] and s["message"] and s["source"], s


def test_preflight_names_a_sign_off_bound_to_another_organisation(
    burst_cmd: list[str], tmp_path: Path
) -> None:
    spec = tmp_path / "copycat.yaml"
    spec.write_text(
        (REPO / "examples/quickstart.yaml")
        .read_text()
        .replace("name: Example Labs Pte Ltd", "name: Copycat Labs Ltd")
    )
    proc = run([*burst_cmd, "preflight", str(spec), "--today", "2026-11-23"])
    assert proc.returncode == EXIT_REFUSED, proc.stdout
    assert "not applied: aws/ap-southeast-1: exception example-labs-sg-hq-outside-d5" in proc.stdout
    assert "organisation 'Copycat Labs Ltd' is not 'Example Labs Pte Ltd'" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_preflight_denied_exits_3(burst_cmd: list[str]) -> None:
    proc = run([*burst_cmd, "preflight", "examples/denied.yaml"])
    assert proc.returncode == EXIT_REFUSED
    assert "RES-LOCALIZATION" in proc.stdout and "deny" in proc.stdout
    assert "no candidate" in proc.stderr and "Traceback" not in proc.stderr


def test_preflight_bad_spec_exits_2(burst_cmd: list[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (REPO / "examples/quickstart.yaml").read_text().replace("origin: SG", "origin: Singapore")
    )
    proc = run([*burst_cmd, "preflight", str(bad)])
    assert proc.returncode == EXIT_BAD_INPUT and "data.origin" in proc.stderr


def test_policies_from_environment(burst_cmd: list[str], tmp_path: Path) -> None:
    copy = tmp_path / "p"
    shutil.copytree(POLICIES, copy, ignore=shutil.ignore_patterns("keys", "admission"))
    (copy / "regions.yaml").write_text("providers: {}\n")
    env = {**os.environ, "BURST_POLICIES": str(copy)}
    proc = run([*burst_cmd, "preflight", "examples/quickstart.yaml"], env=env)
    assert proc.returncode == EXIT_REFUSED and "PROVIDER-UNKNOWN" in proc.stdout


def test_policy_test_passes_and_fails(burst_cmd: list[str], tmp_path: Path) -> None:
    proc = run([*burst_cmd, "policy", "test"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 failed" in proc.stdout
    copy = tmp_path / "p"
    shutil.copytree(POLICIES, copy, ignore=shutil.ignore_patterns("keys", "admission"))
    cases = copy / "tests" / "preflight.yaml"
    cases.write_text(
        cases.read_text().replace(
            "  - name: uae-health-abroad-denied\n    candidate: gcp/asia-southeast1\n"
            "    spec: {data: {classification: health, origin: AE}, organization: {headquarters: AE}}\n"
            "    expect: deny",
            "  - name: uae-health-abroad-denied\n    candidate: gcp/asia-southeast1\n"
            "    spec: {data: {classification: health, origin: AE}, organization: {headquarters: AE}}\n"
            "    expect: allow",
        )
    )
    # the broken case alone (-k): a failure is reported and fails the command
    proc = run([*burst_cmd, "policy", "test", "--policies", str(copy), "-k", "uae-health-abroad"])
    assert proc.returncode == EXIT_FAILURE
    assert "FAIL preflight.yaml::uae-health-abroad-denied" in proc.stdout


def test_policy_explain(burst_cmd: list[str]) -> None:
    proc = run([*burst_cmd, "policy", "explain", "RES-LOCALIZATION"])
    assert proc.returncode == 0
    assert (
        "residency.rego" in proc.stdout
        and "jurisdictions.AE.localization.health-ict-law" in proc.stdout
        and "https://" in proc.stdout
    )
    # per-region facts are listed under the ids the rules cite (regions.P.R.country_groups)
    proc = run([*burst_cmd, "policy", "explain", "EXP-DEST-LICENCE"])
    assert proc.returncode == 0
    assert "regions.azure.israelcentral.country_groups: confidence low" in proc.stdout
    proc = run([*burst_cmd, "policy", "explain", "NO-SUCH-RULE"])
    assert proc.returncode == EXIT_BAD_INPUT and "no rule" in proc.stderr


def test_step_writes_record_and_refuses(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    proc = run(
        [
            sys.executable,
            "-m",
            "burst.steps.preflight",
            "--spec",
            "examples/denied.yaml",
            "--run-id",
            "denied-1",
            "--runs-root",
            str(tmp_path / "runs"),
            "--out",
            str(out),
        ]
    )
    assert proc.returncode == EXIT_REFUSED, proc.stderr
    doc = json.loads((tmp_path / "runs" / "denied-1" / "docs" / "preflight.json").read_text())
    assert doc == json.loads(out.read_text())
    assert doc["allowed"] == [] and doc["step"] == "preflight"
    assert doc["decisions"][0]["reasons"][0]["rule"] == "RES-LOCALIZATION"
    proc = run(
        [
            sys.executable,
            "-m",
            "burst.steps.preflight",
            "--spec",
            "examples/quickstart.yaml",
            "--run-id",
            "qs-1",
            "--runs-root",
            str(tmp_path / "runs"),
        ]
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "runs" / "qs-1" / "docs" / "preflight.json").read_text())
    assert doc["spec_sha256"] == load_spec(REPO / "examples/quickstart.yaml").sha256()
    assert doc["allowed"]
