"""Small OCI images made here, as OCI layout tars that ``ctr images import`` takes: the pod
sandbox's pause image and Argo's executor image, from binaries this machine has or built.

One layer, no base: each image holds the files it is given, the directories a container needs
(``/tmp`` writable by anyone, ``/proc``, ``/sys``, ``/dev``, ``/etc``) and its config.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

DIRS = ("bin", "tmp", "etc", "proc", "sys", "dev", "var", "var/run", "home")


def _add(tf: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode = len(data), 0, mode
    tf.addfile(ti, io.BytesIO(data))


def _blob(tf: tarfile.TarFile, data: bytes, media: str) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    _add(tf, f"blobs/sha256/{digest}", data)
    return {"mediaType": media, "digest": f"sha256:{digest}", "size": len(data)}


def layer(
    files: Mapping[str, Path | bytes],
    links: Mapping[str, str] | None = None,
    executable: Sequence[str] = (),
) -> bytes:
    """One layer tar: ``files`` by path in the image (from a file here, or bytes), ``links``
    (path -> target) as symlinks; files named in ``executable`` (and files copied from an
    executable here) get mode 0755."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as lt:
        for d in DIRS:
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755, 0
            lt.addfile(ti)
        for dest, src in sorted(files.items()):
            if isinstance(src, Path):
                mode = 0o755 if src.stat().st_mode & 0o111 or dest in executable else 0o644
                _add(lt, dest, src.read_bytes(), mode)
            else:
                _add(lt, dest, src, 0o755 if dest in executable else 0o644)
        for dest, target in sorted((links or {}).items()):
            ti = tarfile.TarInfo(dest)
            ti.type, ti.linkname, ti.mtime = tarfile.SYMTYPE, target, 0
            lt.addfile(ti)
    return buf.getvalue()


def write(out: Path, name: str, layer_tar: bytes, config: Mapping[str, Any]) -> str:
    """An OCI layout tar at ``out`` holding one image named ``name``; its manifest digest."""
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": dict(config),
        "rootfs": {
            "type": "layers",
            "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()],
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w") as tf:
        _add(tf, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": _blob(
                tf, json.dumps(image_config).encode(), "application/vnd.oci.image.config.v1+json"
            ),
            "layers": [_blob(tf, layer_tar, "application/vnd.oci.image.layer.v1.tar")],
        }
        desc = _blob(
            tf, json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json"
        )
        desc["annotations"] = {
            "io.containerd.image.name": name,
            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
        }
        desc["platform"] = {"architecture": "amd64", "os": "linux"}
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [desc],
        }
        _add(tf, "index.json", json.dumps(index).encode())
    return str(desc["digest"])


def busybox(out: Path, name: str, busybox_bin: Path, cmd: Sequence[str]) -> str:
    """A static busybox with ``sh``, ``echo``, ``sleep`` and ``cat`` linked to it."""
    links = {f"bin/{n}": "busybox" for n in ("sh", "echo", "sleep", "cat")}
    return write(
        out,
        name,
        layer({"bin/busybox": busybox_bin}, links),
        {"Cmd": list(cmd), "Env": ["PATH=/bin"]},
    )


def argoexec(out: Path, name: str, argoexec_bin: Path, kubectl_bin: Path) -> str:
    """Argo's executor image as Argo ships it, in what matters to a pod: ``argoexec`` as the
    entrypoint, ``kubectl`` on the PATH (resource templates run it), user 8737."""
    passwd = b"root:x:0:0:root:/root:/sbin/nologin\nargo:x:8737:8737::/home/argo:/sbin/nologin\n"
    return write(
        out,
        name,
        layer(
            {
                "bin/argoexec": argoexec_bin,
                "bin/kubectl": kubectl_bin,
                "etc/passwd": passwd,
                "etc/group": b"root:x:0:\nargo:x:8737:\n",
            }
        ),
        {
            "Entrypoint": ["argoexec"],
            "Env": ["PATH=/bin"],
            "User": "8737",
            "WorkingDir": "/home",
        },
    )
