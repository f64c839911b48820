"""Container mode of the local runner: each pod runs in the image its template names.

``burst run --containers`` hands the engine :class:`ContainerLauncher` as its launch hook
(:data:`burst.runner.pods.Launcher`) and its end hook: the engine works out the pod as for a
process (the same template, parameters, retry policy, exit handler), and the pod starts as
a container with what Kubernetes would give it:

* the image the template names, by digest and never pulled: it must be in the engine's
  store. The steps image (``{{workflow.parameters.steps-image}}``) is pinned to its digest
  when the run starts; train's image is the ``run_image`` of verify-image's document (the
  digest it verified), run as the store's image of that digest, and the run is refused before
  anything is created unless the trainer image here is that image, or the explicit opt-in for
  an unverified local image is given (:func:`prepare`, :mod:`burst.supplychain.provenance`).
  The engine is given ``name@sha256:...``, never a tag, and the report names each step's
  image, digest and provenance;
* the container's command and args as written (not mapped onto this machine's paths), its
  environment (the template's, then what the runner adds), no working directory of its own
  (the image's ``WORKDIR``, as in a pod);
* the user and group of the pod's and the container's ``securityContext`` (``runAsUser``,
  ``runAsGroup``, ``fsGroup`` as a supplementary group), ``capabilities.drop``,
  ``allowPrivilegeEscalation: false`` (no-new-privileges), ``readOnlyRootFilesystem``;
* its volumes at their ``mountPath`` (the runs volume), and ``/tmp`` from the pod's
  directory, where Argo puts input artifacts and the engine reads output parameters;
* no network (``--network=none``) unless the pod's environment names a store or endpoint
  on this machine's loopback: then the host's network, as a pod reaches its store.

The engine is docker (when its daemon answers) or podman. ``BURST_CONTAINER_STORE`` names a
directory for podman's own storage (``storage/``, ``run/``) and, when it holds one, a
``containers.conf`` (runtime, ulimits, cgroup manager of this machine): ``make images`` and
the container tests use one there, so the images they build are the ones runs use.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from burst.errors import BadInputError, InfraError, PolicyRefusal
from burst.runner.pods import POD_MARK, Pod
from burst.supplychain.provenance import (
    STEPS_IMAGE,
    UNVERIFIED_LOCAL,
    LocalImage,
    RunImage,
    choose_trainer,
    digest_of,
)

__all__ = [
    "STORE_ENV",
    "ContainerEngine",
    "ContainerLauncher",
    "EngineMissing",
    "find_engine",
    "images_for",
    "prepare",
]

log = logging.getLogger(__name__)

STORE_ENV = "BURST_CONTAINER_STORE"
#: where ``make images`` keeps podman's store and its record of what it built
DEFAULT_STORE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "burst" / "containers"
)
#: Environment values that mean the pod talks to a server on this machine.
LOOPBACK = re.compile(r"(^|[/@=])(127\.0\.0\.1|localhost|\[::1\])([:/]|$)")
#: Never passed into a container: they describe this machine, not the pod.
HOST_ONLY = {"PYTHONPATH", POD_MARK, "VIRTUAL_ENV", "PATH", "HOME", "PWD"}


class EngineMissing(InfraError):
    """No container engine that can start containers here (one line names what is missing)."""


@dataclass(frozen=True)
class ContainerEngine:
    """A container engine's command line: ``docker`` or ``podman`` with its global options."""

    binary: str
    name: str  # "docker" or "podman"
    global_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # e.g. CONTAINERS_CONF

    def argv(self, *args: str) -> list[str]:
        return [self.binary, *self.global_args, *args]

    def environ(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def run(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.argv(*args),
            env=self.environ(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise InfraError(f"{self.name} {args[0]}: exit {proc.returncode}: {last}")
        return proc

    def inspect(self, image: str) -> dict[str, Any]:
        """The local image's digest (the one a pinned ``image`` names, else its own), every
        manifest digest it is known by, id, size and labels; BadInputError when it is not in
        the engine's store (container mode never pulls)."""
        proc = self.run("image", "inspect", image, check=False)
        if proc.returncode != 0:
            raise BadInputError(
                f"image {image!r} is not in the {self.name} store (container mode never "
                "pulls): build it with `make images` or pull it first"
            )
        doc = json.loads(proc.stdout)[0]
        labels = doc.get("Labels") or (doc.get("Config") or {}).get("Labels") or {}
        repo_digests = [str(r).partition("@")[2] for r in doc.get("RepoDigests") or []]
        # a digest-pinned reference names the digest it resolved by (podman: any of the
        # image's manifest digests; its Digest field is one of them)
        digest = digest_of(image) or doc.get("Digest") or next(iter(repo_digests), "")
        return {
            "id": str(doc.get("Id", "")),
            "digest": str(digest or ""),
            "digests": [d for d in dict.fromkeys([str(digest or ""), *repo_digests]) if d],
            "size": int(doc.get("Size") or 0),
            "labels": dict(labels),
        }

    def find(self, image: str) -> dict[str, Any] | None:
        """:meth:`inspect`, or None when the store does not have ``image``."""
        try:
            return self.inspect(image)
        except BadInputError:
            return None


def podman_store(store: Path) -> tuple[tuple[str, ...], dict[str, str]]:
    args = ("--root", str(store / "storage"), "--runroot", str(store / "run"))
    conf = store / "containers.conf"
    return args, ({"CONTAINERS_CONF": str(conf)} if conf.is_file() else {})


def store_dir() -> Path | None:
    """``$BURST_CONTAINER_STORE``, else ``make images``' store when it exists, else None
    (podman's own storage)."""
    from burst.settings import current

    store = current().container_store
    if store is not None:
        return Path(store)
    return DEFAULT_STORE if (DEFAULT_STORE / "storage").is_dir() else None


def built_images() -> dict[str, str]:
    """What ``make images`` recorded: ``{"steps": ref, "trainer": ref}`` (may be empty)."""
    store = store_dir() or DEFAULT_STORE
    try:
        doc = json.loads((store / "images.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: str(v["ref"]) for k, v in doc.items() if isinstance(v, dict) and v.get("ref")}


def images_for(steps_image: str | None, trainer_image: str | None) -> dict[str, str]:
    """The steps image and the trainer image of a container run, as given, else
    ``$BURST_STEPS_IMAGE`` / ``$BURST_TRAINER_IMAGE``, else what ``make images`` built:
    ``{"steps-image": ref, "trainer-image": ref}`` (the trainer's left out when there is
    none: the spec's own image may be in the store). BadInputError when there is no steps
    image."""
    built = built_images()
    from burst.settings import current

    steps = steps_image or current().steps_image or built.get("steps")
    trainer = trainer_image or current().trainer_image or built.get("trainer")
    if not steps:
        raise BadInputError(
            "--containers: no image for --steps-image: pass it, or build it with `make images`"
        )
    return {"steps-image": str(steps), **({"trainer-image": str(trainer)} if trainer else {})}


def prepare(
    engine: ContainerEngine,
    spec_reference: str,
    steps_image: str | None = None,
    trainer_image: str | None = None,
    *,
    unverified_local: bool = False,
) -> tuple[ContainerLauncher, dict[str, str]]:
    """A container run's launcher and its workflow parameters, decided before anything is
    created: the steps image pinned to its digest (``steps-image``), and the image train runs
    for ``spec_reference`` (:func:`burst.supplychain.provenance.choose_trainer`): the spec's
    own image where the store has it by its digest, else the trainer image given or built
    when its digest is the spec's; else PolicyRefusal naming both digests, or with
    ``unverified_local`` that local image, labelled unverified. BadInputError when an image
    is not in the store (never pulled)."""
    from burst.supplychain.reference import parse_reference

    images = images_for(steps_image, trainer_image)
    steps_info = engine.inspect(images["steps-image"])
    steps = LocalImage.from_inspect(images["steps-image"], steps_info)
    found: dict[str, dict[str, Any]] = {}  # name -> what the store says of it
    try:
        ref = parse_reference(spec_reference)
    except PolicyRefusal:
        ref = None  # choose_trainer refuses it, naming what would run
    if ref is not None and not ref.is_layout:  # pulled by digest: the store has it
        info = engine.find(ref.pinned())
        if info is not None:
            found[ref.pinned()] = info
    trainer = images.get("trainer-image")
    if trainer is not None:  # not needed (may be absent) where the spec's image is here
        info = engine.find(trainer) if found else engine.inspect(trainer)
        if info is not None:
            found[trainer] = info
    candidates = [LocalImage.from_inspect(name, info) for name, info in found.items()]
    run = choose_trainer(spec_reference, candidates, unverified_local=unverified_local)
    if run.provenance == UNVERIFIED_LOCAL:
        log.warning(
            "train runs %s, an unverified local image (not %s, which verify-image accepts)",
            run.ref,
            run.accepted,
        )
    launcher = ContainerLauncher(engine, spec_image=run, steps_image=steps.pinned())
    launcher.images[steps.pinned()] = steps_info
    launcher.images[run.ref] = {**found[run.source], "digest": run.digest}
    return launcher, {"steps-image": steps.pinned()}


def find_engine() -> ContainerEngine:
    """docker when its daemon answers, else podman (rootful or rootless as this user is);
    EngineMissing with one line naming what is missing when neither can start containers."""
    missing: list[str] = []
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run(
            [docker, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        if probe.returncode == 0:
            return ContainerEngine(docker, "docker")
        missing.append("docker (no daemon answers)")
    podman = shutil.which("podman")
    if podman:
        store = store_dir()
        args, env = podman_store(store) if store else ((), {})
        engine = ContainerEngine(podman, "podman", args, env)
        probe = subprocess.run(
            engine.argv("info", "--format", "{{.Host.OCIRuntime.Name}}"),
            env=engine.environ(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if probe.returncode == 0:
            return engine
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        missing.append(f"podman ({last})")
    else:
        missing.append("podman (not installed: scripts/container-deps.sh)")
    raise EngineMissing("no container engine can start containers here: " + "; ".join(missing))


def bind(source: Path | str, target: str) -> list[str]:
    """A bind mount (``--mount``, not ``-v``: a pod directory's name may hold a colon, as
    ``teardown(0:eu)`` does; a comma it may not)."""
    if "," in str(source) or "," in target:
        raise BadInputError(f"cannot mount {source} at {target}: a comma in the path")
    return ["--mount", f"type=bind,source={source},destination={target}"]


def apply_fs_group(root: Path, gid: int) -> int:
    """The kubelet's ``fsGroup`` on a volume (``fsGroupChangePolicy: Always``, at every
    mount): everything in it belongs to group ``gid`` and is group-writable, directories
    setgid so what is created later inherits the group. Returns how many entries changed;
    an entry this user may not change is left as it is."""
    changed = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for entry, bits in [(dirpath, 0o2070)] + [
            (os.path.join(dirpath, f), 0o060) for f in filenames
        ]:
            try:
                st = os.lstat(entry)
                if (st.st_mode & 0o170000) == 0o120000:  # a symlink: left alone
                    continue
                if st.st_gid != gid:
                    os.chown(entry, -1, gid)
                    changed += 1
                if st.st_mode & bits != bits:
                    os.chmod(entry, (st.st_mode & 0o7777) | bits)
                    changed += 1
            except OSError:
                continue
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    return changed


@dataclass
class ContainerLauncher:
    """The engine's launch and end hooks for container mode (see the module's docstring)."""

    engine: ContainerEngine
    #: image reference -> what the engine's store says of it (digest, id), for the report
    images: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: pod key -> the image reference it ran in (pinned: name@sha256:...)
    ran_in: dict[str, str] = field(default_factory=dict)
    #: what runs for the spec's image (:func:`prepare`): a pod naming an image of the digest
    #: verify-image accepts runs this; None: no spec image is known (every image unverified)
    spec_image: RunImage | None = None
    #: the steps image, pinned when the run started
    steps_image: str | None = None
    #: pod key -> (the image its template named, what the engine runs, its provenance)
    named: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    #: host directories mounted at their own path too (the regional runner's site files
    #: name this machine's paths; a pod of a real cluster has its own)
    host_paths: tuple[Path, ...] = ()
    #: variables that, set in a pod's environment, mean it reaches stores on this machine
    #: (the regional runner's ``BURST_REGION_SITE`` names its region's loopback S3 server)
    store_env: tuple[str, ...] = ()

    def name(self, pod_dir: Path) -> str:
        run = pod_dir.parent.parent.name
        return "burst-" + re.sub(r"[^a-zA-Z0-9_.-]", "-", f"{run}-{pod_dir.name}")

    def image(self, ref: str) -> dict[str, Any]:
        if ref not in self.images:
            self.images[ref] = self.engine.inspect(ref)
        return self.images[ref]

    def resolve(self, image: str, where: str = "") -> tuple[str, str]:
        """What the engine runs for a pod naming ``image``, and its provenance: the image
        of the spec's digest (verified, or the opted-in local image), the pinned steps image,
        or (a launcher that knows no spec image) the image pinned to its digest, unverified.
        An image of any other digest is refused (PolicyRefusal): nothing verified it."""
        spec = self.spec_image
        if spec is not None and digest_of(image) == spec.accepted:
            return spec.ref, spec.provenance
        pinned = LocalImage.from_inspect(image, self.image(image)).pinned()
        self.images.setdefault(pinned, self.image(image))
        if self.steps_image is not None and pinned == self.steps_image:
            return pinned, STEPS_IMAGE
        if spec is None:
            return pinned, UNVERIFIED_LOCAL
        raise PolicyRefusal(
            f"the container names image {image}, neither the image verify-image accepted "
            f"({spec.accepted}) nor the steps image ({self.steps_image}): refusing to run it",
            where=where or None,
        )

    def command(self, pod: Pod) -> list[str]:
        """The engine's ``run`` command line for ``pod`` (kept apart for the unit tests)."""
        spec = pod.container
        if spec is None:
            raise BadInputError(f"{pod.path}: the pod carries no container spec")
        named = str(spec.get("image") or "")
        if not named:
            raise BadInputError(f"{pod.path}: the container names no image")
        image, provenance = self.resolve(named, pod.path)
        self.named[pod.key] = (named, image, provenance)
        sec = {**(pod.pod_security or {}), **(spec.get("securityContext") or {})}
        args = ["run", "--rm", "--name", self.name(pod.pod_dir), "--pull=never"]
        user = sec.get("runAsUser")
        if user is not None:
            group = sec.get("runAsGroup")
            args += ["--user", f"{user}:{group}" if group is not None else str(user)]
        fs_group = (pod.pod_security or {}).get("fsGroup")
        if fs_group is not None:
            args += ["--group-add", str(fs_group)]
        for cap in (sec.get("capabilities") or {}).get("drop") or []:
            args += ["--cap-drop", str(cap)]
        for cap in (sec.get("capabilities") or {}).get("add") or []:
            args += ["--cap-add", str(cap)]
        if sec.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        if sec.get("privileged"):
            raise BadInputError(f"{pod.path}: a privileged container is not run locally")
        if sec.get("readOnlyRootFilesystem"):
            args.append("--read-only")
        tmp = pod.pod_dir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp, 0o1777)  # an emptyDir: writable by the pod's user
        args += bind(tmp, "/tmp")
        for mount_path, local in pod.mounts:
            if fs_group is not None:
                apply_fs_group(Path(local), int(fs_group))
            args += bind(local, mount_path)
        for host in self.host_paths:
            args += bind(host, str(host))
        env = self.environment(pod)
        loopback = any(LOOPBACK.search(v) for v in env.values())
        network = "host" if loopback or any(k in env for k in self.store_env) else "none"
        args += [f"--network={network}"]
        for k, v in sorted(env.items()):
            args += ["--env", f"{k}={v}"]
        argv = [*(spec.get("command") or []), *(spec.get("args") or [])]
        if not argv:
            raise BadInputError(f"{pod.path}: the container has no command")
        args += ["--entrypoint", str(argv[0]), image, *[str(a) for a in argv[1:]]]
        return self.engine.argv(*args)

    def environment(self, pod: Pod) -> dict[str, str]:
        """The template's environment as written, then what the runner and the machine add
        (what differs from this process's environment), less this machine's own variables."""
        env = dict(pod.container_env)
        for k, v in pod.env.items():
            if k in HOST_ONLY or k in pod.container_env or os.environ.get(k) == v:
                continue
            env[k] = v
        for k in list(env):  # a value the engine mapped onto this machine, mapped back
            env[k] = pod.unmap(env[k])
        return env

    def launch(self, pod: Pod, log_file: IO[bytes]) -> subprocess.Popen[bytes]:
        argv = self.command(pod)
        named, ran, provenance = self.named[pod.key]
        self.ran_in[pod.key] = ran
        record = {"named": named, "provenance": provenance, **self.image(ran)}
        (pod.pod_dir / "container.json").write_text(
            json.dumps({"argv": argv, "image": record}, indent=1), encoding="utf-8"
        )
        return subprocess.Popen(
            argv,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=self.engine.environ(),
            start_new_session=True,
        )

    def end(self, pod_dir: Path) -> int:
        """The pod's main process (the engine's client) ended: remove its container, as the
        kubelet does when a pod goes (a client killed with SIGKILL leaves it running)."""
        grace = ("--time", "0") if self.engine.name == "podman" else ()
        proc = self.engine.run("rm", "--force", *grace, self.name(pod_dir), check=False)
        return 1 if proc.returncode == 0 and proc.stdout.strip() else 0

    def report(self) -> dict[str, dict[str, str]]:
        """Pod key -> the image it ran in (pinned), its digest and id, the image its template
        named, and its provenance (``burst.supplychain.provenance``)."""
        return {
            key: {
                "image": ref,
                "digest": str(self.images[ref]["digest"]),
                "id": str(self.images[ref]["id"]),
                "named": self.named[key][0],
                "provenance": self.named[key][2],
            }
            for key, ref in self.ran_in.items()
        }
