"""``make images``: build the steps image and the CPU trainer image here, with the engine found.

    python -m devtools.images [steps|trainer|all] [--variant cpu|cuda] [--json]

The committed Dockerfiles keep their pinned public bases (images/lock.json). Where the
locked base cannot be pulled (no registry reachable, as on the machines these tests run on),
the build replaces the Dockerfile's ``FROM`` with a base made from Debian packages by
``mmdebstrap`` (Python, venv, CA certificates: what the Dockerfiles expect of a base), built
once and cached under ``~/.cache/burst/base/``, and says so. With podman the build also takes
this machine's pip configuration (``/etc/pip.conf``, its CA bundle, wheel directories and
local indexes) through read-only mounts, so an offline machine builds from what it has;
nothing of it stays in the image. Sizes, digests and build times are printed and written to
``$BURST_CONTAINER_STORE/images.json`` (what ``burst run --containers`` runs by default).

Users building for their registry use images/build.sh (docker buildx, push, sign): see
docs/images.md.
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from burst.runner.containers import DEFAULT_STORE, STORE_ENV, ContainerEngine, find_engine

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "images" / "lock.json"
REQUIREMENTS = ROOT / "images" / "requirements.txt"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "burst"
BASE_SUITE = "bookworm"  # Python 3.11, as the project's own
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
BASE_MIRROR = "http://deb.debian.org/debian"
LOCAL_TAG = "localhost/burst"
#: what this machine runs on (containers.md): runc, not crun; ulimits podman may set
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
netns = "host"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""


@dataclass
class Built:
    name: str
    ref: str  # local tag
    digest: str
    id: str
    size_mb: float
    seconds: float
    base: str  # the base the build used
    base_substituted: bool


def say(line: str) -> None:
    print(f"images: {line}", file=sys.stderr, flush=True)


def lock() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(LOCK.read_text(encoding="utf-8"))
    return doc


def requirements_text() -> str:
    """images/requirements.txt: pyproject.toml's dependencies (the images' cached layer)."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return (
        "# burst's runtime dependencies, as pyproject.toml lists them: the images install them "
        "in a\n# layer of their own, cached until this file changes. Regenerate: "
        "python -m devtools.images --requirements\n" + "\n".join(deps["dependencies"]) + "\n"
    )


def store_dir() -> Path:
    return Path(os.environ.get(STORE_ENV) or DEFAULT_STORE)


def prepare_store(store: Path) -> None:
    """The store's containers.conf (written once: edit it for another machine)."""
    store.mkdir(parents=True, exist_ok=True)
    conf = store / "containers.conf"
    if not conf.exists():
        conf.write_text(CONTAINERS_CONF, encoding="utf-8")


def engine() -> ContainerEngine:
    os.environ.setdefault(STORE_ENV, str(DEFAULT_STORE))
    prepare_store(store_dir())
    return find_engine()


def base_tag(suite: str = BASE_SUITE) -> str:
    key = hashlib.sha256(" ".join((suite, *BASE_PACKAGES, BASE_MIRROR)).encode()).hexdigest()
    return f"{LOCAL_TAG}/base:{suite}-{key[:12]}"


