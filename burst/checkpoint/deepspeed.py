"""Checkpoint a DeepSpeed engine (ZeRO stages 1-3) through the same chunked, atomic upload.

Every rank is treated as if it ran on its own node (no shared filesystem):

* **save** (every rank): ``engine.save_checkpoint`` writes this rank's files into this rank's
  OWN local directory (rank 0 also the files DeepSpeed writes once, such as ZeRO-1/2's
  ``mp_rank_00_model_states.pt``); the rank hands its files' bytes to its own
  ``CheckpointManager``, which stages them into its host buffer and returns; its background
  worker uploads them. With several ranks the manager is sharded
  (``burst.checkpoint.sharded``): each rank's worker writes a shard manifest, rank 0's worker
  writes the one global manifest once every shard is durable (the two-phase commit of the
  torch path). ``save_checkpoint`` itself is synchronous (local disk); the upload is not.
* **restore** (collective, one step): each rank reads the global manifest and fetches, verified
  (blake3), only the files ``engine.load_checkpoint`` opens on that rank: the files named for
  its own rank (``zero_pp_rank_<r>_...``) and the files DeepSpeed writes once
  (``mp_rank_00_model_states.pt``). The ranks agree that every rank got its files before any
  of them calls ``load_checkpoint`` (which is collective), so a missing or corrupt chunk on
  one rank makes all of them fall back together. That is the read plan ``DeepSpeedRead`` of
  the one restore loop (``burst.checkpoint.read_plan.restore_newest``).
* **another world size** (ZeRO-3): every rank fetches every file, converts them locally with
  DeepSpeed's own ``ds_to_universal`` into a *universal checkpoint* (one file per parameter
  and optimizer moment, independent of the partitioning) and loads it with DeepSpeed's
  ``load_universal`` path, which re-partitions for the new world. No step for the user.

The checkpoint is tier "full". A legacy checkpoint (one state with every rank's files, as
rank 0 uploaded them before) restores through the same selection.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from burst.checkpoint.catalog import list_checkpoints, load_manifest
from burst.checkpoint.manager import CheckpointManager
from burst.checkpoint.manifest import CheckpointRef, Manifest
from burst.checkpoint.read_plan import Exchange, restore_newest
from burst.checkpoint.restore import fetch_arrays
from burst.checkpoint.verify import ChunkAudit
from burst.errors import CheckpointError
from burst.storage.base import StoreError

log = logging.getLogger(__name__)
TAG_PREFIX = "step"
#: DeepSpeed's per-rank file names: ``[bf16_]zero_pp_rank_<r>_mp_rank_<m>_{model,optim}_states.pt``
RANK_FILE = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_")
#: where a world-size change is converted (under the rank's local directory)
SAVED_DIR = "saved"
UNIVERSAL_DIR = "universal"


def _dist() -> Any:
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def _rank_world() -> tuple[int, int]:
    dist = _dist()
    return (int(dist.get_rank()), int(dist.get_world_size())) if dist else (0, 1)


def _all_ok(flag: bool) -> bool:
    """True on every rank iff ``flag`` is True on every rank."""
    dist = _dist()
    if not dist:
        return flag
    import torch

    t = torch.tensor([1 if flag else 0], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def file_owner(name: str) -> int | None:
    """The data-parallel rank a DeepSpeed checkpoint file belongs to; None for the files
    DeepSpeed writes once for all ranks."""
    m = RANK_FILE.match(Path(name).name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class SavedFile:
    shard: int  # the rank (shard) that uploaded it
    name: str  # path relative to the tag directory
    index: int  # its array in the global manifest


@dataclass(frozen=True)
class SavedLayout:
    world: int  # the world size that saved it
    tag: str
    files: list[SavedFile]


def saved_layout(manifest: Manifest) -> SavedLayout:
    """What a DeepSpeed checkpoint's manifest holds, whoever (how many ranks) saved it."""
    where = manifest.key
    tree = manifest.tree
    try:
        if isinstance(tree, dict) and set(tree) == {"sharded"}:
            world = int(tree["sharded"]["world"])
            parts = [(r, t["deepspeed"]) for r, t in enumerate(tree["sharded"]["shards"])]
        else:
            parts = [(0, tree["deepspeed"])]
            world = 0  # legacy: rank 0 uploaded every rank's files; counted below
        files = [
            SavedFile(shard, str(name), int(ref["__ndarray__"]))
            for shard, ds in parts
            for name, ref in sorted(ds["files"].items())
        ]
        tag = str(parts[0][1]["tag"])
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CheckpointError(f"not a DeepSpeed checkpoint ({exc!r})", where=where) from None
    if not files:
        raise CheckpointError("DeepSpeed checkpoint holds no files", where=where)
    if world == 0:
        owners = [o for o in (file_owner(f.name) for f in files) if o is not None]
        world = max(owners) + 1 if owners else 1
    for f in files:
        path = Path(f.name)
        if path.is_absolute() or ".." in path.parts or not f.name:
            raise CheckpointError(f"file name {f.name!r} escapes the checkpoint", where=where)
    return SavedLayout(world, tag, files)


def needed(layout: SavedLayout, rank: int, world: int, *, every: bool = False) -> list[SavedFile]:
    """The files ``engine.load_checkpoint`` opens on ``rank``: at the same world size, its own
    files and the ones written once; on another world size (or ``every``), all of them."""
    if every or layout.world != world:
        return list(layout.files)
    return [f for f in layout.files if file_owner(f.name) in (None, rank)]


def fetch_files(
    store: Any, manifest: Manifest, files: list[SavedFile], *, concurrency: int = 8
) -> dict[str, np.ndarray]:
    """The bytes of ``files`` only: the chunks that hold them, fetched and verified."""
    entries = [manifest.arrays[f.index] for f in files]
    spans = sorted((e.offset, e.offset + e.nbytes) for e in entries)
    chunks = [
        c
        for c in manifest.chunks
        if any(lo < c.offset + c.size and c.offset < hi for lo, hi in spans)
    ]
    part = Manifest(
        step=manifest.step,
        tier=manifest.tier,
        created_at=manifest.created_at,
        chunk_size=manifest.chunk_size,
        total_bytes=manifest.total_bytes,
        arrays=entries,
        chunks=chunks,
        tree=None,
        stats={},
    )
    try:
        arrays = fetch_arrays(store, part, concurrency=concurrency, audit=ChunkAudit())
    except StoreError as exc:
        raise CheckpointError(
            f"checkpoint step {manifest.step}: {exc.one_line()}",
            where=f"{store.url}/{manifest.key}",
        ) from exc
    return {f.name: np.asarray(a) for f, a in zip(files, arrays, strict=True)}


def write_files(tag_dir: Path, files: dict[str, np.ndarray]) -> None:
    shutil.rmtree(tag_dir, ignore_errors=True)
    root = tag_dir.resolve()
    for rel, data in files.items():
        path = (tag_dir / rel).resolve()
        if root not in path.parents:
            raise CheckpointError(f"file name {rel!r} escapes the checkpoint", where=str(tag_dir))
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(data.tobytes() if not data.flags.c_contiguous else data.data)


def to_universal(saved_tag_dir: Path, universal_tag_dir: Path) -> None:
    """DeepSpeed's own conversion (``deepspeed.checkpoint.ds_to_universal``), in process, one
    worker, its prints kept out of the step's output (logged at debug)."""
    from deepspeed.checkpoint import ds_to_universal

    shutil.rmtree(universal_tag_dir, ignore_errors=True)
    args = argparse.Namespace(
        input_folder=str(saved_tag_dir),
        output_folder=str(universal_tag_dir),
        num_extract_workers=1,
        num_merge_workers=1,
        keep_temp_folder=False,
        strict=True,
        inject_missing_state=False,
    )
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            ds_to_universal.main(args)
    except Exception as exc:  # DeepSpeed's own errors: one line, the checkpoint is unusable
        raise CheckpointError(
            f"DeepSpeed's universal conversion failed: {type(exc).__name__}: {exc}",
            where=str(saved_tag_dir),
        ) from None
    finally:
        log.debug("ds_to_universal: %s", out.getvalue()[-2000:])


