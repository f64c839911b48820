"""The images ``make images`` built (podman, ``devtools/images.py``), as archives the tier's
real nodes import: ``podman save`` once per image ID, under ``~/.cache/burst/tier-images``,
imported there into the seed every node starts from (devtools.cluster.seed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from devtools.cluster.controlplane import TierError

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "burst" / "tier-images"
#: kind -> the local tag ``make images`` gives it
LOCAL_IMAGES = {"steps": "localhost/burst/steps:local", "trainer": "localhost/burst/trainer:cpu"}


def _podman(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    from burst.runner.containers import EngineMissing, find_engine

    try:
        eng = find_engine()
    except EngineMissing as exc:
        raise TierError(str(exc)) from None
    if eng.name != "podman":
        raise TierError("the real nodes' images need podman and `make images`")
    return subprocess.run(
        eng.argv(*args), env=eng.environ(), capture_output=True, text=True, timeout=timeout
    )


def missing_images() -> str | None:
    """The first image ``make images`` has not built here, in one line (None: all built)."""
    try:
        for tag in LOCAL_IMAGES.values():
            if _podman("image", "exists", tag, timeout=60).returncode != 0:
                return f"{tag} (make images)"
    except TierError as exc:
        return str(exc)
    return None


def image_id(tag: str) -> str:
    """The ID of the local image ``tag``."""
    got = _podman("image", "inspect", "--format", "{{.Id}}", tag, timeout=60)
    if got.returncode != 0:
        raise TierError(f"{tag} is not built here (make images): {got.stderr.strip()}")
    return got.stdout.strip()


def local_image_archive(tag: str) -> Path:
    """An archive of the local image ``tag`` that ``ctr images import`` takes, made once per
    image ID (devtools.cluster.seed removes it once imported)."""
    kind = tag.rsplit("/", 1)[-1].split(":")[0]
    out = CACHE / f"{kind}-{image_id(tag)[:16]}.tar"
    if out.is_file():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    for old in CACHE.glob(f"{kind}-*.tar*"):  # the image was built again: one archive a kind
        old.unlink(missing_ok=True)
    tmp = out.with_suffix(".tar.part")
    # a docker archive: uncompressed layers (an OCI archive gzips 6 GB on one core)
    saved = _podman("save", "--format", "docker-archive", "-o", str(tmp), tag)
    if saved.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise TierError(f"podman save {tag}: {saved.stderr.strip()}")
    shutil.move(tmp, out)
    return out
