"""A deterministic digest of model weights: same values, same digest, on any run."""

from __future__ import annotations

import hashlib

import torch


def weights_sha256(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    state = model.state_dict()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(repr(tuple(t.shape)).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
