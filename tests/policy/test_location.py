"""One policy directory for every part of burst (burst.policy.location): explicit, then
$BURST_POLICIES, then the checkout's policies/; the preflight and image verification agree."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from policy_helpers import POLICIES, REPO

from burst.policy import load_policies
from burst.policy.loader import PolicyFileError, default_policy_dir
from burst.policy.location import checkout_policy_dir, keys_dir, policy_dir
from burst.supplychain import trust


def test_resolution_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("BURST_POLICIES", raising=False)
    assert policy_dir() == checkout_policy_dir() == POLICIES
    assert keys_dir() == POLICIES / "keys"
    monkeypatch.setenv("BURST_POLICIES", str(tmp_path / "env"))
    assert policy_dir() == tmp_path / "env"
    assert keys_dir() == tmp_path / "env" / "keys"
    assert policy_dir(tmp_path / "flag") == tmp_path / "flag"  # the explicit one wins
    assert keys_dir(tmp_path / "k") == tmp_path / "k"


def test_preflight_and_image_verification_read_the_same_directory(
    monkeypatch: pytest.MonkeyPatch, policy_copy: Path
) -> None:
    shutil.copytree(POLICIES / "keys", policy_copy / "keys")
    monkeypatch.setenv("BURST_POLICIES", str(policy_copy))
    assert default_policy_dir() == policy_copy
    assert load_policies().root == policy_copy
    assert trust.policies_dir() == policy_copy
    assert trust.keys_dir() == policy_copy / "keys"
    assert "burst-dev" in trust.load_trust().keys


def test_retired_variables_are_not_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("BURST_POLICIES", raising=False)
    monkeypatch.setenv("BURST_POLICIES_DIR", str(tmp_path / "old"))
    monkeypatch.setenv("BURST_KEYS_DIR", str(tmp_path / "old-keys"))
    with caplog.at_level(logging.WARNING, logger="burst.policy.location"):
        assert policy_dir() == POLICIES
        assert trust.keys_dir() == POLICIES / "keys"
    assert "BURST_POLICIES_DIR is no longer read" in caplog.text
    assert "BURST_KEYS_DIR is no longer read" in caplog.text


def test_missing_directory_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("BURST_POLICIES", str(tmp_path / "nowhere"))
    with pytest.raises(PolicyFileError, match=r"\$BURST_POLICIES") as info:
        load_policies()
    assert str(tmp_path / "nowhere") in info.value.one_line()


@pytest.mark.e2e
def test_cli_image_kyverno_follows_burst_policies(burst_cmd: list[str], tmp_path: Path) -> None:
    """`burst image kyverno` renders the trust policy of $BURST_POLICIES/keys: a policy dir
    without keys/ is an error naming that directory, not a silent fallback."""
    empty = tmp_path / "policies"
    empty.mkdir()
    env = {**os.environ, "BURST_POLICIES": str(empty)}
    proc = subprocess.run(
        [*burst_cmd, "image", "kyverno"], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 2
    assert str(empty / "keys" / "trust.yaml") in proc.stderr
    env["BURST_POLICIES"] = str(POLICIES)
    ok = subprocess.run(
        [*burst_cmd, "image", "kyverno"], capture_output=True, text=True, timeout=60, env=env
    )
    assert ok.returncode == 0, ok.stderr
    assert "ClusterPolicy" in ok.stdout


def test_steps_image_sets_burst_policies() -> None:
    text = (REPO / "images" / "steps" / "Dockerfile").read_text()
    assert "BURST_POLICIES=/opt/burst/policies" in text
    assert "BURST_POLICIES_DIR" not in text and "BURST_KEYS_DIR" not in text
