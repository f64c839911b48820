"""Split a state tree into a JSON skeleton and a list of arrays, and join them back.

The skeleton is plain JSON (no pickle: restoring a checkpoint never runs code from the store).
Tensors and numpy arrays become ``{"__tensor__": i}`` / ``{"__ndarray__": i}``; tuples,
non-string dict keys, bytes, non-finite floats, dtypes and numpy scalars are tagged.
"""

from __future__ import annotations

import base64
import math
from typing import Any

from burst.errors import CheckpointError

TAGS = (
    "__tensor__",
    "__ndarray__",
    "__tuple__",
    "__dict__",
    "__bytes__",
    "__float__",
    "__dtype__",
    "__npscalar__",
    "__device__",
)


def _torch() -> Any:
    import torch

    return torch


def flatten(state: Any) -> tuple[Any, list[Any]]:
    """Return (skeleton, arrays) where arrays are torch tensors or numpy arrays, in order."""
    import numpy as np  # here, not at import: the checkpoint worker never needs numpy

    arrays: list[Any] = []
    try:
        torch = _torch()
    except ImportError:  # pragma: no cover - torch is always there for training code
        torch = None

    def enc(obj: Any, path: str) -> Any:
        if obj is None or isinstance(obj, bool | str):
            return obj
        if isinstance(obj, int) and not isinstance(obj, bool):
            return obj
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else {"__float__": repr(obj)}
        if torch is not None and isinstance(obj, torch.Tensor):
            if obj.is_sparse or obj.is_quantized:
                raise CheckpointError(
                    f"state {path}: sparse or quantized tensors are not supported"
                )
            arrays.append(obj)
            return {"__tensor__": len(arrays) - 1}
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                raise CheckpointError(f"state {path}: numpy arrays of objects are not supported")
            arrays.append(obj)
            return {"__ndarray__": len(arrays) - 1}
        if isinstance(obj, np.generic):
            return {"__npscalar__": [obj.dtype.str, enc(obj.item(), path)]}
        if torch is not None and isinstance(obj, torch.dtype):
            return {"__dtype__": str(obj).removeprefix("torch.")}
        if torch is not None and isinstance(obj, torch.device):
            return {"__device__": str(obj)}
        if isinstance(obj, bytes | bytearray):
            return {"__bytes__": base64.b64encode(bytes(obj)).decode()}
        if isinstance(obj, tuple):  # torch.Size is a tuple too
            return {"__tuple__": [enc(v, f"{path}[{i}]") for i, v in enumerate(obj)]}
        if isinstance(obj, list):
            return [enc(v, f"{path}[{i}]") for i, v in enumerate(obj)]
        if isinstance(obj, dict):
            if all(isinstance(k, str) and not k.startswith("__") for k in obj):
                return {k: enc(v, f"{path}.{k}") for k, v in obj.items()}
            return {"__dict__": [[enc(k, path), enc(v, f"{path}.{k}")] for k, v in obj.items()]}
        raise CheckpointError(
            f"state {path or '<root>'}: cannot checkpoint a {type(obj).__name__}; use tensors, "
            "numpy arrays, numbers, strings, bytes, lists, tuples and dicts"
        )

    return enc(state, ""), arrays


def unflatten(skeleton: Any, arrays: list[Any]) -> Any:
    """Inverse of ``flatten``; ``arrays[i]`` replaces each ``{"__tensor__"|"__ndarray__": i}``."""

    def dec(obj: Any) -> Any:
        if isinstance(obj, list):
            return [dec(v) for v in obj]
        if not isinstance(obj, dict):
            return obj
        if len(obj) == 1:
            ((tag, val),) = obj.items()
            if tag in ("__tensor__", "__ndarray__"):
                return arrays[int(val)]
            if tag == "__tuple__":
                return tuple(dec(v) for v in val)
            if tag == "__dict__":
                return {_hashable(dec(k)): dec(v) for k, v in val}
            if tag == "__bytes__":
                return base64.b64decode(val)
            if tag == "__float__":
                return float(val)
            if tag == "__dtype__":
                return getattr(_torch(), val)
            if tag == "__device__":
                return _torch().device(val)
            if tag == "__npscalar__":
                import numpy as np

                return np.dtype(val[0]).type(dec(val[1]))
        return {k: dec(v) for k, v in obj.items()}

    return dec(skeleton)


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, list | tuple) else key


def array_paths(skeleton: Any) -> list[str]:
    """The path (``.model.0.weight``, ``.optimizer.state.3.exp_avg``) of each array, in order."""
    paths = indexed_paths(skeleton)
    return [paths[i] for i in range(len(paths))]


def indexed_paths(skeleton: Any) -> dict[int, str]:
    """The path of each array reference in ``skeleton`` by its index (a part of a larger
    skeleton, e.g. one shard of a sharded checkpoint, holds indices that do not start at 0)."""
    paths: dict[int, str] = {}

    def walk(obj: Any, path: str) -> None:
        if isinstance(obj, list):
            for i, v in enumerate(obj):
                walk(v, f"{path}[{i}]")
            return
        if not isinstance(obj, dict):
            return
        if len(obj) == 1:
            ((tag, val),) = obj.items()
            if tag in ("__tensor__", "__ndarray__"):
                paths[int(val)] = path
                return
            if tag == "__tuple__":
                for i, v in enumerate(val):
                    walk(v, f"{path}[{i}]")
                return
            if tag == "__dict__":
                for k, v in val:
                    walk(v, f"{path}.{unflatten(k, [])}")
                return
            if tag in TAGS:
                return
        for k, v in obj.items():
            walk(v, f"{path}.{k}")

    walk(skeleton, "")
    return paths
