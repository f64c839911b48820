"""`burst image sign` / `burst image verify` as a user runs them, against the real registry."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from burst.supplychain.registry import RegistryStore
from devtools.tinyimage import push_tiny_image

from .conftest import Keys
from .registry_server import LocalRegistry
from .test_registry_verify import TRAINER_LABELS

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[2]


def burst(*args: str, keys: Keys) -> subprocess.CompletedProcess[str]:
    # the test's policy directory (BURST_POLICIES): its keys/ and the shipped GPU requirements
    policies = keys.dir.parent
    shutil.copyfile(REPO / "policies" / "gpu-requirements.yaml", policies / "gpu-requirements.yaml")
    env = {**os.environ, "PYTHONPATH": str(REPO), "BURST_POLICIES": str(policies)}
    return subprocess.run(
        [sys.executable, "-m", "burst.cli.main", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_sign_then_verify(registry: LocalRegistry, keys: Keys) -> None:
    store = RegistryStore(registry.host, "team/cli")
    digest = push_tiny_image(store, {"id": secrets.token_bytes(8)}, TRAINER_LABELS)
    ref = f"{registry.host}/team/cli@{digest}"
    before = burst("image", "verify", ref, "--key", "team", keys=keys)
    assert before.returncode == 3 and "is unsigned" in before.stderr, before.stderr
    signed = burst("image", "sign", ref, "--key", str(keys.private("team")), keys=keys)
    assert signed.returncode == 0, signed.stderr
    assert f"-> sha256-{digest[7:]}.sig (1 signature(s)" in signed.stdout, signed.stdout
    after = burst(
        "image", "verify", ref, "--key", "team", "--gpu-type", "b200", "--json", keys=keys
    )
    assert after.returncode == 0, after.stderr
    doc = json.loads(after.stdout)
    assert doc["digest"] == digest and doc["compatibility"]["required_driver"] == "570.26"


def test_cli_bad_input_exits_2_without_traceback(
    registry: LocalRegistry, keys: Keys, tmp_path: Path
) -> None:
    store = RegistryStore(registry.host, "team/cli-bad")
    digest = push_tiny_image(store, {"id": secrets.token_bytes(8)}, TRAINER_LABELS)
    ref = f"{registry.host}/team/cli-bad@{digest}"
    not_a_key = tmp_path / "k.pem"
    not_a_key.write_text("hello")
    for args, message in [
        (("image", "sign", ref, "--key", str(not_a_key)), "is not a usable PEM private key"),
        (
            (
                "image",
                "sign",
                f"{registry.host}/team/cli-bad:v1",
                "--key",
                str(keys.private("team")),
            ),
            "not pinned",
        ),
        (
            (
                "image",
                "sign",
                f"{registry.host}/team/cli-bad@sha256:{'1' * 64}",
                "--key",
                str(keys.private("team")),
            ),
            "nothing to sign",
        ),
    ]:
        proc = burst(*args, keys=keys)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr
