"""A sharded (DTensor) state tree as each rank's own part, and the parts joined back.

FSDP2 (``torch.distributed.fsdp.fully_shard``) keeps each parameter, and the optimizer state
of each parameter, as a DTensor: every rank holds only its local shard. ``local_parts``
replaces each DTensor of a state tree by ``{"dtensor": {"local": <this rank's shard>,
"shape": <global shape>, "placement": "shard:<dim>" | "replicate"}}``, so a rank's checkpoint
part is an ordinary state tree (``burst.checkpoint.tree``) holding only its own bytes.

``join`` rebuilds the whole (global) tensors from the parts of all W ranks that saved them:
a ``Shard(d)`` DTensor on a 1-D mesh is cut as ``torch.chunk`` cuts (contiguous, in rank
order, the last ranks' pieces possibly empty), so the pieces laid end to end along ``d`` are
the global tensor. ``reshard`` cuts global tensors again for the reader's mesh, locally
(``distribute_tensor(..., src_data_rank=None)``: no communication): any world size reads any
checkpoint. Other layouts (2-D meshes, ``Partial``) are refused with one line.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

from burst.errors import CheckpointError

log = logging.getLogger(__name__)

KEY = "dtensor"
#: the key of an FSDP2 rank's part in a checkpoint (``burst.train.fsdp_engine``)
PART = "fsdp2"


def _placement(t: DTensor, path: str) -> str:
    if t.device_mesh.ndim != 1 or len(t.placements) != 1:
        raise CheckpointError(
            f"state {path}: a DTensor on a {t.device_mesh.ndim}-D mesh; only 1-D meshes "
            "(fully_shard's default) are supported"
        )
    (p,) = t.placements
    if isinstance(p, Shard):
        return f"shard:{p.dim}"
    if isinstance(p, Replicate):
        return "replicate"
    raise CheckpointError(f"state {path}: DTensor placement {p} is not supported")


def is_part(obj: Any) -> bool:
    return isinstance(obj, dict) and set(obj) == {KEY}


def local_parts(state: Any, path: str = "state") -> Any:
    """``state`` with every DTensor replaced by this rank's shard and its layout."""
    if isinstance(state, DTensor):
        return {
            KEY: {
                "local": state.to_local().detach(),
                "shape": list(state.shape),
                "placement": _placement(state, path),
            }
        }
    if isinstance(state, dict):
        return {k: local_parts(v, f"{path}.{k}") for k, v in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(local_parts(v, f"{path}[{i}]") for i, v in enumerate(state))
    return state


def local_nbytes(state: Any) -> int:
    """Bytes of this rank's part of ``state`` (DTensors count their local shard only)."""
    if isinstance(state, DTensor):
        local = state.to_local()
        return local.numel() * local.element_size()
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(local_nbytes(v) for v in state.values())
    if isinstance(state, list | tuple):
        return sum(local_nbytes(v) for v in state)
    return 0


def _whole(parts: list[dict[str, Any]], path: str) -> torch.Tensor:
    first = parts[0]
    shape = [int(n) for n in first["shape"]]
    placement = str(first["placement"])
    if any([int(n) for n in p["shape"]] != shape or p["placement"] != placement for p in parts):
        raise CheckpointError(f"checkpoint {path}: the ranks' parts disagree on its layout")
    pieces = [p["local"] for p in parts]
    if placement == "replicate":
        whole = pieces[0]
    elif placement.startswith("shard:"):
        whole = torch.cat(pieces, dim=int(placement[6:]))
    else:
        raise CheckpointError(f"checkpoint {path}: unknown placement {placement!r}")
    if list(whole.shape) != shape:
        raise CheckpointError(
            f"checkpoint {path}: the ranks' parts make a tensor of shape {list(whole.shape)}, "
            f"not {shape}"
        )
    return whole


def join(parts: list[Any], path: str = "state") -> Any:
    """The global state from the parts of every rank (in rank order), as ``local_parts``
    made them; what is not a DTensor part is taken from rank 0's."""
    first = parts[0]
    if is_part(first):
        if not all(is_part(p) for p in parts):
            raise CheckpointError(f"checkpoint {path}: the ranks' parts differ in structure")
        return _whole([p[KEY] for p in parts], path)
    if isinstance(first, dict):
        if any(not isinstance(p, dict) or set(p) != set(first) for p in parts):
            raise CheckpointError(f"checkpoint {path}: the ranks' parts differ in structure")
        return {k: join([p[k] for p in parts], f"{path}.{k}") for k, v in first.items()}
    if isinstance(first, list | tuple):
        if any(not isinstance(p, list | tuple) or len(p) != len(first) for p in parts):
            raise CheckpointError(f"checkpoint {path}: the ranks' parts differ in structure")
        return type(first)(join([p[i] for p in parts], f"{path}[{i}]") for i in range(len(first)))
    return first


def own_shards(parts: list[Any], like: Any, rank: int) -> Any:
    """The reader's DTensors straight from the saved parts when the checkpoint was saved by
    as many ranks with the same cut (a resume on the same world size): rank ``rank``'s piece
    of each, no global tensor built; otherwise ``reshard(join(parts), like)``."""
    if len(parts) == _mesh_size(like) and _same_cut(parts[rank], like):
        log.debug("restore: rank %d's own saved shards, as they are", rank)
        return _wrap(parts[rank], like)
    log.debug("restore: %d saved parts joined and cut again for rank %d", len(parts), rank)
    return reshard(join(parts), like)


def _mesh_size(like: Any) -> int | None:
    if isinstance(like, DTensor):
        return int(like.device_mesh.size())
    if isinstance(like, dict):
        for v in like.values():
            n = _mesh_size(v)
            if n is not None:
                return n
    return None


def _same_cut(part: Any, like: Any) -> bool:
    """Every DTensor of ``like`` has, in ``part``, a piece of its local shape and dtype, with
    the same global shape and placement."""
    if isinstance(like, DTensor):
        if not is_part(part):
            return False
        p, local = part[KEY], like.to_local()
        return bool(
            [int(n) for n in p["shape"]] == list(like.shape)
            and p["placement"] == _placement(like, "state")
            and tuple(p["local"].shape) == tuple(local.shape)
            and p["local"].dtype == local.dtype
        )
    if isinstance(like, dict):
        return isinstance(part, dict) and all(
            k in part and _same_cut(part[k], v) for k, v in like.items()
        )
    return True


def _wrap(part: Any, like: Any) -> Any:
    """``part`` with each piece that ``like`` holds as a DTensor wrapped as such (no copy)."""
    if is_part(part):
        if not isinstance(like, DTensor):
            raise CheckpointError("checkpoint: a sharded tensor where the model has none")
        return DTensor.from_local(
            part[KEY]["local"],
            like.device_mesh,
            like.placements,
            run_check=False,
            shape=like.shape,
            stride=like.stride(),
        )
    if isinstance(part, dict):
        return {
            k: _wrap(v, like.get(k) if isinstance(like, dict) else None) for k, v in part.items()
        }
    if isinstance(part, list | tuple):
        return type(part)(_wrap(v, None) for v in part)
    return part


def reshard(whole: Any, like: Any, path: str = "state") -> Any:
    """``whole`` (global tensors) cut as the DTensors of ``like`` (the reader's own state of
    the same structure) are: this rank's shard of each, no communication. Entries of
    ``whole`` that ``like`` lacks are kept as they are (the loader decides)."""
    if isinstance(like, DTensor):
        if not isinstance(whole, torch.Tensor):
            raise CheckpointError(f"checkpoint {path}: a tensor was expected")
        if list(whole.shape) != list(like.shape):
            raise CheckpointError(
                f"checkpoint {path}: shape {list(whole.shape)} does not fit the model's "
                f"{list(like.shape)}"
            )
        if whole.dtype != like.dtype:
            raise CheckpointError(
                f"checkpoint {path}: dtype {whole.dtype} does not fit the model's {like.dtype}"
            )
        return distribute_tensor(whole, like.device_mesh, like.placements, src_data_rank=None)
    if isinstance(like, dict) and isinstance(whole, dict):
        return {k: reshard(v, like[k], f"{path}.{k}") if k in like else v for k, v in whole.items()}
    return whole


def rank_parts(state: Any) -> list[dict[str, Any]] | None:
    """The FSDP2 parts (rank order) of a restored checkpoint, or None if it holds none."""
    from burst.checkpoint.sharded import is_sharded

    shards = state["sharded"]["shards"] if is_sharded(state) else [state]
    if not all(isinstance(s, dict) and isinstance(s.get(PART), dict) for s in shards):
        return None
    return [s[PART] for s in shards]


def whole_state(state: Any) -> dict[str, Any]:
    """A restored FSDP2 checkpoint as one state: rank 0's head (step, tier, samples,
    scheduler, ...), the global ``model`` and (tier full) ``optimizer`` state dicts."""
    parts = rank_parts(state)
    if parts is None:
        raise CheckpointError("not a checkpoint of engine fsdp2")
    head = parts[0].get("head")
    if not isinstance(head, dict):
        raise CheckpointError("rank 0's part of the checkpoint has no head")
    out = {**head, "model": join([p["model"] for p in parts], "model")}
    if parts[0].get("optimizer") is not None:
        out["optimizer"] = join([p["optimizer"] for p in parts], "optimizer")
    return out