def debian_base(eng: ContainerEngine, suite: str = BASE_SUITE) -> str:
    """The mmdebstrap base, in the engine's store: imported from the cached tarball, which
    is built once (about 30-130 s) when missing."""
    tag = base_tag(suite)
    if present(eng, tag):
        return tag
    tarball = CACHE / "base" / f"{tag.rsplit(':', 1)[1]}.tar"
    if not tarball.is_file():
        if not shutil.which("mmdebstrap"):
            raise SystemExit(
                "images: the locked base cannot be pulled and mmdebstrap is not installed "
                "(scripts/container-deps.sh)"
            )
        tarball.parent.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_suffix(".partial")
        started = time.monotonic()
        say(f"building the Debian {suite} base with mmdebstrap (once; cached at {tarball})")
        subprocess.run(
            [
                "mmdebstrap",
                "--variant=minbase",
                "--format=tar",
                "--include=" + ",".join(BASE_PACKAGES),
                suite,
                str(partial),
                BASE_MIRROR,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        partial.rename(tarball)
        say(f"base tarball built in {time.monotonic() - started:.0f} s")
    eng.run("import", str(tarball), tag, timeout=600)
    return tag


def present(eng: ContainerEngine, image: str) -> bool:
    probe = "exists" if eng.name == "podman" else "inspect"
    return eng.run("image", probe, image, check=False).returncode == 0


def pullable(eng: ContainerEngine, image: str) -> bool:
    if present(eng, image):
        return True
    try:
        return eng.run("pull", image, timeout=300, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def pip_config_text() -> str:
    """``pip config list`` of this interpreter, else of the one its venv was made from (make
    setup makes the venv without pip). Asked of a child process: in this one, even looking
    for pip (``find_spec``) makes setuptools' distutils hack give up its own distutils for
    the rest of the process (``_distutils_hack.spec_for_pip``), and a later ``import
    setuptools`` (torch.utils.cpp_extension) fails."""
    for python in dict.fromkeys([sys.executable, getattr(sys, "_base_executable", "")]):
        if not python:
            continue
        proc = subprocess.run(
            [python, "-m", "pip", "config", "list"],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        if proc.returncode == 0:
            return proc.stdout
    return ""


def pip_mounts(workdir: Path) -> list[str]:
    """``-v`` options that give a podman build this machine's pip configuration (its files
    and ``PIP_*`` variables merged into one pip.conf, and every local path it names), all
    read-only: an offline machine builds from the wheels and indexes it has."""
    conf = configparser.ConfigParser()
    conf["global"] = {}
    for line in pip_config_text().splitlines():
        name, _, value = line.partition("=")
        section, _, key = name.rpartition(".")
        if key and value and section in (":env:", "global"):
            conf["global"][key] = value.strip("'\"")
    paths: list[str] = []
    for value in conf["global"].values():
        for word in value.split():
            p = word.removeprefix("file://")
            if p.endswith("/simple"):  # a local index: its files lie beside it
                p = p.removesuffix("/simple")
            if p.startswith("/") and Path(p).exists() and p not in paths:
                paths.append(p)
    out = workdir / "pip.conf"
    with out.open("w", encoding="utf-8") as fh:
        conf.write(fh)
    mounts = [f"{out}:/etc/pip.conf:ro", *(f"{p}:{p}:ro" for p in paths)]
    return [a for m in mounts for a in ("-v", m)]


CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
PYPI_INDEX = "https://pypi.org/simple"


def cpu_torch_index() -> str:
    """PyTorch's CPU index, or PyPI where that index cannot be reached (machines that reach
    only PyPI): PyPI's build carries the CUDA libraries (several GB more) and runs on the CPU."""
    host = CPU_TORCH_INDEX.split("/")[2]
    try:
        socket.create_connection((host, 443), timeout=5).close()
    except OSError as exc:
        say(f"trainer: {host} cannot be reached ({exc}); torch comes from PyPI (its CUDA build, "
            "which runs on the CPU: a larger image)")  # fmt: skip
        return PYPI_INDEX
    return CPU_TORCH_INDEX


def build_args(name: str, variant: str, version: str) -> list[str]:
    args = {"BURST_VERSION": version}
    if name == "trainer":
        t = lock()["trainer"]
        args |= {
            "CUDA_VERSION": t["cuda"],
            "DRIVER_MIN": t["driver_min"],
            "TORCH_VERSION": t["torch"],
            "TORCH_INDEX": t["torch_index"],
            "NCCL_VERSION": t["nccl"],
            "DEEPSPEED_VERSION": t["deepspeed"],
            "ACCELERATOR": "cuda",
        }
        if variant == "cpu":
            args |= {
                "ACCELERATOR": "cpu",
                "CUDA_VERSION": "none",
                "DRIVER_MIN": "none",
                "NCCL_VERSION": "none",
                "TORCH_INDEX": cpu_torch_index(),
            }
    return [a for k, v in args.items() for a in ("--build-arg", f"{k}={v}")]


def build(
    eng: ContainerEngine,
    name: str,
    variant: str = "cpu",
    dockerfile: Path | None = None,
    check: bool = True,
) -> Built:
    dockerfile = dockerfile or ROOT / "images" / name / "Dockerfile"
    locked = lock()["base_images"][name]
    base, substituted = locked, False
    if not pullable(eng, locked):
        base, substituted = debian_base(eng), True
        say(f"{name}: the locked base {locked} cannot be pulled here; building on {base} "
            f"(Debian {BASE_SUITE} from mmdebstrap)")  # fmt: skip
    version = "dev"
    tag = f"{LOCAL_TAG}/{name}:{variant if name == 'trainer' else 'local'}"
    args = ["build", "--file", str(dockerfile), "--tag", tag, *build_args(name, variant, version)]
    if eng.name == "podman":
        args += ["--network=host", "--layers"]
        if substituted:
            args += ["--from", base, *pip_mounts(store_dir())]
    elif substituted:
        args += ["--build-context", f"{locked.split('@')[0]}={base}"]
    before = eng.run("image", "inspect", "--format", "{{.Id}}", tag, check=False).stdout.strip()
    started = time.monotonic()
    say(f"{name}: building {tag} with {eng.name} ({dockerfile.relative_to(ROOT)})")
    proc = subprocess.run(
        [*eng.argv(*args), str(ROOT)],
        env=eng.environ(),
        stdout=sys.stderr,
        stderr=subprocess.STDOUT,
        check=False,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"images: {name}: the build failed (exit {proc.returncode})")
    seconds = time.monotonic() - started
    info = eng.inspect(tag)
    if before and before != info["id"]:
        # the image this build replaced (untagged now): removed, or every rebuild after a
        # source change would leave one more in the store; kept where something still uses it
        eng.run("rmi", before, check=False)
    if name == "trainer" and check:
        check_trainer(eng, tag, variant)
    built = Built(
        name, tag, info["digest"], info["id"], round(info["size"] / 1e6, 1), round(seconds, 1),
        base, substituted,
    )  # fmt: skip
    say(f"{name}: {tag} {built.size_mb} MB, {built.digest or built.id}, {built.seconds} s")
    return built


def check_trainer(eng: ContainerEngine, tag: str, variant: str) -> None:
    """torch and DeepSpeed in the image are the versions the lock (and the labels) claim."""
    t = lock()["trainer"]
    probe = "import torch, deepspeed; print(torch.__version__.split('+')[0], deepspeed.__version__)"
    proc = eng.run(
        "run", "--rm", "--network=none", "--entrypoint", "python", tag, "-c", probe,
        timeout=300, check=False,
    )  # fmt: skip
    got = (proc.stdout.strip().splitlines() or [""])[-1]
    want = f"{t['torch']} {t['deepspeed']}"
    if got != want:
        raise SystemExit(f"images: {tag} holds torch/DeepSpeed {got!r}, images/lock.json {want!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.images", description=__doc__)
    ap.add_argument("what", nargs="?", choices=("steps", "trainer", "all"), default="all")
    ap.add_argument("--variant", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--json", action="store_true", help="print the record on stdout")
    ap.add_argument(
        "--requirements", action="store_true", help="rewrite images/requirements.txt and stop"
    )
    a = ap.parse_args(argv)
    if a.requirements:
        REQUIREMENTS.write_text(requirements_text(), encoding="utf-8")
        return 0
    eng = engine()
    say(f"engine: {eng.name}" + (f" (store {store_dir()})" if eng.name == "podman" else ""))
    built = [build(eng, n, a.variant) for n in ("steps", "trainer") if a.what in (n, "all")]
    record_file = store_dir() / "images.json"
    record = json.loads(record_file.read_text()) if record_file.is_file() else {}
    record.update({b.name: asdict(b) for b in built})
    record_file.parent.mkdir(parents=True, exist_ok=True)
    record_file.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    for b in built:
        print(f"{b.name:8} {b.ref}  {b.size_mb} MB  {b.digest or b.id}  built in {b.seconds} s",
              file=sys.stderr)  # fmt: skip
    if a.json:
        print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
