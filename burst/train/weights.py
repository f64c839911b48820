"""A deterministic digest of model weights: same values, same digest, on any run."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def state_sha256(state: Mapping[str, torch.Tensor]) -> str:
    """The digest of a model state dict of whole tensors (names sorted)."""
    import torch

    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(repr(tuple(t.shape)).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def weights_sha256(model: torch.nn.Module) -> str:
    return state_sha256(model.state_dict())
