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


#: Set to 1 (make test-containers does) to build the images cold when they are not there yet.
BUILD_ENV = "BURST_CONTAINER_BUILD"


@functools.cache
def tier_or_reason() -> ContainerEngine | str:
    """The engine, or why the tier is skipped: no engine, or (unless $BURST_CONTAINER_BUILD
    is 1) images never built on this machine. A cold build takes about 13 minutes here, more
    than the whole suite may; once built (``make images``), a source change rebuilds only the
    code layers and the tier runs in ``make test``."""
    from devtools import images

    got = engine_or_reason()
    if isinstance(got, str) or os.environ.get(BUILD_ENV) == "1":
        return got
    wanted = (f"{images.LOCAL_TAG}/steps:local", f"{images.LOCAL_TAG}/trainer:cpu")
    missing = [ref for ref in wanted if not images.present(got, ref)]
    if missing:
        return (
            f"the images are not built on this machine ({', '.join(missing)}): "
            "`make images` builds them once (about 13 min cold), `make test-containers` "
            "builds them and runs this tier"
        )
    return got


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = [i for i in items if i.get_closest_marker("containers")]
    if not tier:
        return
    got = tier_or_reason()
    if isinstance(got, str):
        skip = pytest.mark.skip(reason=f"container tier: {got}")
        for item in tier:
            item.add_marker(skip)


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