def _exchange() -> Exchange:
    """This process group's collectives for the one restore loop (one rank: local)."""
    rank, world = _rank_world()

    def broadcast(tensor: Any, src: int) -> None:
        dist = _dist()
        if dist:
            dist.broadcast(tensor, src=src)

    def decide(choose: Any) -> Any:
        dist = _dist()
        box = [choose() if rank == 0 else None]
        if dist:
            dist.broadcast_object_list(box, src=0)
        return box[0]

    return Exchange(rank, world, broadcast, _all_ok, decide)


@contextlib.contextmanager
def _universal_load(engine: Any) -> Iterator[None]:
    """DeepSpeed reads ``checkpoint.load_universal`` from its config at load time only: set for
    this one load, then back (the next saves are ordinary ZeRO checkpoints)."""
    config = engine._config
    before = config.load_universal_checkpoint
    config.load_universal_checkpoint = True
    try:
        yield
    finally:
        config.load_universal_checkpoint = before


class DeepSpeedCheckpointer:
    def __init__(self, engine: Any, manager: CheckpointManager, local_dir: str | Path) -> None:
        """``local_dir``: THIS rank's own directory (never shared with another rank)."""
        self.engine = engine
        self.manager = manager
        self.local_dir = Path(local_dir)
        self.rank, self.world = _rank_world()
        #: what the last restore did, for the logs and tests: files fetched, universal or not
        self.last_restore: dict[str, Any] = {}

    @staticmethod
    def tag(step: int) -> str:
        return f"{TAG_PREFIX}{step:012d}"

    def save(self, step: int, client_state: dict[str, Any] | None = None) -> int:
        """Every rank: write this rank's files, hand them to this rank's manager (staged, then
        uploaded in the background). Returns the bytes of this rank's files."""
        if self.world > 1 and self.manager.shard is None:
            raise CheckpointError(
                "a DeepSpeed checkpoint of several ranks needs a sharded CheckpointManager "
                "(each rank uploads its own files)",
                where=self.manager.store.url,
            )
        tag = self.tag(step)
        self.local_dir.mkdir(parents=True, exist_ok=True)
        self.engine.save_checkpoint(
            str(self.local_dir), tag=tag, client_state=client_state or {}, save_latest=False
        )
        tag_dir = self.local_dir / tag
        files = {
            p.relative_to(tag_dir).as_posix(): np.fromfile(p, dtype=np.uint8)
            for p in sorted(tag_dir.rglob("*"))
            if p.is_file()
        }
        if not files:
            raise CheckpointError(f"DeepSpeed wrote no files for tag {tag}", where=str(tag_dir))
        state = {
            "deepspeed": {"tag": tag, "rank": self.rank, "world": self.world, "files": files},
            "step": step,
        }
        self.manager.save(step, state, tier="full")
        for old in self.local_dir.glob(f"{TAG_PREFIX}*"):
            if old.is_dir() and old.name != tag:
                shutil.rmtree(old, ignore_errors=True)
        return sum(int(a.nbytes) for a in files.values())

    def _prepare(self, ref: CheckpointRef) -> tuple[Path, str, bool]:
        """This rank's part of a restore (no collective): fetch what it needs, convert if the
        world size changed. Returns (directory to load from, tag, universal)."""
        step = ref.step
        manifest = load_manifest(self.manager.store, ref)
        layout = saved_layout(manifest)
        every = bool(getattr(self.engine, "zero_elastic_checkpoint", lambda: False)())
        files = needed(layout, self.rank, self.world, every=every)
        universal = layout.world != self.world
        if universal and self.engine.zero_optimization_stage() != 3:
            raise CheckpointError(
                f"DeepSpeed checkpoint at step {step} was saved by {layout.world} rank(s), this "
                f"attempt has {self.world}: a change of world size is supported for ZeRO-3 "
                f"(this run is ZeRO-{self.engine.zero_optimization_stage()})",
                where=self.manager.store.url,
            )
        data = fetch_files(
            self.manager.store, manifest, files, concurrency=self.manager.concurrency
        )
        self.last_restore = {
            "step": step,
            "saved_world": layout.world,
            "files": sorted(data),
            "bytes": sum(int(a.nbytes) for a in data.values()),
            "universal": universal,
        }
        if not universal:
            write_files(self.local_dir / layout.tag, data)
            return self.local_dir, layout.tag, False
        saved = self.local_dir / SAVED_DIR / layout.tag
        write_files(saved, data)
        del data
        to_universal(saved, self.local_dir / UNIVERSAL_DIR / layout.tag)
        shutil.rmtree(self.local_dir / SAVED_DIR, ignore_errors=True)
        log.info(
            "DeepSpeed checkpoint of step %d saved by %d rank(s) converted to a universal "
            "checkpoint for %d rank(s)",
            step,
            layout.world,
            self.world,
        )
        return self.local_dir / UNIVERSAL_DIR, layout.tag, True

    def plan(
        self, guard: Callable[[str, Callable[[], Any]], Any] | None = None, **load_kwargs: Any
    ) -> DeepSpeedRead:
        """The read plan of this rank's restore (``burst.checkpoint.read_plan``); ``guard``
        runs each part (the train engine's: a peer's death is ``RankLost``)."""
        return DeepSpeedRead(self, guard, load_kwargs)

    def restore(self, step: int | None = None, **load_kwargs: Any) -> tuple[int, dict[str, Any]]:
        """Collective, every rank: load checkpoint ``step`` (None: the newest full one, as rank
        0 lists them). Returns (step, client_state). If any rank cannot fetch its files, every
        rank raises (none has loaded anything)."""
        ex = _exchange()
        refs: list[CheckpointRef] = []
        if ex.rank == 0:
            refs = list_checkpoints(self.manager.store, "full")
            refs = refs[-1:] if step is None else [r for r in refs if r.step == step][-1:]
        where = self.manager.store.url
        out = restore_newest(refs, self.plan(**load_kwargs), where=where, ex=ex, fallback=False)
        if out is None:
            at = "" if step is None else f" at step {step}"
            raise CheckpointError(f"no committed full checkpoint{at}", where=where)
        return out


