"""Every real node of the tier starts from one image seed (devtools/cluster/seed.py): the images
``make images`` built are imported once, and each node's containerd root shares their layers'
files with the seed (hard links: the trainer's 6 GB is on the disk once, however many nodes a
session adds) while owning its metadata databases (each containerd writes its own).

The red CI of efa9150 ran out of disk importing the trainer into its fifth or so node."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devtools.cluster.images import LOCAL_IMAGES
from devtools.cluster.kubelet import SHARED_PARTS
from devtools.cluster.tier import Tier

pytestmark = pytest.mark.cluster

META = Path("io.containerd.metadata.v1.bolt") / "meta.db"


def _layer_files(root: Path) -> dict[Path, int]:
    """Regular files of the overlay snapshots (relative path -> inode)."""
    snaps = root.joinpath(*SHARED_PARTS[0])
    out: dict[Path, int] = {}
    for dirpath, _, files in os.walk(snaps):
        for f in files:
            p = Path(dirpath) / f
            st = p.lstat()
            if p.is_file() and not p.is_symlink() and st.st_size > 1 << 20:
                out[p.relative_to(snaps)] = st.st_ino
    return out


def test_every_real_node_shares_the_seeds_layers(tier: Tier) -> None:
    if tier.mode != "real":
        pytest.skip("the stand-in kubelet imports no images")
    seed = tier._seed
    assert seed is not None and (seed.parent / "complete").is_file()
    seed_files = _layer_files(seed)
    assert len(seed_files) > 100, "the seed holds no trainer layers"
    nodes = list(tier.real_nodes.values())
    assert nodes
    for node in nodes:
        root = node.dir / "containerd" / "root"
        mine = _layer_files(root)
        # the seed's files, the same inodes: no copy of the layers on this node (its
        # containers' own snapshots come on top)
        assert {k: mine.get(k) for k in seed_files} == seed_files, node.name
        assert (root / META).stat().st_ino != (seed / META).stat().st_ino, node.name
        refs = node.images()
        for kind, tag in LOCAL_IMAGES.items():
            assert tag in refs, f"{node.name} lacks {kind}"
