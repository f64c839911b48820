"""``make engines``: build the cluster engines the engines tier runs, from their Go modules.

    python -m devtools.engines [--json] [--only NAME ...]

Each engine is built once per machine at a pinned version into a cache shared by every clone
(``~/.cache/burst/engines/<name>-<version>-<key>/``, as checkov's venv and the DeepSpeed op
cache are); ``key`` hashes what the build depends on (the pin, the module files under
``engines/``, the Go version), so a change of any of them builds again and an unchanged one is
reused. A build that fails leaves nothing behind in the cache. Kubernetes and etcd are built
inside small modules of the project's own (``engines/kube``, ``engines/etcd``): Kubernetes'
own go.mod names its staging modules at v0.0.0, so ``go install`` of its commands is refused;
``engines/kube/go.mod`` replaces each staging module with its published ``v0.<minor>.<patch>``.
Argo, Kueue and kwok have no replace directives and build with ``go install module@version``.

The versions here are the tier's truth: docs/reference/engines-tier.md lists them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "burst" / "engines"
ENGINES_ENV = "BURST_ENGINES_DIR"  # a directory that holds every binary: skips the builds

KUBERNETES = "v1.35.4"
ETCD = "v3.6.16"
ARGO = "v4.0.5"  # the only v4 release the Go module proxy serves here (see the tier's doc)
KUEUE = "v0.17.0"
KWOK = "v0.8.0"
CONTAINERD = "v2.4.2"

log = logging.getLogger("burst.engines")


class BuildFailed(RuntimeError):
    """A Go build of an engine failed (its output's tail is in the message)."""


@dataclass(frozen=True)
class Engine:
    name: str
    version: str
    binaries: tuple[str, ...]
    # either a module directory of the project's (go build of packages inside it) ...
    module_dir: str | None = None
    packages: tuple[str, ...] = ()
    ldflags: str = "-s -w"
    # Go build tags (go build/install -tags a,b): part of the key
    tags: tuple[str, ...] = ()
    # ... or go install of module@version packages ...
    install: tuple[str, ...] = ()
    # ... or go build of packages inside a copy of a module's source (module@version), with
    # empty files made at the given paths first (Argo's CLI embeds its UI's build output,
    # ui/dist/app, which the module does not carry: the CLI serves no UI here)
    source: str | None = None
    placeholders: tuple[str, ...] = ()
    # (path, target) symlinks of the repository that the module zip drops (Go module zips
    # carry no symlinks): made again in the copy as copies of their targets
    links: tuple[tuple[str, str], ...] = ()

    def key(self, go_version: str) -> str:
        h = hashlib.sha256()
        h.update(f"{self.name} {self.version} {self.ldflags} {go_version}".encode())
        for item in (
            *self.packages,
            *self.install,
            self.source or "",
            *self.placeholders,
            *(f"{a}->{b}" for a, b in self.links),
            *(f"tag:{t}" for t in self.tags),
        ):
            h.update(item.encode())
        if self.module_dir:
            for f in sorted((ROOT / self.module_dir).glob("*")):
                if f.is_file():
                    h.update(f.name.encode())
                    h.update(f.read_bytes())
        return h.hexdigest()[:12]


def _kube_ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    return " ".join(
        [
            "-s -w",
            f"-X k8s.io/component-base/version.gitVersion={version}",
            f"-X k8s.io/component-base/version.gitMajor={major}",
            f"-X k8s.io/component-base/version.gitMinor={minor}",
            "-X k8s.io/component-base/version.gitTreeState=clean",
            f"-X k8s.io/client-go/pkg/version.gitVersion={version}",
        ]
    )


ENGINES: tuple[Engine, ...] = (
    Engine(
        "kubernetes",
        KUBERNETES,
        ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet"),
        module_dir="engines/kube",
        packages=tuple(
            f"k8s.io/kubernetes/cmd/{c}"
            for c in (
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "kubectl",
                "kubelet",
            )
        ),
        ldflags=_kube_ldflags(KUBERNETES),
    ),
    Engine("etcd", ETCD, ("etcd",), module_dir="engines/etcd", packages=(".",)),
    Engine(
        "argo",
        ARGO,
        ("workflow-controller", "argoexec", "argo"),
        source=f"github.com/argoproj/argo-workflows/v4@{ARGO}",
        ldflags=" ".join(
            ["-s -w"]
            + [
                f"-X github.com/argoproj/argo-workflows/v4.{k}={v}"
                for k, v in (("version", ARGO), ("gitTag", ARGO), ("gitTreeState", "clean"))
            ]
        ),
        packages=("./cmd/workflow-controller", "./cmd/argoexec", "./cmd/argo"),
        placeholders=("ui/dist/app/index.html",),
        # a symlink in Argo's repository, absent from the v4.0.5 module zip: without it the
        # executor does not build for Linux ("undefined: Setpgid")
        links=(("workflow/executor/osspecific/signal_linux.go", "signal_darwin.go"),),
    ),
    Engine("kueue", KUEUE, ("kueue",), install=(f"sigs.k8s.io/kueue/cmd/kueue@{KUEUE}",)),
    # the real kubelet's container runtime (tests/cluster/test_real_kubelet.py); runc itself is
    # Debian's (scripts/system-deps.sh). no_btrfs: the btrfs snapshotter needs cgo headers.
    Engine(
        "containerd",
        CONTAINERD,
        ("containerd", "ctr", "containerd-shim-runc-v2"),
        install=tuple(
            f"github.com/containerd/containerd/v2/cmd/{c}@{CONTAINERD}"
            for c in ("containerd", "ctr", "containerd-shim-runc-v2")
        ),
        tags=("no_btrfs",),
    ),
)


def go_version() -> str:
    try:
        out = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildFailed(f"no Go toolchain here (go env GOVERSION: {exc})") from None
    return out.stdout.strip()


def engine_dir(engine: Engine, go: str) -> Path:
    return CACHE / f"{engine.name}-{engine.version}-{engine.key(go)}"


def _complete(d: Path, engine: Engine) -> bool:
    return all((d / b).is_file() and os.access(d / b, os.X_OK) for b in engine.binaries)


def module_source(ref: str) -> Path:
    """A module's source directory in the Go module cache (downloaded if missing)."""
    proc = subprocess.run(
        ["go", "mod", "download", "-json", ref],
        capture_output=True,
        text=True,
        cwd="/",
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    )
    try:
        return Path(json.loads(proc.stdout)["Dir"])
    except (ValueError, KeyError):
        raise BuildFailed(
            f"go mod download {ref}: {(proc.stderr or proc.stdout).strip()[-300:]}"
        ) from None


def _source_copy(engine: Engine, tmp: Path) -> Path:
    assert engine.source
    work = tmp.with_name(tmp.name + ".src")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(module_source(engine.source), work)
    for p in [work, *work.rglob("*")]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | 0o200)  # the module cache is read-only
    for rel, target in engine.links:
        dst = work / rel
        if not dst.exists():
            shutil.copyfile(dst.parent / target, dst)
    for rel in engine.placeholders:
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text("<!-- not built: the engines tier serves no UI -->\n")
    return work


