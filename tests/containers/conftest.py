"""The container tier: tests marked ``containers`` run steps in real containers (docker, or
podman: rootful podman with runc here, see docs/images.md). They run when an engine can
start containers; otherwise every one of them is skipped and the session ends with one line
naming what is missing. The images are built once per machine (``make images``' store and
layer cache, ``$BURST_CONTAINER_STORE`` or ~/.cache/burst/containers): a test run after a
source change rebuilds only the layers that copy burst's code."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from burst.runner.containers import DEFAULT_STORE, STORE_ENV, ContainerEngine, EngineMissing

SKIPPED: list[str] = []


@functools.cache
def engine_or_reason() -> ContainerEngine | str:
    from devtools import images

    os.environ.setdefault(STORE_ENV, str(DEFAULT_STORE))
    try:
        return images.engine()
    except EngineMissing as exc:
        return exc.one_line()
    except OSError as exc:  # the store cannot be created
        return f"no container store: {exc}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = [i for i in items if i.get_closest_marker("containers")]
    if not tier:
        return
    got = engine_or_reason()
    if isinstance(got, str):
        SKIPPED.append(got)
        skip = pytest.mark.skip(reason=f"container tier: {got}")
        for item in tier:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SKIPPED:
        terminalreporter.write_line(f"container tier skipped: {SKIPPED[0]}")


@dataclass
class Images:
    engine: ContainerEngine
    steps: str
    trainer: str
    built: dict[str, object]


@pytest.fixture(scope="module")
def images() -> Iterator[Images]:
    """Both images, built (or found up to date in the layer cache) once for the module."""
    from devtools import images as build

    eng = engine_or_reason()
    assert isinstance(eng, ContainerEngine)
    steps = build.build(eng, "steps")
    trainer = build.build(eng, "trainer", "cpu", check=False)  # make images checks it
    yield Images(eng, steps.ref, trainer.ref, {"steps": steps, "trainer": trainer})
