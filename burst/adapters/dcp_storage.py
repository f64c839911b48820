"""torch.distributed.checkpoint (DCP) straight into burst's store: no local copy.

    import torch.distributed.checkpoint as dcp
    from burst.adapters.dcp_storage import BurstStorageReader, BurstStorageWriter

    writer = BurstStorageWriter("s3://bucket/runs/run-1")      # keep it: the next save is a delta
    dcp.save(state, storage_writer=writer, checkpoint_id="100")  # the step
    dcp.load(state, storage_reader=BurstStorageReader("s3://bucket/runs/run-1"))  # the newest

Every rank lays the items DCP gives it (tensors, or the local shards of DTensors, and the
pickled non-tensor objects DCP writes as bytes) into a reused host buffer and writes them as
its *shard* of a sharded burst checkpoint (``burst.checkpoint.sharded``, phase 1): burst's
chunking (content-addressed chunks, only the changed ones travel), ``pending/`` record and
verification. DCP's coordinator then commits phase 2 in ``finish``: ONE global manifest whose
tree also holds DCP's metadata, as JSON (never pickle: reading a checkpoint runs no code from
the store). Until that manifest exists nothing is visible; a rank killed at any moment leaves
only unreferenced chunks and shard manifests, which retention and GC remove. Listing, retention,
replication and ``burst`` itself see an ordinary checkpoint.

The store: a URL (``open_store``), an ``ObjectStore``, or ``BURST_CHECKPOINT_STORE`` from the
environment. The step: ``checkpoint_id`` of ``dcp.save`` (digits), or ``step=`` / ``.step``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np

try:
    import torch
    from torch.distributed._shard._utils import narrow_tensor_by_index
    from torch.distributed.checkpoint.metadata import (
        BytesStorageMetadata,
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        StorageMeta,
        TensorProperties,
        TensorStorageMetadata,
    )
    from torch.distributed.checkpoint.planner import (
        LoadItemType,
        LoadPlan,
        LoadPlanner,
        ReadItem,
        SavePlan,
        SavePlanner,
        WriteItemType,
    )
    from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
    from torch.futures import Future
except ImportError as exc:  # pragma: no cover - torch is there wherever training runs
    raise ImportError(
        f"burst.adapters.dcp_storage needs torch with torch.distributed.checkpoint ({exc})"
    ) from None

from burst.checkpoint.catalog import list_checkpoints, load_manifest
from burst.checkpoint.layout import DEFAULT_CHUNK_SIZE, SpanIndex, build_layout
from burst.checkpoint.manifest import CheckpointRef, ChunkRef, Manifest
from burst.checkpoint.read_plan import Exchange, process_group, restore_newest
from burst.checkpoint.restore import _allocate, fetch_chunks
from burst.checkpoint.sharded import ShardInfo, commit_global
from burst.checkpoint.split_restore import cut
from burst.checkpoint.staging import HostBuffer
from burst.checkpoint.tree import flatten, unflatten
from burst.checkpoint.writer import CheckpointWriter
from burst.errors import BadInputError, CheckpointError
from burst.program.contract import STORED_FILE, report_path, write_report
from burst.settings import Settings
from burst.storage import open_store
from burst.storage.base import ObjectStore

log = logging.getLogger(__name__)

#: where the adapters find burst's store when none is passed (a URL for ``open_store``)
STORE_ENV = "BURST_CHECKPOINT_STORE"
#: the tree key of the global manifest that holds DCP's metadata
DCP_KEY = "dcp"
DCP_FORMAT = "burst-dcp/1"


def _open(store: ObjectStore | str | None) -> ObjectStore:
    if isinstance(store, ObjectStore):
        return store
    url = store or Settings.from_env().program_checkpoint_store
    if not url:
        raise BadInputError(
            f"the DCP adapter needs a store: pass a URL or an ObjectStore, or set {STORE_ENV}"
        )
    return open_store(url)


def _step_of(checkpoint_id: Any) -> int:
    text = os.fspath(checkpoint_id) if isinstance(checkpoint_id, os.PathLike) else checkpoint_id
    text = str(text).rsplit("/", 1)[-1].removeprefix("step-").removeprefix("checkpoint-")
    if not text.isdigit():
        raise BadInputError(
            f"checkpoint_id {checkpoint_id!r}: the DCP adapter takes the step (digits, or "
            "step-N) as the checkpoint id"
        )
    return int(text)


@dataclass(frozen=True)
class _Plan:
    """What the coordinator tells each rank in its plan's ``storage_data``."""

    session: str
    rank: int
    world: int


