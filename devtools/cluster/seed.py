"""The images ``make images`` built, imported once into a containerd root that every real node
of the tier starts from (``RealNode.start(seed=...)``, a hard-linked copy: kubelet.clone_root).

Importing the 6 GB trainer into each node cost each node 6 GB of disk (12 GB while it
imported) and a minute; a session's tier adds a node per run, and the CI machine's disk ran out
(the red CI of efa9150: 12.0 GiB free, 12.2 GiB needed, at the quickstart's node). Now the
images are imported once per image build, into ``~/.cache/burst/tier-images/seed-<key>``
(``key``: the images' IDs and names and the containerd that wrote the root). The archives
``podman save`` writes for the import are removed as soon as they are imported, so the cache
holds the images once. An older seed is removed when a new one is made. A lock serialises
tiers of several processes (a seed is never removed or half-made while another copies it).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from devtools.cluster.controlplane import ControlPlane, TierError
from devtools.cluster.images import CACHE, LOCAL_IMAGES, image_id, local_image_archive
from devtools.cluster.kubelet import RealNode

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _locked(exclusive: bool) -> Iterator[None]:
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "seed.lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _key(images: Mapping[str, Sequence[str]], containerd: Path) -> str:
    ids = {kind: image_id(LOCAL_IMAGES[kind]) for kind in sorted(images)}
    names = {kind: sorted(images[kind]) for kind in sorted(images)}
    blob = json.dumps([ids, names, str(containerd.resolve())], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def image_seed(
    cp: ControlPlane,
    bins: Mapping[str, Path],
    images: Mapping[str, Sequence[str]],
    log_dir: Path,
) -> Path:
    """The containerd root holding the local images ``images`` names (kind -> the more
    references pods name it by), made now if this image build has none."""
    key = _key(images, bins["containerd"])
    seed = CACHE / f"seed-{key}"
    with _locked(exclusive=True):
        if (seed / "complete").is_file():
            return seed / "root"
        for old in [*CACHE.glob("seed-*"), *CACHE.glob("*.tar"), *CACHE.glob("*.tar.part")]:
            log.info("removing the older tier image cache %s", old)
            shutil.rmtree(old) if old.is_dir() else old.unlink(missing_ok=True)
        node = RealNode(cp, bins, "seed", None, log_dir=log_dir)
        try:
            node.start_containerd()
            for kind in sorted(images):
                tag = LOCAL_IMAGES[kind]
                tar = local_image_archive(tag)
                try:
                    log.info("importing %s into the tier's image seed", tag)
                    node.import_image(tar, tag, *images[kind])
                finally:
                    tar.unlink(missing_ok=True)  # the seed holds it now
        except BaseException:
            node.stop()
            raise
        errors = node.stop(remove=False)
        if errors:
            shutil.rmtree(node.dir, ignore_errors=True)
            raise TierError(f"the tier's image seed: {'; '.join(errors)}")
        part = CACHE / f"seed-{key}.part"
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir()
        # mv, not shutil.move: across file systems it keeps the layers' owners
        moved = subprocess.run(
            ["mv", str(node.dir / "containerd" / "root"), str(part / "root")],
            capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        if moved.returncode != 0:
            shutil.rmtree(node.dir, ignore_errors=True)
            raise TierError(f"the tier's image seed: mv: {moved.stderr.strip()}")
        shutil.rmtree(node.dir, ignore_errors=True)
        (part / "complete").write_text(json.dumps({k: list(v) for k, v in images.items()}))
        part.rename(seed)
        return seed / "root"


@contextlib.contextmanager
def seed_in_use() -> Iterator[None]:
    """Hold while a node copies a seed: no other tier removes it meanwhile."""
    with _locked(exclusive=False):
        yield
