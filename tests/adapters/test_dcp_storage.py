"""burst.adapters.dcp_storage with the real torch.distributed.checkpoint: save and load on one
process and on two gloo ranks (a DTensor sharded over them), on a local store and the loopback
S3 server; a save killed between its shard and the commit is never visible."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from dcp_job import state, values

from burst.adapters.dcp_storage import (
    DCP_KEY,
    BurstStorageReader,
    BurstStorageWriter,
    metadata_from_json,
    newest_dcp_step,
)
from burst.checkpoint import list_checkpoints, load_manifest, restore_checkpoint
from burst.errors import BadInputError, CheckpointError
from burst.storage import ObjectStore, open_store

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
JOB = HERE / "dcp_job.py"
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.e2e)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return f"file://{tmp_path}/store"
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/run-1"


def _load(url: str, step: int | None = None) -> dict:
    loaded = state(0, 1, zero=True)
    dcp.load(loaded, storage_reader=BurstStorageReader(url, step=step))
    return loaded


def test_one_process_save_load_delta_and_ordinary_checkpoint(url: str) -> None:
    writer = BurstStorageWriter(url)
    dcp.save(state(1, 1), storage_writer=writer, checkpoint_id="1")
    first = writer.last_manifest
    dcp.save(state(1, 1), storage_writer=writer, checkpoint_id="2")  # nothing changed
    assert first is not None and writer.last_manifest is not None
    assert first.stats["uploaded_bytes"] > 0
    assert writer.last_manifest.stats["uploaded_bytes"] == 0  # every chunk reused
    dcp.save(state(3, 1), storage_writer=writer, checkpoint_id="3")
    writer.close()

    loaded = _load(url)
    assert loaded["extra"]["step"] == 3
    assert torch.equal(loaded["model"]["w"], values(3)["w"])
    older = _load(url, step=2)
    assert older["extra"]["step"] == 1 and torch.equal(older["model"]["b"], values(1)["b"])

    store = open_store(url)
    assert [r.step for r in list_checkpoints(store)] == [1, 2, 3]
    assert newest_dcp_step(store) == 3
    assert not list(store.list("shards/")) and not list(store.list("pending/"))
    # an ordinary burst checkpoint: burst's own restore reads it (the arrays, verified)
    restored = restore_checkpoint(store)
    assert restored.step == 3 and DCP_KEY in restored.state


def test_metadata_is_json_not_pickle(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    writer = BurstStorageWriter(url, step=5)
    dcp.save(state(5, 1), storage_writer=writer)
    store = open_store(url)
    manifest = load_manifest(store, list_checkpoints(store)[-1])
    doc = json.loads(manifest.tree[DCP_KEY])
    assert doc["format"] == "burst-dcp/1" and "model.w" in doc["state"]
    md = metadata_from_json(manifest.tree[DCP_KEY], "here")
    assert md.state_dict_metadata["model.w"].size == torch.Size([64, 48])
    with pytest.raises(CheckpointError, match="not valid"):
        metadata_from_json('{"format": "burst-dcp/1"}', "here")


def test_bad_input_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BURST_CHECKPOINT_STORE", raising=False)
    with pytest.raises(BadInputError, match="needs a store"):
        BurstStorageWriter()
    writer = BurstStorageWriter(str(tmp_path / "s"))
    with pytest.raises(BaseException, match="needs the step"):  # DCP wraps it
        dcp.save(state(1, 1), storage_writer=writer)
    with pytest.raises(BadInputError, match="checkpoint_id 'latest'"):
        dcp.save(state(1, 1), storage_writer=writer, checkpoint_id="latest")
    with pytest.raises(BaseException, match="no checkpoint written through DCP"):
        _load(str(tmp_path / "s"))


def _job(url: str, result: Path, world: int, env: dict[str, str] | None = None) -> int:
    cmd = [sys.executable]
    if world > 1:
        cmd += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}"]
    cmd += [str(JOB), "--store", url, "--result", str(result)]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(cmd, env=full_env, timeout=240, capture_output=True).returncode


@pytest.mark.slow
def test_killed_between_shard_and_commit_is_never_visible(tmp_path: Path) -> None:
    """The program dies (SIGKILL) after step 2's shard is written, before DCP's finish: step 2
    does not exist, step 1 restores, and a later save of step 2 commits normally."""
    url = str(tmp_path / "store")
    rc = _job(url, tmp_path / "r.json", 1, {"BURST_CHECKPOINT_FAULT": "shard-written:2"})
    assert rc == -9
    store: ObjectStore = open_store(url)
    assert [r.step for r in list_checkpoints(store)] == [1]
    loaded = _load(url)
    assert loaded["extra"]["step"] == 1 and torch.equal(loaded["model"]["w"], values(1)["w"])
    writer = BurstStorageWriter(url)
    dcp.save(state(2, 1), storage_writer=writer, checkpoint_id="2")
    assert _load(url)["extra"]["step"] == 2


@pytest.mark.e2e
@pytest.mark.slow
def test_two_gloo_ranks_save_a_sharded_dtensor_and_load_on_two_and_on_one(
    s3_bucket: str, tmp_path: Path
) -> None:
    """On the S3 store only (what a cluster's ranks write to): the ranks' part is the same on
    any store, and the one-process test above runs the adapter on both stores."""
    url = f"s3://{s3_bucket}/run-1"
    result = tmp_path / "result.json"
    assert _job(url, result, 2) == 0
    doc = json.loads(result.read_text())
    assert doc == {**doc, "world": 2, "step": 2, "w_equal": True, "b_equal": True}
    # saved by two ranks (each wrote its half of the DTensor), loaded by one: plain tensors
    loaded = _load(url)
    assert torch.equal(loaded["model"]["w"], values(2)["w"])
    manifest = load_manifest(open_store(url), list_checkpoints(open_store(url))[-1])
    assert manifest.tree["sharded"]["world"] == 2
