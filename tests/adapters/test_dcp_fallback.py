"""The DCP adapter's reader goes through the one restore loop (issue 42): a newest checkpoint
that does not read (a corrupt chunk, no manifest) is skipped for the one before, as every
burst restore does; a step asked for by name does not fall back. Real torch DCP, one process,
a local store."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from dcp_job import state, values

from burst.adapters.dcp_storage import BurstStorageReader, BurstStorageWriter
from burst.checkpoint import list_checkpoints, load_manifest
from burst.checkpoint.manifest import chunk_key
from burst.storage import open_store

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _saved(url: str) -> None:
    writer = BurstStorageWriter(url)
    dcp.save(state(1, 1), storage_writer=writer, checkpoint_id="1")
    dcp.save(state(2, 1), storage_writer=writer, checkpoint_id="2")
    writer.close()


def _rot_newest(url: str) -> None:
    """Bit rot in a chunk that only the newest checkpoint (step 2) holds."""
    store = open_store(url)
    first, newest = (load_manifest(store, r) for r in list_checkpoints(store))
    older = {c.digest for c in first.chunks}
    own = [c for c in newest.chunks if c.digest not in older]
    assert own, "step 2 shares every chunk with step 1"
    key = chunk_key(own[0].digest)
    data = bytearray(store.get_bytes(key))
    data[len(data) // 2] ^= 0xFF
    store.put_bytes(key, bytes(data))


def test_a_corrupt_newest_dcp_checkpoint_falls_back_to_the_one_before(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store"
    _saved(url)
    _rot_newest(url)
    loaded = state(0, 1, zero=True)
    reader = BurstStorageReader(url)
    dcp.load(loaded, storage_reader=reader)
    assert loaded["extra"]["step"] == 1
    assert torch.equal(loaded["model"]["w"], values(1)["w"])
    assert reader.manifest is not None and reader.manifest.step == 1


def test_a_corrupt_dcp_checkpoint_asked_for_by_step_is_an_error(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store"
    _saved(url)
    _rot_newest(url)
    # (DCP wraps the reader's error: its one line is in the message)
    with pytest.raises(BaseException, match=r"checkpoint step 2 \(full\): chunk \w+ is corrupt"):
        dcp.load(state(0, 1, zero=True), storage_reader=BurstStorageReader(url, step=2))
