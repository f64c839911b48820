"""The OCI-layout path (the local demo) and the verify-image step as the runner runs it."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from burst.documents import json_schema
from burst.errors import PolicyRefusal
from burst.supplychain.layout import LayoutStore
from burst.supplychain.signature import SIMPLE_SIGNING
from burst.supplychain.trust import load_trust
from burst.supplychain.verify import verify_image
from devtools.tinyimage import push_tiny_image

REPO = Path(__file__).resolve().parents[2]
LAYOUT = REPO / "examples" / "images" / "quickstart-oci"


def quickstart_reference() -> str:
    """The committed demo image's pinned reference (its index.json's 'quickstart' tag)."""
    digest = LayoutStore(LAYOUT).get_manifest("quickstart")
    assert digest is not None
    return f"oci-layout://examples/images/quickstart-oci@{digest.digest}"


def spec_with(tmp_path: Path, reference: str, gpu_type: str = "h100") -> Path:
    doc = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text(encoding="utf-8"))
    doc["image"] = {"reference": reference, "trusted_key": "burst-dev"}
    doc["compute"]["gpu_type"] = gpu_type
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def run_step(
    spec: Path, tmp_path: Path, run_id: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / f"{run_id}.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("BURST_POLICIES", None)  # the checkout's policies/ (burst.policy.location)
    proc = subprocess.run(
        [sys.executable, "-m", "burst.steps.verify_image", "--spec", str(spec), "--run-id", run_id,
         "--runs-root", str(tmp_path / "runs"), "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return proc, out


def test_committed_quickstart_image_verifies_with_the_dev_key() -> None:
    verified = verify_image(
        quickstart_reference(), "burst-dev", load_trust(REPO / "policies" / "keys"), search=(REPO,)
    )
    assert verified.ref.repository == "burst.local/burst/quickstart-trainer"
    assert verified.store_kind == "oci-layout"
    assert verified.labels["dev.burst.torch.version"] == "2.13.0"


@pytest.mark.e2e
def test_step_writes_a_document_matching_its_schema(tmp_path: Path) -> None:
    proc, out = run_step(spec_with(tmp_path, quickstart_reference()), tmp_path, "vi-ok")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, json_schema("verified-image"))  # the document's one schema
    assert doc["digest"] == quickstart_reference().split("@")[1]
    assert doc["signature"]["key"] == "burst-dev"
    assert doc["compatibility"]["gpu_type"] == "h100"
    assert (tmp_path / "runs" / "vi-ok" / "docs" / "verify-image.json").exists()


@pytest.mark.e2e
def test_step_refuses_an_incompatible_gpu_with_exit_3(tmp_path: Path) -> None:
    proc, out = run_step(spec_with(tmp_path, quickstart_reference(), "rubin"), tmp_path, "vi-gpu")
    assert proc.returncode == 3
    assert "not compatible with rubin: cuda 12.8 < 13.0" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def test_tampered_layout_payload_is_refused(tmp_path: Path) -> None:
    """Someone edits the payload file in the committed layout (bytes no longer match)."""
    copy = tmp_path / "layout"
    shutil.copytree(LAYOUT, copy)
    store = LayoutStore(copy)
    ref = quickstart_reference().replace("examples/images/quickstart-oci", str(copy))
    sig = store.get_manifest(f"sha256-{ref.split(':')[-1]}.sig")
    assert sig is not None
    layer = next(x for x in json.loads(sig.data)["layers"] if x["mediaType"] == SIMPLE_SIGNING)
    blob = copy / "blobs" / "sha256" / layer["digest"].split(":")[1]
    blob.write_bytes(blob.read_bytes().replace(b"quickstart-trainer", b"quickstart-trainex"))
    with pytest.raises(PolicyRefusal, match="tampered with: its bytes do not hash"):
        verify_image(ref, "burst-dev", load_trust(REPO / "policies" / "keys"))


def test_layout_without_repository_is_refused(tmp_path: Path) -> None:
    store = LayoutStore(tmp_path / "bare", create=True)
    digest = push_tiny_image(store, {"x": b"y"})
    with pytest.raises(PolicyRefusal, match="does not declare the repository"):
        verify_image(
            f"oci-layout://{tmp_path / 'bare'}@{digest}",
            "burst-dev",
            load_trust(REPO / "policies" / "keys"),
        )


def test_missing_layout_is_refused() -> None:
    with pytest.raises(PolicyRefusal, match=r"OCI layout .* not found"):
        verify_image(
            f"oci-layout:///nonexistent/layout@sha256:{'0' * 64}",
            "burst-dev",
            load_trust(REPO / "policies" / "keys"),
        )


def test_build_script_is_reproducible(tmp_path: Path) -> None:
    """Rebuilding the demo image from images/lock.json gives the committed digest; the new key
    verifies the new signature."""
    spec = importlib.util.spec_from_file_location(
        "bql", REPO / "images" / "build_quickstart_layout.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    keys = tmp_path / "keys"
    keys.mkdir()
    shutil.copyfile(REPO / "policies" / "keys" / "trust.yaml", keys / "trust.yaml")
    digest = module.build(layout_dir=tmp_path / "oci", public_key=keys / "burst-dev.pub")
    assert digest == quickstart_reference().split("@")[1]
    verified = verify_image(
        f"oci-layout://{tmp_path / 'oci'}@{digest}", "burst-dev", load_trust(keys)
    )
    assert verified.key.path == keys / "burst-dev.pub"


@pytest.mark.e2e
@pytest.mark.slow
def test_burst_run_with_unsigned_image_stops_at_verify_image(tmp_path: Path) -> None:
    """The whole local pipeline: exit 3 at verify-image, provision and train skipped, nothing
    provisioned (report), teardown still ran."""
    store = LayoutStore(tmp_path / "unsigned", create=True)
    store.set_repository("burst.local/burst/unsigned")
    digest = push_tiny_image(store, {"x": b"unsigned"})
    spec = spec_with(tmp_path, f"oci-layout://{tmp_path / 'unsigned'}@{digest}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "burst.cli.main", "run", str(spec), "--run-id", "unsigned-run",
         "--runs-root", str(tmp_path / "runs")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    report = json.loads((tmp_path / "runs" / "unsigned-run" / "report.json").read_text())
    status = {s["name"]: s["status"] for s in report["steps"]}
    assert status["verify-image"] == "failed"
    assert status["provision"] == "skipped" and status["train"] == "skipped"
    assert status["teardown"] == "succeeded"
    assert report["failure"]["step"] == "verify-image"
    assert "is unsigned" in report["failure"]["message"]
    assert report["resources_remaining"] == 0 and report["provision_attempts"] == []
    assert not (tmp_path / "runs" / "unsigned-run" / "docs" / "provision.json").exists()


@pytest.mark.e2e
def test_verify_image_never_resolves_a_layout_beside_the_step_copy_of_the_spec(
    tmp_path: Path,
) -> None:
    """Issue 14 bug: verify-image looked a relative layout up in the spec's directory, which in
    a pod is the step's input directory. A layout that exists only there is not found: the
    relative path is relative to the working directory (then this checkout), as every
    relative path in a spec is."""
    pods_inputs = tmp_path / "inputs"
    pods_inputs.mkdir()
    shutil.copytree(LAYOUT, pods_inputs / "beside-the-spec-only")
    digest = quickstart_reference().rsplit("@", 1)[1]
    spec = spec_with(pods_inputs, f"oci-layout://beside-the-spec-only@{digest}")
    proc, _ = run_step(spec, tmp_path, "vi-beside")
    assert proc.returncode == 3, proc.stderr
    assert "not found" in proc.stderr and "beside-the-spec-only" in proc.stderr
    assert str(REPO / "beside-the-spec-only") in proc.stderr  # the working directory's
    assert "Traceback" not in proc.stderr
