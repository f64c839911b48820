"""Container mode runs what verify-image accepted, by digest (issue 46, provenance): the pod
-> ``podman run`` translation on the compiled burst-train template's pods (no engine needed:
what the store says of each image is given, nothing is started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from burst.errors import PolicyRefusal
from burst.runner.containers import ContainerEngine, ContainerLauncher
from burst.supplychain.provenance import (
    STEPS_IMAGE,
    UNVERIFIED_LOCAL,
    VERIFIED,
    RunImage,
)

from .test_launcher import pod

SIGNED = "sha256:" + "5e" * 32  # the spec's digest, verify-image's run_image
LOCAL = "sha256:" + "1c" * 32  # the trainer `make images` built
STEPS = "sha256:" + "a0" * 32
RUN_IMAGE = f"burst.local/burst/quickstart-trainer@{SIGNED}"  # verify-image's document
STEPS_PINNED = f"localhost/burst/steps@{STEPS}"
TRAINER_LOCAL = f"localhost/burst/trainer@{LOCAL}"


def launcher(provenance: str) -> ContainerLauncher:
    """What ``prepare`` makes for a run: the steps image pinned, the spec's image resolved
    (the local trainer, opted in; or the same image known by the signed digest)."""
    ran = TRAINER_LOCAL if provenance == UNVERIFIED_LOCAL else f"localhost/burst/trainer@{SIGNED}"
    digest = LOCAL if provenance == UNVERIFIED_LOCAL else SIGNED
    got = ContainerLauncher(
        ContainerEngine("/usr/bin/podman", "podman"),
        spec_image=RunImage(SIGNED, ran, digest, provenance, "localhost/burst/trainer:cpu"),
        steps_image=STEPS_PINNED,
    )
    got.images[STEPS_PINNED] = {"digest": STEPS, "id": "b" * 64}
    got.images[ran] = {"digest": digest, "id": "c" * 64}
    return got


def engine_image(argv: list[str]) -> str:
    return argv[argv.index("--entrypoint") + 2]


@pytest.mark.parametrize("provenance", [VERIFIED, UNVERIFIED_LOCAL])
def test_train_runs_the_digest_verify_image_handed_it(tmp_path: Path, provenance: str) -> None:
    lau = launcher(provenance)
    train = pod(tmp_path, "train", image=RUN_IMAGE)
    ran = engine_image(lau.command(train))
    want = TRAINER_LOCAL if provenance == UNVERIFIED_LOCAL else f"localhost/burst/trainer@{SIGNED}"
    assert ran == want  # name@sha256:..., never the tag it was built as
    steps = pod(tmp_path, "preflight", image=STEPS_PINNED)
    assert engine_image(lau.command(steps)) == STEPS_PINNED
    lau.ran_in.update({train.key: ran, steps.key: STEPS_PINNED})
    got = lau.report()
    assert got["train"]["provenance"] == provenance and got["train"]["named"] == RUN_IMAGE
    assert got["train"]["digest"] == (LOCAL if provenance == UNVERIFIED_LOCAL else SIGNED)
    assert got["preflight"]["provenance"] == STEPS_IMAGE


def test_a_pod_naming_an_image_nothing_verified_is_refused(tmp_path: Path) -> None:
    """What the template named before issue 46 (a workflow parameter, set apart from the spec)
    or the trainer by its tag: neither the accepted digest nor the steps image."""
    lau = launcher(VERIFIED)
    for image in ("localhost/burst/trainer:cpu", f"ghcr.io/burst-train/burst-trainer@{LOCAL}"):
        lau.images[image] = {"digest": LOCAL, "id": "c" * 64}
        with pytest.raises(PolicyRefusal, match=SIGNED):
            lau.command(pod(tmp_path, "train", image=image))


def test_a_step_named_by_tag_is_run_by_its_digest(tmp_path: Path) -> None:
    """A launcher that knows no spec image (no verify-image in the graph) still gives the
    engine a digest, and labels the image unverified."""
    lau = ContainerLauncher(ContainerEngine("/usr/bin/podman", "podman"))
    lau.images["localhost/burst/steps:local"] = {"digest": STEPS, "id": "b" * 64}
    argv = lau.command(pod(tmp_path, "preflight", image="localhost/burst/steps:local"))
    assert engine_image(argv) == STEPS_PINNED
    assert lau.named["preflight"] == ("localhost/burst/steps:local", STEPS_PINNED, UNVERIFIED_LOCAL)
