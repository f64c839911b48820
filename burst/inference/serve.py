"""The tiers and the router on loopback (``burst serve``, ``benchmarks/tiered.py``).

* ``TierServer``: one small HTTP server per tier (``http.server`` on 127.0.0.1, in this
  process): ``POST /infer`` answers with the tier's model (one request at a time, as one
  accelerator would: the others wait in its queue, up to ``queue_limit``, beyond which it answers
  503), ``GET /health`` reports health, queue depth and observed service time. ``compute_ms``
  adds an emulated model time per request (the quickstart's MLP answers in microseconds on a
  CPU; a heavy model on a GPU does not). Faults: ``kill`` (the socket closes: connection
  refused), ``slow_ms``, ``capacity`` 0 (queue full).
* ``Router``: plans each request (``burst.inference.routing.plan_request``) from a snapshot of
  the tiers' health (polled), the residency table and the cache; executes the plan
  (``run_plan``): every crossing between regions goes through the link emulator
  (``burst.regional.links.LinkEmulator``: one-way latency + bytes / bandwidth, slept), a region
  marked unreachable answers nothing. It records, per request, every region its data was sent to.
* ``LoadGenerator``: a fixed, seeded list of requests sent by a few threads; it stops when the
  list is done.

Loopback latencies are not cross-region latencies: only the emulated round trips (seed 002's
link table) stand for the distance between regions.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import random
import signal
import socket
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from burst.errors import InfraError
from burst.inference.faults import FAULTS
from burst.inference.residency import DataKey, Residency
from burst.inference.routing import (
    CacheEntry,
    Fidelity,
    Outcome,
    Plan,
    Request,
    Routed,
    Step,
    TierKind,
    TierState,
    plan_request,
    run_plan,
)
from burst.inference.triton_repo import DEFAULT_QUEUE_LIMIT, model_name
from burst.regional.links import LinkEmulator

log = logging.getLogger(__name__)

REQUEST_BYTES = 32 * 4 + 256  # the quickstart's 32 features as float32, plus the envelope
RESPONSE_BYTES = 4 + 256


class TierServer:
    """One tier: its model behind an HTTP endpoint on loopback."""

    def __init__(
        self,
        name: str,
        kind: TierKind,
        region: str,
        model: nn.Module,
        *,
        compute_ms: float = 0.0,
        queue_limit: int = 8,
    ) -> None:
        self.name, self.kind, self.region = name, kind, region
        self.model = model.eval()
        self.compute_ms = compute_ms
        self.queue_limit = queue_limit
        self.capacity: int | None = None  # fault: admit at most this many (0: queue full)
        self.slow_ms = 0.0  # fault: added to every answer
        self.depth = 0
        self.service_ms = compute_ms  # observed (EWMA), reported by /health
        # the one "accelerator": a worker answering the queue in order
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._worker = threading.Thread(target=self._work, name=f"tier-{name}-worker", daemon=True)
        self._worker.start()
        self._count = threading.Lock()
        self._started: float | None = None  # when the request being answered started
        self.alive = True
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _reply(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the router gave up on this answer (its deadline passed)
                    log.debug("tier %s: the caller left before the answer", server.name)

            def do_GET(self) -> None:
                self._reply(200, server.health_doc())

            def do_POST(self) -> None:
                try:  # a request that is not {"x": [...]} is the caller's mistake: 400
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    x = body["x"]
                except (ValueError, KeyError, TypeError) as exc:
                    problem = f"the request is not a JSON object with x: {exc.__class__.__name__}"
                    self._reply(400, {"error": problem, "tier": server.name})
                    return
                answer = server.infer(x)
                if answer is None:
                    self._reply(503, {"error": "queue full", "tier": server.name})
                else:
                    self._reply(200, {"y": answer, "tier": server.name})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name=f"tier-{name}", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def limit(self) -> int:
        return self.queue_limit if self.capacity is None else min(self.queue_limit, self.capacity)

    def health_doc(self) -> dict[str, Any]:
        # a request running longer than the observed service time is evidence too: a tier
        # that slows down says so before its slow answers finish
        started = self._started
        running = (time.perf_counter() - started) * 1000.0 if started is not None else 0.0
        return {
            "healthy": True,
            "queue_depth": self.depth,
            "queue_limit": self.limit(),
            "service_ms": max(self.service_ms, running),
        }

    def infer(self, x: list[list[float]]) -> list[list[float]] | None:
        """Queue ``x`` for the tier's one worker (first come, first served) and wait for its
        answer; None at once when the queue is full."""
        with self._count:
            if self.depth >= self.limit():
                return None
            self.depth += 1
        try:
            job: _Job = _Job(x)
            self._jobs.put(job)
            job.done.wait()
            return job.y
        finally:
            with self._count:
                self.depth -= 1

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            t0 = self._started = time.perf_counter()
            with torch.no_grad():
                job.y = self.model(torch.tensor(job.x, dtype=torch.float32)).tolist()
            pause = self.compute_ms + self.slow_ms - (time.perf_counter() - t0) * 1000.0
            if pause > 0:
                time.sleep(pause / 1000.0)
            took = (time.perf_counter() - t0) * 1000.0
            self.service_ms = 0.8 * self.service_ms + 0.2 * took
            self._started = None
            job.done.set()

    # -- what the router calls (over HTTP, as it would call a remote tier) -----------------
    def probe(self, timeout: float) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/health", timeout=timeout) as r:
            return json.loads(r.read())

    def ask(self, x: list[float], timeout: float) -> list[float]:
        body = json.dumps({"x": [x]}).encode()
        req = urllib.request.Request(f"{self.url}/infer", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())["y"][0]

    def kill(self) -> None:
        """The tier dies: its socket closes, new connections are refused."""
        self.alive = False
        self.httpd.shutdown()
        self.httpd.server_close()
        self._jobs.put(None)


@dataclass
class _Job:
    x: list[list[float]]
    y: list[list[float]] | None = None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class Record:
    """What became of one request."""

    id: str
    data_class: str
    origin: str
    entry_region: str
    fidelity: str
    budget_ms: float
    path: str  # "cache", "serve:<tier>", "queue:<tier>", "refuse"
    latency_ms: float
    met: bool  # answered within its budget
    sent_to: list[str]  # every region the request's data was sent to (attempts included)
    plan: str
    cached: tuple[str, str] | None  # the cache entry seen at plan time (region, kind)
    trail: list[str]


class ServedTier(Protocol):
    """What the router needs of a tier, whatever serves it (a loopback server, Triton)."""

    name: str
    kind: TierKind
    region: str
    compute_ms: float
    queue_limit: int
    alive: bool

    def probe(self, timeout: float) -> dict[str, Any]: ...

    def ask(self, x: list[float], timeout: float) -> list[float]: ...

    def kill(self) -> None: ...


class TritonTier:
    """One tier served by NVIDIA Triton in a process of its own (``burst.inference.triton_tier``
    run by ``python``, an environment with nvidia-pytriton and torch), from the tier's
    TorchScript export. Health: ``/v2/health/ready``; queue depth: the metric
    ``nv_inference_pending_request_count``; ``kill`` kills its process group (Triton's server
    binary included): connections are refused."""

    def __init__(
        self,
        name: str,
        kind: TierKind,
        region: str,
        export: Path,
        *,
        python: str,
        path: Sequence[str] = (),
        compute_ms: float = 0.0,
        queue_limit: int = 8,
        start_timeout_s: float = 180.0,
    ) -> None:
        self.name, self.kind, self.region = name, kind, region
        self.compute_ms, self.queue_limit = compute_ms, queue_limit
        self.model_name = model_name(name)  # as in the tier's Triton model repository
        http, grpc, metrics = _free_ports(3)
        self.url = f"http://127.0.0.1:{http}"
        self.metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        script = Path(__file__).with_name("triton_tier.py")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
        cmd = [
            python, str(script), "--model", str(export), "--name", self.model_name,
            "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
            "--compute-ms", str(compute_ms),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
            start_new_session=True,  # its own process group: kill() reaches tritonserver too
        )  # fmt: skip
        self.alive = True
        ready = threading.Event()
        threading.Thread(target=self._read, args=(ready,), daemon=True).start()
        if not ready.wait(start_timeout_s):
            self.kill()
            raise InfraError(f"Triton tier {name} did not become ready in {start_timeout_s:.0f} s")
        # Triton's first inference of a model is slow (its python backend's first call):
        # warm it up before it counts, as a deployment's readiness probe would
        try:
            for _ in range(3):
                self.ask([0.0] * 32, timeout=60.0)
        except (OSError, ValueError, KeyError, IndexError) as exc:
            self.kill()
            raise InfraError(f"Triton tier {name} does not answer: {exc}") from None

    def _read(self, ready: threading.Event) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == "ready":
                ready.set()

    def probe(self, timeout: float) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/v2/health/ready", timeout=timeout) as r:
            healthy = r.status == 200
        with urllib.request.urlopen(self.metrics_url, timeout=timeout) as r:
            text = r.read().decode()
        pending = 0
        for line in text.splitlines():
            if (
                line.startswith("nv_inference_pending_request_count{")
                and f'model="{self.model_name}"' in line
            ):
                pending = int(float(line.rsplit(" ", 1)[1]))
        return {
            "healthy": healthy,
            "queue_depth": pending,
            "queue_limit": self.queue_limit,
            "service_ms": self.compute_ms,
        }

    def ask(self, x: list[float], timeout: float) -> list[float]:
        body = json.dumps(
            {"inputs": [{"name": "x", "shape": [1, len(x)], "datatype": "FP32", "data": x}]}
        ).encode()
        url = f"{self.url}/v2/models/{self.model_name}/infer"
        req = urllib.request.Request(
            url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=timeout) as r:
            out = json.loads(r.read())["outputs"][0]["data"]
        return [float(v) for v in out]

    def kill(self) -> None:
        if self.alive:
            self.alive = False
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s_ in socks:
            s_.bind(("127.0.0.1", 0))
        return [s_.getsockname()[1] for s_ in socks]
    finally:
        for s_ in socks:
            s_.close()


@dataclass
class Router:
    tiers: Sequence[ServedTier]
    residency: Residency
    emulator: LinkEmulator
    health_interval_s: float = 0.02
    unreachable: set[str] = field(default_factory=set)  # regions the network does not reach
    cache: dict[tuple[str, str], tuple[Any, TierKind]] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._states: dict[str, TierState] = {}
        # requests this router has sent to each tier and not yet had back: counted at once,
        # while the health poll sees them only at its next round
        self._inflight: dict[str, int] = {t.name: 0 for t in self.tiers}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.rtt = {pair: 2.0 * link.latency_ms for pair, link in self.emulator.links.items()}
        self.poll()
        self._poller = threading.Thread(target=self._poll_loop, name="router-health", daemon=True)
        self._poller.start()

    # -- what the router knows of the tiers ------------------------------------------------
    def _probe(self, t: ServedTier) -> TierState:
        base = TierState(
            t.name, t.kind, t.region, service_ms=t.compute_ms, queue_limit=t.queue_limit
        )
        if t.region in self.unreachable:
            return replace(base, reachable=False, healthy=False)
        try:
            h = t.probe(0.5)
        except (OSError, ValueError, KeyError):
            return replace(base, healthy=False)
        return replace(
            base,
            healthy=bool(h["healthy"]),
            queue_depth=int(h["queue_depth"]),
            queue_limit=int(h["queue_limit"]),
            service_ms=float(h["service_ms"]),
        )

    def poll(self) -> None:
        states = {t.name: self._probe(t) for t in self.tiers}
        with self._lock:
            self._states = states

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.health_interval_s):
            self.poll()

    def states(self) -> list[TierState]:
        with self._lock:
            return [
                replace(s, queue_depth=max(s.queue_depth, self._inflight[s.name]))
                for s in self._states.values()
            ]

    def _sent(self, tier: str, delta: int) -> None:
        with self._lock:
            self._inflight[tier] += delta

    def close(self) -> None:
        self._stop.set()
        self._poller.join(timeout=2)

    # -- one request ---------------------------------------------------------------------
    def _tier(self, name: str | None) -> ServedTier:
        return next(t for t in self.tiers if t.name == name)

    def handle(self, request: Request, x: list[float]) -> Record:
        t0 = time.perf_counter()
        entry = request.data.entry_region
        hit = self.cache.get((entry, request.cache_key)) if request.cache_key else None
        cached = CacheEntry(entry, hit[1]) if hit is not None else None
        plan = plan_request(request, self.states(), self.residency, self.rtt, cached)
        sent: list[str] = []
        answer: dict[str, Any] = {}

        def elapsed() -> float:
            return (time.perf_counter() - t0) * 1000.0

        def call(step: Step) -> Outcome:
            tier = self._tier(step.tier)
            region = tier.region
            sent.append(region)  # the data leaves for this region, whatever happens next
            if region in self.unreachable:
                time.sleep(max(0.0, step.deadline_ms - elapsed()) / 1000.0)
                return Outcome(False, f"{region} unreachable")
            self.emulator.transfer(entry, region, REQUEST_BYTES, "inference-request")
            timeout = (step.deadline_ms - elapsed()) / 1000.0
            if timeout <= 0:
                return Outcome(False, "deadline passed on the way")
            self._sent(tier.name, 1)
            try:
                answer["y"] = tier.ask(x, timeout)
            except urllib.error.HTTPError as exc:
                return Outcome(False, f"HTTP {exc.code}")
            except (OSError, ValueError, KeyError, IndexError) as exc:
                return Outcome(False, type(exc).__name__)
            finally:
                self._sent(tier.name, -1)
            self.emulator.transfer(region, entry, RESPONSE_BYTES, "inference-response")
            if elapsed() > step.deadline_ms:
                return Outcome(False, "answered after the step's deadline")
            answer["kind"] = tier.kind
            return Outcome(True)

        def attempt(step: Step) -> Outcome:
            if step.action == "cache":
                if hit is None:
                    return Outcome(False, "evicted")
                answer["y"], answer["kind"] = hit
                return Outcome(True)
            if step.action == "serve":
                return call(step)
            # queue: wait until the tier has room while its round trip + service still fit
            tier = self._tier(step.tier)
            while elapsed() + step.expected_ms <= step.deadline_ms:
                s = next((s for s in self.states() if s.name == tier.name), None)
                if s is not None and s.healthy and s.reachable and s.queue_depth < s.queue_limit:
                    return call(step)
                time.sleep(0.005)
            return Outcome(False, "no room before the deadline")

        routed: Routed = run_plan(plan, attempt)
        latency = elapsed()
        if not routed.refused and request.cache_key and "kind" in answer:
            self.cache[(entry, request.cache_key)] = (answer["y"], answer["kind"])
        step = routed.served_by
        path = step.action if step.action in ("cache", "refuse") else f"{step.action}:{step.tier}"
        rec = Record(
            id=request.id,
            data_class=request.data.data_class,
            origin=request.data.origin,
            entry_region=entry,
            fidelity=request.fidelity,
            budget_ms=request.budget_ms,
            path=path,
            latency_ms=latency,
            met=not routed.refused and latency <= request.budget_ms,
            sent_to=sent,
            plan=plan.describe(),
            cached=(cached.region, cached.kind) if cached else None,
            trail=[
                f"{s.action}:{s.tier or '-'} {'ok' if o.ok else o.detail}" for s, o in routed.trail
            ],
        )
        with self._lock:
            self.records.append(rec)
        return rec


@dataclass(frozen=True)
class LoadSpec:
    requests: int = 60
    concurrency: int = 4
    seed: int = 32
    entry_region: str = "ap-southeast-1"
    origin: str = "SG"
    classes: tuple[str, ...] = ("internal", "personal")
    high_fidelity_share: float = 0.25
    budgets_ms: tuple[float, ...] = (150.0, 400.0, 1000.0)
    repeat_share: float = 0.2  # requests that repeat an earlier cache key


def make_load(spec: LoadSpec, features: int = 32) -> list[tuple[Request, list[float]]]:
    """A fixed, seeded list of requests (the same list for every scenario)."""
    rng = random.Random(spec.seed)
    out: list[tuple[Request, list[float]]] = []
    keys: list[tuple[str, str, list[float]]] = []
    for i in range(spec.requests):
        if keys and rng.random() < spec.repeat_share:
            key, data_class, x = rng.choice(keys)
        else:
            data_class = rng.choice(spec.classes)
            x = [rng.gauss(0.0, 1.0) for _ in range(features)]
            key = f"k{i}"
            keys.append((key, data_class, x))
        fidelity: Fidelity = "high" if rng.random() < spec.high_fidelity_share else "standard"
        req = Request(
            id=f"r{i:04d}",
            data=DataKey(data_class, spec.origin, spec.entry_region),
            budget_ms=rng.choice(spec.budgets_ms),
            fidelity=fidelity,
            cache_key=key,
        )
        out.append((req, x))
    return out


def run_load(
    router: Router, load: Sequence[tuple[Request, list[float]]], concurrency: int
) -> list[Record]:
    """Send ``load`` through ``router`` from ``concurrency`` threads; returns when all are done."""
    queue = list(reversed(load))
    lock = threading.Lock()
    out: list[Record] = []

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                req, x = queue.pop()
            rec = router.handle(req, x)
            with lock:
                out.append(rec)

    threads = [threading.Thread(target=worker, name=f"load-{i}") for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(out, key=lambda r: r.id)


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100.0 * (len(ordered) - 1))))
    return ordered[k]


def summarize(records: Sequence[Record]) -> dict[str, Any]:
    paths: dict[str, list[float]] = {}
    for r in records:
        paths.setdefault(r.path, []).append(r.latency_ms)
    admitted = [r for r in records if r.path != "refuse"]
    return {
        "requests": len(records),
        "refused": len(records) - len(admitted),
        "deadline_met_share_of_admitted": (sum(r.met for r in admitted) / len(admitted))
        if admitted
        else None,
        "latency_ms": {
            p: {"n": len(v), "p50": percentile(v, 50), "p99": percentile(v, 99)}
            for p, v in sorted(paths.items())
        },
        "overall_ms": {
            "p50": percentile([r.latency_ms for r in admitted], 50),
            "p99": percentile([r.latency_ms for r in admitted], 99),
            "mean": statistics.fmean([r.latency_ms for r in admitted]) if admitted else None,
        },
    }


def residency_breaches(records: Sequence[Record], residency: Residency) -> list[Record]:
    """Requests whose data was sent (served or only attempted) to a region the preflight does
    not allow for it."""
    return [
        r
        for r in records
        if not set(r.sent_to)
        <= residency.allowed(DataKey(r.data_class, r.origin, "ap-southeast-1"))
    ]


# -- a deployment: the tiers of a run, the router, the faults ---------------------------------

EDGE_REGION = "ap-southeast-1"  # where the users' requests enter (Singapore)
GPU_REGION = "me-central-1"  # where the heavy model runs (the GPU-rich region)


@dataclass(frozen=True)
class TierPlacement:
    name: str  # the tier's name in the tiers document (burst distill)
    kind: TierKind
    region: str
    compute_ms: float  # emulated model time per request
    queue_limit: int = DEFAULT_QUEUE_LIMIT


DEFAULT_PLACEMENT = (
    TierPlacement("distilled-int8", "distilled", EDGE_REGION, compute_ms=5.0),
    TierPlacement("heavy", "heavy", GPU_REGION, compute_ms=30.0),
)


def apply_fault(fault: str, tiers: Sequence[ServedTier], router: Router) -> list[TierState]:
    """Inject ``fault`` and return the true state of the tiers under it (what the policy
    would plan from if it knew the fault at once)."""
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}: one of {', '.join(FAULTS)}")
    truth = {
        t.name: TierState(t.name, t.kind, t.region, t.compute_ms, queue_limit=t.queue_limit)
        for t in tiers
    }
    if fault != "none":
        target_kind, _, what = fault.partition(" ")
        tier = next(t for t in tiers if t.kind == target_kind)
        now = truth[tier.name]
        if what == "killed":
            tier.kill()
            truth[tier.name] = replace(now, healthy=False)
        elif what in ("slowed past deadline", "queue full"):
            if not isinstance(tier, TierServer):
                raise ValueError(
                    f"fault {fault!r} needs the loopback engine (Triton: killed, unreachable)"
                )
            if what == "queue full":
                tier.capacity = 0
                truth[tier.name] = replace(now, queue_limit=0)
            else:
                tier.slow_ms = 2000.0
                truth[tier.name] = replace(now, service_ms=tier.compute_ms + tier.slow_ms)
        else:  # region unreachable
            router.unreachable.add(tier.region)
            truth[tier.name] = replace(now, reachable=False, healthy=False)
    router.poll()
    return list(truth.values())


def expected_path(plan: Plan, fault: str, tiers: Sequence[ServedTier]) -> str:
    """The step the policy names under ``fault``: the first step of the plan made from the
    true state that the fault leaves able to answer (the faulted tier answers nothing)."""
    dead = set()
    if fault != "none":
        kind = fault.partition(" ")[0]
        dead = {t.name for t in tiers if t.kind == kind}
    for step in plan.steps:
        if step.action == "cache":
            return "cache"
        if step.action == "refuse":
            return "refuse"
        if step.tier not in dead:
            return f"{step.action}:{step.tier}"
    return "refuse"


def rtt_of(emulator: LinkEmulator) -> dict[frozenset[str], float]:
    return {pair: 2.0 * link.latency_ms for pair, link in emulator.links.items()}


@dataclass
class Scenario:
    fault: str
    records: list[Record]
    matrix: dict[str, Any]
    summary: dict[str, Any]
    breaches: int


@dataclass(frozen=True)
class TritonEngine:
    """Serve the tiers with Triton: ``python`` has nvidia-pytriton and torch (``path``: extra
    import paths for it); ``exports`` maps a tier to its TorchScript file
    (``export_torchscript``)."""

    python: str
    exports: Mapping[str, Path]
    path: tuple[str, ...] = ()


def export_torchscript(
    models: Mapping[str, nn.Module], where: Path, features: int = 32
) -> dict[str, Path]:
    """Each tier's model traced to TorchScript (what Triton's process loads)."""
    where.mkdir(parents=True, exist_ok=True)
    out = {}
    sample = torch.zeros(1, features)
    for name, model in models.items():
        path = where / f"{name}.pt"
        with torch.no_grad():
            torch.jit.trace(model.eval(), sample).save(str(path))
        out[name] = path
    return out


def _start_tiers(
    models: Mapping[str, nn.Module], placement: Sequence[TierPlacement], triton: TritonEngine | None
) -> list[ServedTier]:
    tiers: list[ServedTier] = []
    try:
        for p in placement:
            if triton is None:
                tiers.append(
                    TierServer(
                        p.name,
                        p.kind,
                        p.region,
                        models[p.name],
                        compute_ms=p.compute_ms,
                        queue_limit=p.queue_limit,
                    )
                )
            else:
                tiers.append(
                    TritonTier(
                        p.name,
                        p.kind,
                        p.region,
                        triton.exports[p.name],
                        python=triton.python,
                        path=triton.path,
                        compute_ms=p.compute_ms,
                        queue_limit=p.queue_limit,
                    )
                )
    except BaseException:
        for t in tiers:
            t.kill()
        raise
    return tiers


def run_scenario(
    fault: str,
    models: Mapping[str, nn.Module],
    placement: Sequence[TierPlacement],
    residency: Residency,
    emulator: LinkEmulator,
    load: Sequence[tuple[Request, list[float]]],
    concurrency: int,
    triton: TritonEngine | None = None,
) -> Scenario:
    """Fresh tiers (loopback servers, or Triton processes) and router, ``fault`` injected, the
    load sent; the fallback matrix (each request's path against the step the policy names
    under the fault) and residency."""
    tiers = _start_tiers(models, placement, triton)
    router = Router(tiers, residency, emulator)
    try:
        truth = apply_fault(fault, tiers, router)
        log.info("scenario %s: %d requests", fault, len(load))
        records = run_load(router, load, concurrency)
    finally:
        router.close()
        for t in tiers:
            if t.alive:
                t.kill()
    requests = {req.id: req for req, _ in load}
    rtt = rtt_of(emulator)
    landed = 0
    misses: list[dict[str, str]] = []
    for r in records:
        cached = CacheEntry(r.cached[0], r.cached[1]) if r.cached else None  # type: ignore[arg-type]
        plan = plan_request(requests[r.id], truth, residency, rtt, cached, log_decision=False)
        want = expected_path(plan, fault, tiers)
        if want == r.path:
            landed += 1
        else:
            misses.append(
                {
                    "id": r.id,
                    "expected": want,
                    "got": r.path,
                    "plan": r.plan,
                    "trail": "; ".join(r.trail),
                }
            )
    breaches = residency_breaches(records, residency)
    return Scenario(
        fault=fault,
        records=records,
        matrix={"requests": len(records), "landed_as_named": landed, "misses": misses[:10]},
        summary=summarize(records),
        breaches=len(breaches),
    )


def deployment(
    job: Any,
    run_id: str,
    *,
    runs_root: Any = None,
    placement: Sequence[TierPlacement] = DEFAULT_PLACEMENT,
    provider: str = "aws",
    load_spec: LoadSpec | None = None,
) -> tuple[dict[str, nn.Module], Residency, LinkEmulator, list[tuple[Request, list[float]]]]:
    """What a local serving run needs: the tiers' models restored from the run's store, the
    residency table from the preflight's rules, the link emulator and the load."""
    from burst.inference.distill import load_tier, read_tiers
    from burst.inference.residency import inference_residency
    from burst.plan.crossregion import SEED_002_LINKS

    torch.set_num_threads(1)  # see burst.inference.distill: small models, one thread
    doc = read_tiers(job, run_id, runs_root)
    models = {p.name: load_tier(job, doc, p.name) for p in placement}
    spec = load_spec or LoadSpec()
    regions = sorted({p.region for p in placement})
    keys = [DataKey(c, spec.origin, spec.entry_region) for c in spec.classes]
    residency = inference_residency(job, keys, regions, provider)
    links = {
        frozenset((a, b)): SEED_002_LINKS["cross_continent"]
        for a in [*regions, spec.entry_region]
        for b in [*regions, spec.entry_region]
        if a != b
    }
    return models, residency, LinkEmulator(links), make_load(spec)