def build(engine: Engine, go: str) -> Path:
    """The directory holding the engine's binaries, built now unless the cache has them."""
    final = engine_dir(engine, go)
    if _complete(final, engine):
        return final
    tmp = final.with_name(final.name + f".building-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    env = {**os.environ, "GOFLAGS": "-buildvcs=false -trimpath", "CGO_ENABLED": "0"}
    tags = ["-tags", ",".join(engine.tags)] if engine.tags else []
    cwd: Path
    if engine.source:
        cwd = _source_copy(engine, tmp)
        cmd = ["go", "build", *tags, "-ldflags", engine.ldflags, "-o", str(tmp) + "/"]
        cmd += engine.packages
    elif engine.module_dir:
        cmd = ["go", "build", *tags, "-ldflags", engine.ldflags, "-o"]
        if len(engine.packages) == 1:
            cmd += [str(tmp / engine.binaries[0]), *engine.packages]
        else:
            cmd += [str(tmp) + "/", *engine.packages]
        cwd = ROOT / engine.module_dir
    else:
        cmd = ["go", "install", *tags, "-ldflags", engine.ldflags, *engine.install]
        env["GOBIN"] = str(tmp)
        cwd = ROOT
    log.info("building %s %s: %s", engine.name, engine.version, " ".join(cmd))
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if engine.source:
        shutil.rmtree(cwd, ignore_errors=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise BuildFailed(
            f"{engine.name} {engine.version}: go exited {proc.returncode}\n" + "\n".join(tail)
        )
    if not _complete(tmp, engine):
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildFailed(f"{engine.name} {engine.version}: the build left no {engine.binaries}")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    log.info("built %s %s in %.0f s", engine.name, engine.version, time.monotonic() - started)
    return final


def binaries(names: Sequence[str] | None = None) -> dict[str, Path]:
    """Every engine binary by name (``kube-apiserver`` -> its path), building what is missing.
    With ``BURST_ENGINES_DIR`` set, the binaries are taken from that directory as they are."""
    given = os.environ.get(ENGINES_ENV)
    chosen = [e for e in ENGINES if names is None or e.name in names]
    if given:
        return {b: Path(given) / b for e in chosen for b in e.binaries}
    go = go_version()
    found: dict[str, Path] = {}
    for engine in chosen:
        d = build(engine, go)
        found.update({b: d / b for b in engine.binaries})
    return found


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m devtools.engines", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--only", action="append", help="build only this engine (repeatable)")
    ap.add_argument("--json", action="store_true", help="print the binaries' paths as JSON")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    known = {e.name for e in ENGINES}
    for name in args.only or []:
        if name not in known:
            print(
                f"engines: unknown engine {name!r} (known: {', '.join(sorted(known))})",
                file=sys.stderr,
            )
            return 2
    try:
        found = binaries(args.only)
    except BuildFailed as exc:
        print(f"engines: build failed: {exc}", file=sys.stderr)
        return 3
    if args.json:
        print(json.dumps({k: str(v) for k, v in sorted(found.items())}, indent=2))
    else:
        for engine in ENGINES:
            if args.only and engine.name not in args.only:
                continue
            print(f"{engine.name} {engine.version}: {found[engine.binaries[0]].parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
