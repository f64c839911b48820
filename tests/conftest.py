"""Shared test fixtures."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

# One OpenMP thread in every test process and the processes it starts (torch reads this once,
# at import): the suite already runs a process per core and more (xdist workers, ranks, pods).
# With torch's default (a thread per core) each idle intra-op thread spins after every op, so
# a step paced with sleeps burns its cores: the dead-driver test took 101 CPU-seconds with
# the default and 17 with one thread (its train steps 98 -> 9.7).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
from pytest_httpserver import HTTPServer
from s3server import s3_bucket, s3_server  # noqa: F401  (shared fixtures)

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart.yaml"
SHARED_SCOPES = ("module", "class", "package")
# The engines tier (tests/cluster: a real control plane, Argo, Kueue) runs only under
# `make test-cluster`, which sets BURST_CLUSTER_TIER=1; `make test` stays the fast loop.
collect_ignore_glob = [] if os.environ.get("BURST_CLUSTER_TIER") else ["cluster/*"]
CPU_PROFILE = os.environ.get("BURST_TEST_CPU_PROFILE")  # a directory: where the time goes


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """With ``BURST_TEST_CPU_PROFILE=DIR``: each test's CPU seconds (this process and the
    children it waited for: the burst processes, torchrun ranks, Terraform) and wall seconds,
    setup and teardown included, one JSON line per test in DIR/<worker>.jsonl."""
    if not CPU_PROFILE:
        yield
        return
    import json
    import resource
    import time

    def cpu() -> float:
        s, c = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

    c0, w0 = cpu(), time.monotonic()
    yield
    row = {
        "test": item.nodeid,
        "cpu": round(cpu() - c0, 2),
        "wall": round(time.monotonic() - w0, 2),
    }
    out = Path(CPU_PROFILE)
    out.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with (out / f"{worker}.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


@pytest.hookimpl(tryfirst=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The container tier's one line where it did not run (its reason, from the skip reports
    that reach this process, the controller's too under xdist: tests/containers/conftest.py)."""
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""
        _, sep, rest = str(reason).partition("container tier: ")
        if sep:
            terminalreporter.write_line(f"container tier skipped: {rest}")
            return


@pytest.hookimpl(tryfirst=True)  # before xdist's, which writes each group into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`make test` runs the tests in parallel (pytest-xdist, ``--dist loadgroup``): each test
    goes to whichever worker is free, except the tests of a file that share a module-, class-
    or package-scoped fixture (a pipeline run, a server, a compiled policy set): those stay
    together on one worker, so the fixture is set up once. A test may name its own group
    (``@pytest.mark.xdist_group("name")``) for anything else that must not run beside itself.
    Session-scoped fixtures exist once per worker."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d.scope in SHARED_SCOPES for fixturedefs in defs for d in fixturedefs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    # The longest first: the files with a test marked slow start before the rest, so the
    # workers end together on short tests instead of one worker ending alone on a minute-long
    # run (xdist hands out work in this order). A file's tests stay together and in order
    # (a module-scoped fixture is set up once).
    # A test marked `minutes` (it runs for minutes by design, mostly waiting) runs only under
    # `make test-long` (BURST_MINUTES_TESTS=1, .ci/run runs it), where it starts first of all.
    if not os.environ.get("BURST_MINUTES_TESTS"):
        skip = pytest.mark.skip(reason="runs for minutes: make test-long runs it")
        for item in items:
            if item.get_closest_marker("minutes") is not None:
                item.add_marker(skip)
    slow_files = {i.nodeid.split("::", 1)[0] for i in items if i.get_closest_marker("slow")}
    items.sort(
        key=lambda i: (
            i.get_closest_marker("minutes") is None,
            i.nodeid.split("::", 1)[0] not in slow_files,
        )
    )


@pytest.fixture
def runs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private runs root (and checkpoint store) for one test."""
    root = tmp_path / "runs"
    monkeypatch.setenv("BURST_RUNS_ROOT", str(root))
    return root


@pytest.fixture
def burst_cmd() -> list[str]:
    """`burst` as a real process: for tests that need one (signals, exit codes of a killed
    runner, child processes). Others use ``burst_cli``."""
    return [sys.executable, "-m", "burst.cli.main"]


BurstCli = Callable[..., "subprocess.CompletedProcess[str]"]  # the burst_cli fixture


@pytest.fixture
def burst_cli() -> BurstCli:
    """`burst ARGS` in this process with click's CliRunner (no interpreter start-up), as a
    ``CompletedProcess`` like ``subprocess.run(..., capture_output=True, text=True)`` gives.
    The root logger's handlers are restored afterwards (the CLI points them at its stderr)."""
    return cli_runner()


def cli_runner() -> BurstCli:
    """What the ``burst_cli`` fixture gives, for a module-scoped fixture to call."""
    from click.testing import CliRunner

    from burst.cli.main import cli

    def run(
        args: Sequence[str], env: dict[str, str] | None = None, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        try:
            result = CliRunner().invoke(cli, [str(a) for a in args], env=env, input=input)
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception  # a crash is a test failure with its traceback
        return subprocess.CompletedProcess(
            ["burst", *map(str, args)], result.exit_code, result.stdout, result.stderr
        )

    return run


@pytest.fixture
def quickstart_in(tmp_path: Path) -> Path:
    """The quickstart spec, with its checkpoint store moved into the test's tmp dir."""
    text = QUICKSTART.read_text().replace(
        "checkpoint_uri: file://checkpoints", f"checkpoint_uri: file://{tmp_path}/store"
    )
    p = tmp_path / "quickstart.yaml"
    p.write_text(text)
    return p


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))


@pytest.fixture
def argo_server(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> HTTPServer:
    """pytest-httpserver's server as the Argo server the CLI talks to (ARGO_SERVER, a token,
    namespace ``ml``): a test answers the requests it expects."""
    monkeypatch.setenv("ARGO_SERVER", httpserver.url_for("/"))
    monkeypatch.setenv("ARGO_TOKEN", "t0k3n")
    monkeypatch.setenv("ARGO_NAMESPACE", "ml")
    return httpserver