@dataclass
class DeepSpeedRead:
    """The read plan of a DeepSpeed restore: each rank fetches, verified, the files
    ``engine.load_checkpoint`` opens on it (``needed``), converted to a universal checkpoint
    if the world size changed; once every rank has its files, DeepSpeed loads them
    (collective). The result: (step, client_state)."""

    ckpt: DeepSpeedCheckpointer
    guard: Callable[[str, Callable[[], Any]], Any] | None = None
    load_kwargs: dict[str, Any] = field(default_factory=dict)

    def _run(self, what: str, fn: Callable[[], Any]) -> Any:
        return fn() if self.guard is None else self.guard(what, fn)

    def read(self, ref: CheckpointRef) -> tuple[Path, str, bool]:
        def prepare() -> tuple[Path, str, bool]:
            try:
                return self.ckpt._prepare(ref)
            except OSError as exc:  # the rank's local disk: full, unwritable
                raise CheckpointError(
                    f"DeepSpeed checkpoint at step {ref.step}: {exc}",
                    where=str(self.ckpt.local_dir),
                ) from None

        got: tuple[Path, str, bool] = self._run(f"restore of step {ref.step}", prepare)
        return got

    def finish(self, ref: CheckpointRef, got: tuple[Path, str, bool]) -> tuple[int, dict[str, Any]]:
        load_dir, tag, universal = got
        engine = self.ckpt.engine
        loading = _universal_load(engine) if universal else contextlib.nullcontext()
        with loading:
            path, client_state = self._run(
                f"restore of step {ref.step}",
                lambda: engine.load_checkpoint(str(load_dir), tag=tag, **self.load_kwargs),
            )
        if universal:
            shutil.rmtree(load_dir, ignore_errors=True)
        if path is None:
            raise CheckpointError(f"DeepSpeed could not load tag {tag}", where=str(load_dir))
        return ref.step, dict(client_state or {})
