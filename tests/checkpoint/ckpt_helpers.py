"""Helpers for checkpoint tests: small models and bit-exact comparison of state trees."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def make_model(layers: int = 6, width: int = 64, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])


def train_steps(
    model: torch.nn.Module, opt: torch.optim.Optimizer, n: int, width: int = 64
) -> None:
    for _ in range(n):
        loss = model(torch.randn(4, width)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def snapshot(state: Any) -> Any:
    """A deep copy that shares no memory with the live objects."""
    if isinstance(state, torch.Tensor):
        return state.detach().clone()
    if isinstance(state, np.ndarray):
        return state.copy()
    if isinstance(state, dict):
        return {k: snapshot(v) for k, v in state.items()}
    if isinstance(state, list):
        return [snapshot(v) for v in state]
    if isinstance(state, tuple):
        return tuple(snapshot(v) for v in state)
    return state


def assert_same(a: Any, b: Any, path: str = "") -> None:
    """Bit-for-bit equality (NaN payloads included) of two state trees."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: dtype/shape differ"
        assert (
            a.contiguous()
            .reshape(-1)
            .view(torch.uint8)
            .equal(b.contiguous().reshape(-1).view(torch.uint8))
            if a.numel()
            else True
        ), f"{path}: bytes differ"
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: dtype/shape differ"
        assert a.tobytes() == b.tobytes(), f"{path}: bytes differ"
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and a != a:
        assert b != b, f"{path}: NaN lost"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"