# -- DCP metadata <-> JSON ------------------------------------------------------------------


def _index_json(index: MetadataIndex) -> list[Any]:
    offset = None if index.offset is None else list(index.offset)
    return [index.fqn, offset, index.index]


def _index_from(doc: list[Any]) -> MetadataIndex:
    fqn, offset, idx = doc
    return MetadataIndex(
        str(fqn), None if offset is None else torch.Size(offset), None if idx is None else idx
    )


def _plain(value: Any, what: str) -> Any:
    skeleton, arrays = flatten(value)
    if arrays:
        raise CheckpointError(f"DCP {what} holds tensors; the DCP adapter cannot store it")
    return skeleton


def metadata_to_json(metadata: Metadata) -> str:
    """DCP's Metadata as JSON (the deprecated layout/memory_format/pin_memory fields keep
    their defaults, as DCP itself creates them)."""
    state: dict[str, Any] = {}
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, BytesStorageMetadata):
            state[fqn] = {"bytes": True}
            continue
        state[fqn] = {
            "dtype": str(md.properties.dtype).removeprefix("torch."),
            "requires_grad": bool(md.properties.requires_grad),
            "size": list(md.size),
            "chunks": [[list(c.offsets), list(c.sizes)] for c in md.chunks],
        }
    storage = [
        [*_index_json(idx), list(where)] for idx, where in (metadata.storage_data or {}).items()
    ]
    meta = metadata.storage_meta
    doc = {
        "format": DCP_FORMAT,
        "state": state,
        "planner_data": _plain(metadata.planner_data, "planner data"),
        "storage": storage,
        "storage_meta": None
        if meta is None
        else {
            "checkpoint_id": None if meta.checkpoint_id is None else os.fspath(meta.checkpoint_id),
            "save_id": meta.save_id,
            "modules": list(meta.modules),
        },
        "version": metadata.version,
    }
    return json.dumps(doc, separators=(",", ":"))


def metadata_from_json(text: str, where: str) -> Metadata:
    try:
        doc = json.loads(text)
        if doc["format"] != DCP_FORMAT:
            raise CheckpointError(f"unknown DCP metadata format {doc['format']!r}", where=where)
        state: dict[str, Any] = {}
        for fqn, md in doc["state"].items():
            if md.get("bytes"):
                state[fqn] = BytesStorageMetadata()
                continue
            dtype = getattr(torch, md["dtype"], None)
            if not isinstance(dtype, torch.dtype):
                raise CheckpointError(f"unknown dtype {md['dtype']!r} of {fqn}", where=where)
            state[fqn] = TensorStorageMetadata(
                properties=TensorProperties(dtype=dtype, requires_grad=bool(md["requires_grad"])),
                size=torch.Size(md["size"]),
                chunks=[
                    ChunkStorageMetadata(offsets=torch.Size(o), sizes=torch.Size(s))
                    for o, s in md["chunks"]
                ],
            )
        storage = {_index_from(e[:3]): (int(e[3][0]), int(e[3][1])) for e in doc["storage"]}
        sm = doc.get("storage_meta")
        return Metadata(
            state_dict_metadata=state,
            planner_data=unflatten(doc["planner_data"], []),
            storage_data=storage,
            storage_meta=None
            if sm is None
            else StorageMeta(
                checkpoint_id=sm["checkpoint_id"],
                save_id=sm["save_id"],
                modules=list(sm["modules"]),
            ),
            version=doc.get("version"),
        )
    except CheckpointError:
        raise
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise CheckpointError(
            f"DCP metadata in the manifest is not valid: {exc}", where=where
        ) from None


