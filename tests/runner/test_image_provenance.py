"""Provenance end to end (issue 46): the digest verify-image accepts is the digest train runs.

Before, train's image was the workflow parameter ``trainer-image``, set apart from the spec
verify-image read: on Argo anything could be passed there, and ``burst run --containers``
ran whatever ``make images`` built while the report named the signed image. Now verify-image's
document carries ``run_image`` and the templates hand it to train's image field (and the
regional worker's and aggregator's); the report says per step what ran: in process, no
image at all."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst import checkout
from burst.obs.report_html import render_html
from burst.obs.report_text import render_text
from burst.obs.run_summary import summary_lines
from burst.obs.run_view import load_run
from burst.pipelines.common import VERIFIED_IMAGE
from burst.runner import tags
from burst.runner.local import LocalRunner, RunOptions
from burst.runner.pods import Pod
from burst.runs import run_paths
from burst.supplychain.provenance import IN_PROCESS

TEMPLATES = [
    checkout.COMPILED / "burst-train.yaml",
    checkout.COMPILED / "burst-regional.yaml",
    checkout.ROOT / "deploy" / "argo" / "burst-train.yaml",
    checkout.ROOT / "deploy" / "argo" / "burst-regional.yaml",
]
TRAINER = "{{inputs.parameters.trainer-image}}"
SPEC_IMAGE_STEPS = ("burst.steps.train", "burst.steps.aggregate")


def _trainer_images(doc: dict[str, Any]) -> list[str]:
    """The image of every container that runs the spec's image: train's pod, each pod of the
    gang's Volcano Job (a resource manifest), a regional worker's and aggregator's."""
    found = []
    for t in doc["spec"]["templates"]:
        c = t.get("container") or {}
        if any(m in c.get("command", []) for m in SPEC_IMAGE_STEPS):
            found.append(str(c["image"]))
        manifest = (t.get("resource") or {}).get("manifest")
        if manifest and "burst.steps.train" in manifest:  # YAML only once Argo substituted it
            found += re.findall(r"^\s*image: '?([^'\n]*)'?$", manifest, re.MULTILINE)
    return found


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_templates_hand_verify_images_digest_to_train(path: Path) -> None:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    params = {p["name"] for p in doc["spec"]["arguments"]["parameters"]}
    assert "trainer-image" not in params  # nothing can set train's image apart from the spec
    images = _trainer_images(doc)
    # train, the gang's master and worker pods and their peer memory sidecars (the same
    # verified image); a regional worker and the aggregator
    assert len(images) == (5 if "train" in path.name else 2) and set(images) == {TRAINER}, images
    main = next(t for t in doc["spec"]["templates"] if t["name"] == "main")
    handed = [
        a["value"]
        for group in main["steps"]
        for step in group
        for a in (step.get("arguments") or {}).get("parameters") or []
        if a["name"] == "trainer-image"
    ]
    assert handed and set(handed) == {VERIFIED_IMAGE}
    # Argo's expression (and the local runner's evaluator) reads verify-image's document
    document = json.dumps({"digest": "sha256:" + "5e" * 32, "run_image": "r/x@sha256:" + "5e" * 32})
    scope = {"steps.verify-image.outputs.parameters.image": document}
    assert tags.substitute(VERIFIED_IMAGE, scope) == "r/x@sha256:" + "5e" * 32


@pytest.mark.slow
@pytest.mark.e2e
def test_a_local_run_hands_train_the_verified_digest_and_says_it_ran_no_image(
    quickstart_in: Path, runs_root: Path
) -> None:
    """The real engine and steps, in process: the train pod's container names verify-image's
    run_image (the spec's digest); the report says every step ran in process, no image."""
    doc = yaml.safe_load(quickstart_in.read_text())
    doc["training"]["steps"] = 5  # one checkpoint: enough to run train
    quickstart_in.write_text(yaml.safe_dump(doc, sort_keys=False))
    named: dict[str, str] = {}

    def record(pod: Pod) -> Pod:  # the machine's hook: sees each pod before it starts
        named[pod.step] = str((pod.container or {}).get("image"))
        return pod

    paths = run_paths("prov-local", runs_root)
    report = LocalRunner(paths, quickstart_in, RunOptions(prepare_pod=record)).run()
    assert report["status"] == "succeeded", report.get("failure")
    verified = json.loads((paths.dir / "docs" / "verify-image.json").read_text())
    spec_digest = doc["image"]["reference"].rpartition("@")[2]
    assert verified["digest"] == spec_digest
    assert verified["run_image"] == f"{verified['repository']}@{spec_digest}"
    assert named["train"] == verified["run_image"]
    ran = {s["name"]: s for s in report["steps"]}
    assert {s["image_provenance"] for s in ran.values()} == {IN_PROCESS}
    assert all(s.get("image") is None for s in ran.values())
    view = load_run(paths.dir)
    assert "image: none: every step ran in process" in render_text(view)
    (image,) = [ln for ln in summary_lines(view) if ln.startswith("image: ")]  # burst run's end
    assert image.endswith("(signed with burst-dev); train ran in process here: no image")


def test_the_report_names_each_steps_image_and_provenance(tmp_path: Path) -> None:
    """A container run's report: each step's image by digest, and what vouches for it."""
    local, steps = "sha256:" + "1c" * 32, "sha256:" + "a0" * 32
    records = [
        ("verify-image", f"localhost/burst/steps@{steps}", steps, "steps image"),
        ("train", f"localhost/burst/trainer@{local}", local, "unverified local image"),
    ]
    run = tmp_path / "c1"
    run.mkdir()
    (run / "report.json").write_text(json.dumps({
        "run_id": "c1", "status": "succeeded", "exit_code": 0,
        "steps": [{"name": n, "status": "succeeded", "seconds": 1.0, "exit_code": 0,
                   "attempts": 1, "image": i, "image_digest": d, "image_provenance": p}
                  for n, i, d, p in records],
    }))  # fmt: skip
    view = load_run(run)
    text, html = render_text(view), render_html(view)
    for name, image, _, provenance in records:
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(name))
        assert line.endswith(f"image {image} ({provenance})"), line
        assert f"<td>{image} ({provenance})</td>" in html
    (image,) = [ln for ln in summary_lines(view) if ln.startswith("image: ")]
    assert image.endswith(f"; train ran {records[1][1]} (unverified local image)")
