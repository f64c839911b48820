"""Container mode's pod -> ``podman run`` translation, on the compiled templates (no engine
needed: the image's inspection is given, nothing is started)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst import checkout
from burst.runner.containers import ContainerEngine, ContainerLauncher, apply_fs_group
from burst.runner.pods import Pod

TRAIN = checkout.COMPILED / "burst-train.yaml"
REGIONAL = checkout.COMPILED / "burst-regional.yaml"
STEPS_IMAGE = "localhost/burst/steps:local"


def template(path: Path, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    t = next(t for t in doc["spec"]["templates"] if t["name"] == name)
    return doc, t


def launcher() -> ContainerLauncher:
    got = ContainerLauncher(ContainerEngine("/usr/bin/podman", "podman"))
    got.images[STEPS_IMAGE] = {"digest": "sha256:" + "a" * 64, "id": "b" * 64}
    return got


def pod(tmp_path: Path, name: str = "preflight", **container: Any) -> Pod:
    doc, t = template(TRAIN, name)
    c = {**t["container"], "image": STEPS_IMAGE, **container}
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    pod_dir = runs / "r1" / "pods" / f"001-{name}"
    env = {e["name"]: str(e.get("value", "")).replace("/var/lib/burst/runs", str(runs))
           for e in c.get("env") or []}  # fmt: skip
    env.update(os.environ)
    env["BURST_LOG_JSON"] = "1"
    env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9000"  # added by the machine (a store here)
    return Pod(
        step=name,
        key=name,
        template=name,
        path=f"main/{name}",
        argv=["/usr/bin/python3"],
        env=env,
        cwd=str(tmp_path),
        pod_dir=pod_dir,
        log_file=pod_dir / "log.txt",
        container=c,
        pod_security=doc["spec"]["securityContext"],
        mounts=(("/var/lib/burst/runs", runs),),
        container_env={e["name"]: str(e.get("value", "")) for e in c.get("env") or []},
    )


def test_a_pod_runs_as_its_template_says(tmp_path: Path) -> None:
    p = pod(tmp_path)
    argv = launcher().command(p)
    run = argv[argv.index("run") :]
    assert run[:6] == ["run", "--rm", "--name", "burst-r1-001-preflight", "--pull=never", "--user"]
    assert run[6] == "1000:1000"  # the workflow's runAsUser / runAsGroup
    assert run[run.index("--group-add") + 1] == "1000"  # fsGroup
    assert run[run.index("--cap-drop") + 1] == "ALL"
    assert run[run.index("--security-opt") + 1] == "no-new-privileges"
    assert "--read-only" not in run  # the template does not ask for a read-only root
    assert f"type=bind,source={tmp_path / 'runs'},destination=/var/lib/burst/runs" in run
    assert f"type=bind,source={p.pod_dir / 'tmp'},destination=/tmp" in run
    # the command as written, not mapped onto this machine's paths, in the image's WORKDIR
    tail = run[run.index("--entrypoint") :]
    # the image by its digest, never its tag (issue 46)
    assert tail[:4] == ["--entrypoint", "python", "localhost/burst/steps@sha256:" + "a" * 64, "-m"]
    assert "/var/lib/burst/runs" in tail and "/tmp/outputs/decision.json" in tail
    assert "--workdir" not in run
    env = {run[i + 1].split("=", 1)[0]: run[i + 1].split("=", 1)[1]
           for i, a in enumerate(run) if a == "--env"}  # fmt: skip
    assert env["BURST_RUNS_ROOT"] == "/var/lib/burst/runs"  # unmapped
    assert "PATH" not in env and "PYTHONPATH" not in env and "HOME" not in env
    # the pod reaches a store on this machine's loopback: the host's network
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    assert "--network=host" in run


def test_no_network_unless_a_loopback_store_is_named(tmp_path: Path) -> None:
    p = pod(tmp_path)
    p.env.pop("AWS_ENDPOINT_URL")
    run = launcher().command(p)
    assert "--network=none" in run and "--network=host" not in run


def test_read_only_root_and_privileged(tmp_path: Path) -> None:
    _, t = template(TRAIN, "preflight")
    sec = {**t["container"]["securityContext"], "readOnlyRootFilesystem": True}
    assert "--read-only" in launcher().command(pod(tmp_path, securityContext=sec))
    from burst.errors import BadInputError

    with pytest.raises(BadInputError, match="privileged"):
        launcher().command(pod(tmp_path, securityContext={**sec, "privileged": True}))


def test_an_image_not_in_the_store_is_bad_input(tmp_path: Path) -> None:
    """Container mode never pulls: an image it does not have is named in one line."""
    import shutil

    from burst.errors import BadInputError

    if not shutil.which("podman"):
        pytest.skip("podman is not installed")
    lau = ContainerLauncher(ContainerEngine("podman", "podman", ("--root", str(tmp_path / "s"),
                                                                  "--runroot", str(tmp_path / "r"))))  # fmt: skip
    with pytest.raises(BadInputError, match="not in the podman store"):
        lau.command(pod(tmp_path))


def test_unmap_gives_the_pods_paths(tmp_path: Path) -> None:
    p = pod(tmp_path)
    runs = tmp_path / "runs"
    assert p.unmap(str(runs / "r1" / "x")) == "/var/lib/burst/runs/r1/x"
    assert p.unmap(str(runs)) == "/var/lib/burst/runs"
    assert p.unmap(f"--out={p.pod_dir}/tmp/o.json") == "--out=/tmp/o.json"
    assert p.unmap("/etc/hosts") == "/etc/hosts"


def test_fs_group_makes_the_volume_the_pods(tmp_path: Path) -> None:
    """The kubelet's fsGroup: the pod's group owns the volume and may write in it."""
    vol = tmp_path / "vol"
    (vol / "run" / "docs").mkdir(parents=True)
    (vol / "run" / "spec.yaml").write_text("x")
    gid = os.getgid() if os.geteuid() != 0 else 1000
    apply_fs_group(vol, gid)
    for p in (vol, vol / "run", vol / "run" / "docs"):
        st = p.stat()
        assert st.st_gid == gid and st.st_mode & 0o2070 == 0o2070
    st = (vol / "run" / "spec.yaml").stat()
    assert st.st_gid == gid and st.st_mode & 0o060 == 0o060


def test_the_regional_aggregator_runs_on_the_trainer_image() -> None:
    """Issue 27: the aggregator imports torch; it named the steps image (no torch) and failed
    on import in a container. The container tier runs it; this pins the template."""
    for path in (REGIONAL, checkout.ROOT / "deploy" / "argo" / "burst-regional.yaml"):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        agg = [t for t in doc["spec"]["templates"]
               if "burst.steps.aggregate" in (t.get("container") or {}).get("command", [])]  # fmt: skip
        assert agg and all(
            t["container"]["image"] == "{{inputs.parameters.trainer-image}}" for t in agg
        ), path


def test_the_steps_image_has_libatomic() -> None:
    """Issue 27: regopy's native library needs libatomic.so.1 (the container tier shows the
    image without it failing); the Dockerfile installs it."""
    text = (checkout.ROOT / "images" / "steps" / "Dockerfile").read_text(encoding="utf-8")
    assert "libatomic1" in text


def test_a_pod_directory_with_a_colon_mounts(tmp_path: Path) -> None:
    """A fanned-out step's pod directory is named ``teardown(0:ap-southeast-1)``: ``-v``
    split it at the colon ("invalid option type"); a bind ``--mount`` does not."""
    p = pod(tmp_path)
    p = Pod(**{**p.__dict__, "pod_dir": p.pod_dir.parent / "002-teardown(0:ap-southeast-1)"})
    run = launcher().command(p)
    assert f"type=bind,source={p.pod_dir / 'tmp'},destination=/tmp" in run
    assert "-v" not in run


def test_the_plan_step_imports_no_torch() -> None:
    """The plan step runs on the steps image (no torch); planning a regional-sync spec
    imported torch through the codecs' byte counts (found by the container tier)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import burst.regional.estimates, burst.plan.regional, burst.steps.plan\n"
        "from burst.regional.estimates import delta_bytes\n"
        "print(delta_bytes([1000], 'int8'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=checkout.ROOT, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-800:]


def test_no_example_stores_checkpoints_in_runs_runs() -> None:
    """A relative file:// store is under the runs root now (issue 27): an example that still
    wrote file://runs/... would land in runs/runs/."""
    for path in sorted((checkout.ROOT / "examples").glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        assert "file://runs/" not in text, f"{path.name}: use file://checkpoints"