# -- the writer ------------------------------------------------------------------------------


def _tell_burst(store: ObjectStore, step: int) -> None:
    """Under burst: say what was committed straight into a store (``STORED_FILE``), so that
    the run is not taken for one that saved nothing."""
    path = report_path(STORED_FILE)
    if path is None:
        return
    try:
        write_report(path, {"step": int(step), "store": store.url})
    except OSError as exc:  # telling burst must never cost the save
        log.warning("could not tell burst of the DCP commit: %s", exc)


class BurstStorageWriter(StorageWriter):
    """A DCP ``StorageWriter`` that commits to burst's store (see the module's docstring).

    Keep one per process and pass it to every ``dcp.save``: its host buffer and what its
    checkpoint writer knows (the previous save's hashes, the chunks the store holds) are reused,
    so an unchanged chunk is neither hashed twice nor uploaded again."""

    def __init__(
        self,
        store: ObjectStore | str | None = None,
        *,
        step: int | None = None,
        tier: str = "full",
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        concurrency: int = 8,
        commit_timeout_s: float = 300.0,
    ) -> None:
        super().__init__()
        self.store = _open(store)
        self.step = step
        self.tier = tier
        self.chunk_size = chunk_size
        self.commit_timeout_s = commit_timeout_s
        self.is_coordinator = False
        self.last_manifest: Manifest | None = None  # the global manifest of the last commit
        self._writer = CheckpointWriter(self.store, concurrency=concurrency)
        self._buffer: HostBuffer | None = None
        self._own: Manifest | None = None
        self._plan: _Plan | None = None

    # DCP's sequence: reset, set_up_storage_writer, prepare_local_plan, prepare_global_plan
    # (coordinator), write_data (every rank), finish (coordinator).
    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None and str(checkpoint_id) != "":
            self.step = _step_of(checkpoint_id)
        self._own = None
        self._plan = None

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        if self.step is None:
            raise BadInputError(
                "the DCP adapter needs the step: dcp.save(..., checkpoint_id='<step>') or "
                "BurstStorageWriter(store, step=N)"
            )
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        session = secrets.token_hex(8)  # ties the shards of this one save together
        return [
            dataclasses.replace(p, storage_data=_Plan(session, rank, len(plans)))
            for rank, p in enumerate(plans)
        ]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        info = plan.storage_data
        if not isinstance(info, _Plan) or self.step is None:
            raise CheckpointError("DCP plan carries no burst session (prepare_global_plan)")
        self._plan = info
        arrays: list[Any] = []
        for item in plan.items:
            data = planner.resolve_data(item)
            if item.type == WriteItemType.BYTE_IO:
                raw = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
                arrays.append(np.frombuffer(raw, dtype=np.uint8))
            else:
                assert isinstance(data, torch.Tensor)
                tensor = data.detach()
                arrays.append(tensor if tensor.is_contiguous() else tensor.contiguous())
        entries, size = build_layout(arrays, self.chunk_size)
        if self._buffer is None or self._buffer.size < size:
            if self._buffer is not None:
                self._buffer.close()
            self._buffer = HostBuffer(size)
        self._buffer.copy_in(arrays, entries)
        skeleton, _ = flatten(arrays)  # [{"__tensor__": i} | {"__ndarray__": i}, ...]
        shard = ShardInfo(
            info.rank,
            info.world,
            info.session,
            commit_timeout_s=self.commit_timeout_s,
            global_commit=False,  # finish() commits, with DCP's metadata
        )
        self._own = self._writer.write(
            memoryview(self._buffer.array)[:size],  # type: ignore[arg-type]
            entries,
            skeleton,
            step=self.step,
            tier=self.tier,
            chunk_size=self.chunk_size,
            shard=shard,
        )
        results = [
            WriteResult(index=item.index, size_in_bytes=e.nbytes, storage_data=(info.rank, i))
            for i, (item, e) in enumerate(zip(plan.items, entries, strict=True))
        ]
        fut: Future[list[WriteResult]] = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """The coordinator's commit: every shard is durable (each rank's write_data returned
        after writing its shard manifest); one global manifest with DCP's metadata."""
        if self._own is None or self._plan is None:
            raise CheckpointError("DCP finish() before this rank's write_data()")
        metadata.storage_data = {wr.index: wr.storage_data for rs in results for wr in rs}
        shard = ShardInfo(
            0, self._plan.world, self._plan.session, commit_timeout_s=self.commit_timeout_s
        )
        self.last_manifest = commit_global(
            self.store, self._own, shard, extra={DCP_KEY: metadata_to_json(metadata)}
        )
        _tell_burst(self.store, self.last_manifest.step)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        try:
            _step_of(checkpoint_id)
        except BadInputError:
            return False
        return True

    def storage_meta(self) -> StorageMeta | None:
        return StorageMeta(checkpoint_id=None if self.step is None else str(self.step))

    def close(self) -> None:
        self._writer.close()
        if self._buffer is not None:
            self._buffer.close()
            self._buffer = None


