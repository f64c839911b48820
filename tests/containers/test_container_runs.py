"""The container tier (issue 27): the pipeline's steps in their images, as pods get them.

Kept small (each container run costs seconds of a scarce CPU): one quickstart run, one
preempted-and-resumed run, the regional example, the three defects containers found shown
failing in the state they were in, and push / pin / sign / verify against a real registry on
loopback with the three refusals."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from burst import checkout
from burst.errors import EXIT_REFUSED, PolicyRefusal
from burst.supplychain.signature import generate_key, private_pem, public_pem
from burst.supplychain.trust import load_trust
from burst.supplychain.verify import verify_image
from tests.supplychain.registry_server import LocalRegistry, find_or_install_registry

from .conftest import Images

pytestmark = [pytest.mark.containers, pytest.mark.e2e, pytest.mark.slow]
REPO = checkout.ROOT


def burst_run(tmp_path: Path, images: Images, spec: str, *extra: str) -> dict:
    """The run with the CPU trainer image built here: not the spec's signed image, so it runs
    only by the opt-in, labelled unverified (test_provenance_runs.py: refused without it)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("BURST_RUNS_ROOT", None)
    proc = subprocess.run(
        [sys.executable, "-m", "burst.cli.main", "run", "--containers",
         "--steps-image", images.steps, "--trainer-image", images.trainer,
         "--unverified-local-image",
         "--runs-root", str(tmp_path / "runs"), "--json", spec, *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict = json.loads(proc.stdout)
    return report


def ran_in(report: dict, images: Images) -> dict[str, str]:
    by_digest = {
        images.engine.inspect(images.steps)["digest"]: images.steps,
        images.engine.inspect(images.trainer)["digest"]: images.trainer,
    }
    got = {}
    for s in report["steps"]:
        assert s["status"] == "succeeded", s
        built = by_digest[s["image_digest"]]  # each step names its image's digest
        # the engine was given the digest, never the tag it was built as
        assert s["image"] == f"{built.rsplit(':', 1)[0]}@{s['image_digest']}", s
        got[s["name"]] = built
    return got


def test_quickstart_every_step_in_its_image_preempted_and_resumed(
    tmp_path: Path, images: Images
) -> None:
    """The quickstart with every step in its image (the report names each step's image
    digest); train is preempted at step 12 (a real SIGTERM reaches it inside its container
    through the engine's client), saves and exits 75, and the runner requeues it in a new
    container, which resumes from the checkpoint and finishes. One run for both (the tier's
    budget): a run without the preemption was checked by hand (issue 27's note)."""
    report = burst_run(tmp_path, images, "examples/quickstart.yaml", "--preempt-at-step", "12")
    assert report["status"] == "succeeded" and report["final_step"] == 30
    where = ran_in(report, images)
    assert where.pop("train") == images.trainer
    labels = {s["name"]: s["image_provenance"] for s in report["steps"]}
    assert labels.pop("train") == "unverified local image"  # the opt-in, said so
    assert set(labels.values()) == {"steps image"}
    assert set(where) == {"preflight", "plan", "verify-image", "provision", "teardown"}
    assert set(where.values()) == {images.steps}
    assert report["containers"]["engine"] == images.engine.name
    train = next(s for s in report["steps"] if s["name"] == "train")
    assert train["attempts"] >= 2 and report["preemptions"] >= 1
    assert [a["exit_code"] for a in train["attempt_details"]][:1] == [75]
    # checkpoints went to the runs volume (file://checkpoints: under the runs root)
    assert (tmp_path / "runs" / "checkpoints" / report["run_id"]).is_dir()


def container(
    images: Images, image: str, script: str, *opts: str
) -> subprocess.CompletedProcess[str]:
    return images.engine.run(
        "run", "--rm", "--network=none", *opts, "--entrypoint", "sh", image, "-c", script,
        timeout=120, check=False,
    )  # fmt: skip


def test_the_three_defects_fail_as_they_were(tmp_path: Path, images: Images) -> None:
    """What containers found, shown failing in the state it was in, then passing now."""
    as_pod = ("--user", "1000:1000", "--cap-drop", "ALL")
    # 1. regopy needs libatomic.so.1: the image without it (as it was built) fails
    probe = "python -c 'import regopy; regopy.Interpreter(); print(\"rego ok\")'"
    old = container(
        images, images.steps, f"rm -f /usr/lib/*/libatomic.so.1* && {probe}", "--user", "0"
    )
    assert old.returncode != 0 and "libatomic.so.1" in old.stderr, old.stderr[-500:]
    assert "rego ok" in container(images, images.steps, probe, *as_pod).stdout
    # 2. a relative file:// store resolved against the working directory (the image's
    # root-owned WORKDIR) is not writable by the pod's user; under the runs volume it is
    runs = tmp_path / "runs"
    runs.mkdir()
    os.chmod(runs, 0o777)
    vol = ("-v", f"{runs}:/var/lib/burst/runs", "-e", "BURST_RUNS_ROOT=/var/lib/burst/runs")
    put = "from burst.storage import open_store; open_store(u).put_bytes('k', b'x'); print('wrote')"
    old_uri = "u = 'file://runs/checkpoints'; "  # as it resolved: the working directory
    old = container(images, images.steps, f'python -c "{old_uri}{put}"', *as_pod, *vol)
    assert old.returncode != 0 and "Permission denied" in old.stderr, old.stderr[-500:]
    new_uri = "from burst.storage.location import store_url; u = store_url('file://checkpoints'); "
    new = container(images, images.steps, f'python -c "{new_uri}{put}"', *as_pod, *vol)
    assert "wrote" in new.stdout, new.stderr[-500:]
    assert (runs / "checkpoints" / "k").is_file()
    # 3. the regional aggregator imports torch: on the steps image (where the template put
    # it) it fails on import; on the trainer image (where it is now) it imports
    imp = "python -c 'import burst.train.aggregator; print(\"imported\")'"
    old = container(images, images.steps, imp, *as_pod)
    assert old.returncode != 0 and "No module named 'torch'" in old.stderr, old.stderr[-500:]
    assert "imported" in container(images, images.trainer, imp, *as_pod).stdout


@pytest.mark.skipif(
    not os.environ.get("BURST_CONTAINER_REGIONAL"),
    reason="the regional example in containers takes about 6 min here (over the tier's "
    "budget): set BURST_CONTAINER_REGIONAL=1 to run it",
)
def test_the_regional_example_runs_in_containers(tmp_path: Path, images: Images) -> None:
    report = burst_run(tmp_path, images, "examples/regional.yaml")
    assert report["status"] == "succeeded", report.get("failure")


# -- registry: push, pin by digest, sign, verify, refuse -------------------------------------


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    reg = LocalRegistry(find_or_install_registry(), tmp_path_factory.mktemp("registry")).start()
    try:
        yield reg
    finally:
        reg.stop()


def push(images: Images, image: str, target: str, tmp_path: Path) -> str:
    digest_file = tmp_path / "digest"
    tls = ("--tls-verify=false",) if images.engine.name == "podman" else ()
    fmt = (
        ("--format", "oci", "--compression-format", "zstd", "--digestfile", str(digest_file))
        if images.engine.name == "podman"
        else ()
    )
    images.engine.run("tag", image, target) if images.engine.name == "docker" else None
    images.engine.run("push", *tls, *fmt, image if images.engine.name == "podman" else target,
                      *((target,) if images.engine.name == "podman" else ()), timeout=600)  # fmt: skip
    digest = digest_file.read_text().strip()
    return f"{target.rsplit(':', 1)[0]}@{digest}"


def test_push_pin_sign_verify_and_refuse(
    tmp_path: Path, images: Images, registry: LocalRegistry
) -> None:
    if images.engine.name != "podman":
        pytest.skip("the push step reads podman's --digestfile")
    keys = tmp_path / "keys"
    keys.mkdir()
    key = generate_key()
    (tmp_path / "team.key").write_bytes(private_pem(key))
    (keys / "team.pub").write_bytes(public_pem(key.public_key()))
    (keys / "trust.yaml").write_text(
        "version: 1\nkeys:\n  team: {file: team.pub}\n"
        "rules:\n  - name: team\n    repositories: ['127.0.0.1:*/team/*']\n    keys: [team]\n",
        encoding="utf-8",
    )
    trust = load_trust(keys)
    tag = f"{registry.host}/team/steps:dev"
    # A small image of two layers stands for the steps image here: the registry, the digests
    # and the signatures see the same manifest and layer types (zstd, OCI), and pushing the
    # real 790 MB image would cost ~17 CPU-seconds of compression (the steps image itself
    # runs in the quickstart test above).
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "a.txt").write_text("the first layer\n")
    (probe / "b.txt").write_text("the second layer\n")
    (probe / "Containerfile").write_text("FROM scratch\nCOPY a.txt /a.txt\nCOPY b.txt /b.txt\n")
    images.engine.run("build", "--pull=never", "--tag", "localhost/burst/push-probe:dev",
                      str(probe), timeout=300)  # fmt: skip
    pinned = push(images, "localhost/burst/push-probe:dev", tag, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    signed = subprocess.run(
        [sys.executable, "-m", "burst.cli.main", "image", "sign", pinned, "--key", str(tmp_path / "team.key")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert signed.returncode == 0, signed.stderr
    verified = subprocess.run(
        [sys.executable, "-m", "burst.cli.main", "image", "verify", pinned, "--key", "team", "--keys-dir", str(keys)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert verified.returncode == 0 and f"verified {pinned}" in verified.stdout, verified.stderr
    if shutil.which("cosign"):  # Debian trixie's cosign, where installed
        cosign = subprocess.run(
            ["cosign", "verify", "--key", str(keys / "team.pub"), "--insecure-ignore-tlog",
             "--allow-insecure-registry", pinned],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert cosign.returncode == 0, cosign.stderr

    def refused(ref: str) -> str:
        with pytest.raises(PolicyRefusal) as info:
            verify_image(ref, "team", trust)
        assert info.value.exit_code == EXIT_REFUSED
        return info.value.one_line()

    # a tag-only reference: refused before the registry is asked
    assert "digest" in refused(tag)
    # an image changed after signing (one more label: a new digest), pushed to the same tag:
    # unsigned, refused; with the original's signature copied beside it, refused too
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Containerfile").write_text(
        "FROM localhost/burst/push-probe:dev\nLABEL tampered=yes\n"
    )
    images.engine.run("build", "--pull=never", "--tag", "localhost/burst/tampered:dev",
                      str(tmp_path / "ctx"), timeout=300)  # fmt: skip
    tampered = push(images, "localhost/burst/tampered:dev", tag, tmp_path)
    assert tampered != pinned
    assert "signature" in refused(tampered).lower()
    from burst.supplychain.registry import RegistryStore

    store = RegistryStore(registry.host, "team/steps")
    good_sig = store.get_manifest(f"sha256-{pinned.split('@sha256:')[1]}.sig")
    assert good_sig is not None
    store.put_manifest(
        good_sig.data, good_sig.media_type, f"sha256-{tampered.split('@sha256:')[1]}.sig"
    )
    assert "digest" in refused(tampered).lower()
    assert verify_image(pinned, "team", trust).ref.digest == pinned.split("@")[1]