# -- the reader ------------------------------------------------------------------------------


def newest_dcp_step(store: ObjectStore, tier: str | None = None) -> int | None:
    """The step of the newest committed checkpoint written through the DCP adapter."""
    for ref in reversed(list_checkpoints(store, tier)):
        if DCP_KEY in (load_manifest(store, ref).tree or {}):
            return ref.step
    return None


@dataclass
class _Fetched:
    """What this rank read of a DCP checkpoint: its manifest, the arrays its chunks filled
    (verified) and the offsets of those chunks."""

    manifest: Manifest
    outs: list[Any]
    raws: list[Any]
    offsets: set[int]

    def fetch(self, store: ObjectStore, chunks: list[ChunkRef], concurrency: int) -> None:
        """Fetch and verify the ``chunks`` not fetched yet, into the arrays they fill."""
        todo = [c for c in chunks if c.offset not in self.offsets]
        if not todo:
            return
        index = SpanIndex(self.manifest.arrays)
        for i in {s[0] for c in todo for s in index.segments(c.span)}:
            if self.outs[i] is None:
                self.outs[i], self.raws[i] = _allocate(self.manifest.arrays[i], None)
        fetch_chunks(store, self.manifest, todo, self.raws, concurrency=concurrency)
        self.offsets.update(c.offset for c in todo)


@dataclass
class DcpRead:
    """The DCP reader's read plan for the one restore loop
    (``burst.checkpoint.read_plan.restore_newest``): a candidate reads when it was written
    through DCP and this rank's part of its chunks verifies: every chunk on one rank (kept:
    DCP's ``read_data`` then reads nothing again), the r-th W-th of them on rank r of W
    (``burst.checkpoint.split_restore.cut``; the ranks agree on each candidate)."""

    store: ObjectStore
    ex: Exchange
    concurrency: int = 8

    def read(self, ref: CheckpointRef) -> _Fetched:
        manifest = load_manifest(self.store, ref)
        if DCP_KEY not in (manifest.tree or {}):
            raise CheckpointError(
                f"checkpoint step {ref.step} ({ref.tier}) was not written through DCP",
                where=f"{self.store.url}/{ref.key}",
            )
        n = len(manifest.arrays)
        got = _Fetched(manifest, [None] * n, [np.empty(0, dtype=np.uint8)] * n, set())
        got.fetch(self.store, cut(manifest.chunks, self.ex.world)[self.ex.rank], self.concurrency)
        return got

    def finish(self, ref: CheckpointRef, got: _Fetched) -> _Fetched:
        return got


class BurstStorageReader(StorageReader):
    """A DCP ``StorageReader`` over a checkpoint the writer committed: ``step`` (or
    ``checkpoint_id`` of ``dcp.load``), else the newest that reads. The checkpoint is chosen
    by the one restore loop (``DcpRead``): a newest one that does not read (a corrupt or
    missing chunk) is skipped for the one before, every rank together; a ``step`` asked for
    does not fall back. Each rank fetches only the chunks of the items its plan reads,
    verified like every burst restore."""

    def __init__(
        self,
        store: ObjectStore | str | None = None,
        *,
        step: int | None = None,
        tier: str | None = None,
        concurrency: int = 8,
    ) -> None:
        super().__init__()
        self.store = _open(store)
        self.step = step
        self.tier = tier
        self.concurrency = concurrency
        self.manifest: Manifest | None = None
        self._fetched: _Fetched | None = None
        self._storage: dict[MetadataIndex, tuple[int, int]] = {}

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None and str(checkpoint_id) != "":
            self.step = _step_of(checkpoint_id)
        self.manifest = None
        self._fetched = None

    def _chosen(self) -> _Fetched:
        if self._fetched is not None:
            return self._fetched
        refs = list_checkpoints(self.store, self.tier)
        if self.step is not None:
            refs = [r for r in refs if r.step == self.step][-1:]
        ex = process_group()
        got = restore_newest(
            refs,
            DcpRead(self.store, ex, self.concurrency),
            where=self.store.url,
            ex=ex if ex.world > 1 else None,
            fallback=self.step is None,
        )
        if got is None:
            which = f"at step {self.step}" if self.step is not None else "at all"
            raise CheckpointError(
                f"no checkpoint written through DCP {which}", where=self.store.url
            )
        self._fetched, self.manifest = got, got.manifest
        return got

    def _manifest(self) -> Manifest:
        return self._chosen().manifest

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        manifest = self._manifest()
        return metadata_from_json(manifest.tree[DCP_KEY], f"{self.store.url}/{manifest.key}")

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        self._storage = dict(metadata.storage_data or {})

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def _array_index(self, manifest: Manifest, item: ReadItem) -> int:
        try:
            rank, local = self._storage[item.storage_index]
            ref = manifest.tree["sharded"]["shards"][rank][local]
            return int(ref.get("__tensor__", ref.get("__ndarray__")))
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise CheckpointError(
                f"DCP item {item.storage_index.fqn} has no array in the checkpoint",
                where=f"{self.store.url}/{manifest.key}",
            ) from exc

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        fetched = self._chosen()
        manifest = fetched.manifest
        wanted = {self._array_index(manifest, item) for item in plan.items}
        index = SpanIndex(manifest.arrays)
        chunks = [c for c in manifest.chunks if any(s[0] in wanted for s in index.segments(c.span))]
        fetched.fetch(self.store, chunks, self.concurrency)  # (what the choice did not read)
        outs = fetched.outs
        for item in plan.items:
            value = outs[self._array_index(manifest, item)]
            if item.type == LoadItemType.BYTE_IO:
                planner.load_bytes(item, io.BytesIO(np.asarray(value).tobytes()))
                continue
            tensor = narrow_tensor_by_index(value, item.storage_offsets, item.lengths)
            target = planner.resolve_tensor(item).detach()
            if target.size() != tensor.size():
                raise CheckpointError(
                    f"DCP item {item.storage_index.fqn}: checkpoint holds {tuple(tensor.size())},"
                    f" the state wants {tuple(target.size())}",
                    where=f"{self.store.url}/{manifest.key}",
                )
            target.copy_(tensor)
            planner.commit_tensor(item, target)
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return BurstStorageWriter.validate_checkpoint_id(checkpoint_id)
