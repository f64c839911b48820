"""Checkpoint benchmark: burst's CheckpointManager against torch.save + boto3 upload_file.

    python benchmarks/checkpoint.py [--quick] [--reps N] [--out FILE] [--dcp-s3-env DIR]

Everything runs in one process against `rclone serve s3` on loopback, A and B alternated,
medians of --reps (at least 3) repetitions, and the ratios are written as JSON to
benchmarks/results/checkpoint.json, with the raw samples and the load average of each:

  state_bytes               full state: model + Adam + scheduler + RNG (>= 512 MiB; 256 quick)
  stall_ratio               time save() blocks the loop / torch.save + upload_file      (<= 0.05)
  step_slowdown             what one save costs the training loop: its stall and every
                            step until it is durable / as many quiet steps             (<= 1.3)
  delta_bytes_ratio_weights 2nd checkpoint of a fine-tune (2 of 12 layers trainable),
                            bytes uploaded / bytes of a full upload, weights only      (<= 0.25)
  delta_bytes_ratio_full    the same with Adam state                                    (<= 0.5)
  upload_ratio              our upload throughput / upload_file's (default settings)    (>= 0.95)
  restore_ratio             our restore throughput / one plain GET of the same bytes    (>= 0.8)
  first_stall_ratio         the first save's stall / the steady stall                   (<= 2)
                            (the manager warmed at engine start: CheckpointManager.warm;
                            details: the same with the warm-up started one step before,
                            and first_stall_ratio_unwarmed: no warm() call at all, the
                            median over --reps fresh managers)
  durable_ratio             save call -> committed / torch.save + upload_file, the
                            training loop stepping through both                        (<= 0.8)
  stall_ratio_vs_dcp        our stall / DCP async_save's (FileSystemWriter, one rank)   (<= 0.5)
  step_slowdown_vs_dcp      step_slowdown / DCP async_save's, its better mode (with
                            --dcp-s3-env)                                               (<= 1)

durable_ratio and step_slowdown are what a user sees (the "contended" part): the training
loop steps through every save (each step changes every weight and Adam moment, so every save
uploads the whole state: uploaded_fraction in the samples), and the client side of the upload
(burst's worker, upload_file's threads, DCP's executor) runs on the training loop's cores
(--cores, default 1), the S3 server, standing in for a remote store, on the others. The
baseline's torch.save blocks the loop (the state must not change under it); its upload_file
(default TransferConfig: 8 MiB parts, 10 threads) runs on a thread of the trainer while it
steps; it and DCP's arm send their bodies as burst sends a chunk: no CRC32, no SHA-256 of the
body in the signature (UNSIGNED-PAYLOAD, boto3's default over HTTPS). The figures this
benchmark reported before (the save waited for at once, nothing training: its worker hurried
to every upload lane at full priority; steps on one torch thread with the upload on the other
core; median steps, stalls left out) are in the details: durable_ratio_idle,
step_slowdown_of_median_steps.

With --dcp-s3-env DIR (s3fs for DCP, in a directory of its own: benchmarks/dcp_s3_arm.py),
step_slowdown is also measured for DCP async_save to the same S3 server, in a child process
on the same cores, burst's and DCP's repetitions alternated, in each of DCP's async modes (a
thread of the trainer, or DCP's daemon process): details.step_slowdown_dcp_<mode>,
step_slowdown_dcp (the best mode's) and step_slowdown_vs_dcp (ours / that).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from harness import REPO, ab_order, goals_text, loopback_s3, meets_goals, write_results
from harness import median as med

from burst.checkpoint import CheckpointManager, capture_state
from burst.storage import open_store
from burst.storage.loopback import LoopbackS3

LAYERS = 12
GOALS = {
    "stall_ratio": ("<=", 0.05),
    "step_slowdown": ("<=", 1.3),
    "delta_bytes_ratio_weights": ("<=", 0.25),
    "delta_bytes_ratio_full": ("<=", 0.5),
    "upload_ratio": (">=", 0.95),
    "restore_ratio": (">=", 0.8),
    "first_stall_ratio": ("<=", 2.0),
    "durable_ratio": ("<=", 0.8),
    "stall_ratio_vs_dcp": ("<=", 0.5),
    "step_slowdown_vs_dcp": ("<=", 1.0),
}
# width of the 12 square layers: full state = 12 * width^2 * 4 bytes * 3 (weights + Adam)
WIDTHS = {"full": 1984, "quick": 1408, "smoke": 64}  # 541 MiB, 272 MiB, tiny


class Log(list[str]):
    """The run's log lines, each also printed (stderr) as it comes."""

    def append(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        super().append(line)


class Net(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(LAYERS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


class Trainer:
    def __init__(self, width: int, trainable: int = LAYERS, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.width = width
        self.model = Net(width)
        for layer in self.model.layers[: LAYERS - trainable]:
            layer.requires_grad_(False)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.Adam(params, lr=1e-4)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=100)
        self.batch = torch.randn(32, width)
        self.position = 0

    def step(self) -> float:
        t0 = time.perf_counter()
        loss = self.model(self.batch).pow(2).mean()
        self.opt.zero_grad(set_to_none=False)
        loss.backward()
        self.opt.step()
        self.sched.step()
        self.position += 1
        return time.perf_counter() - t0

    def state(self, tier: str = "full") -> dict[str, Any]:
        return capture_state(
            self.model,
            self.opt,
            self.sched,
            tier=tier,
            data_position={"index": self.position},
            metadata={"bench": True},
        )


def process_cpu() -> float:
    """CPU seconds of this process so far, every thread (user + system)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def state_nbytes(state: Any) -> int:
    from burst.checkpoint.tree import flatten

    return sum(
        a.numel() * a.element_size() if isinstance(a, torch.Tensor) else a.nbytes
        for a in flatten(state)[1]
    )


def bench_stall_and_upload(
    tr: Trainer, server: LoopbackS3, bucket: str, work: Path, reps: int, log: list[str]
) -> dict[str, Any]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name=server.region)
    # The first save after a warm-up at engine start (CheckpointManager.warm: host buffer
    # faulted in, worker started) that had the time it needs, as in a run whose first save
    # comes after the warm-up's few seconds (the training loop warms after the first step).
    warmed = CheckpointManager(open_store(f"s3://{bucket}/warmed"))
    t0 = time.perf_counter()
    warmed.warm(tr.state(), wait=True)
    warm_seconds = time.perf_counter() - t0
    tr.step()
    t0 = time.perf_counter()
    warmed.save(tr.position, tr.state())
    first_stall = time.perf_counter() - t0
    warmed.wait()
    warmed.close()
    # A library user's manager, never warmed: it starts its worker at construction, in the
    # background; the first save, a few steps later, grows its buffer and writes it. One
    # fresh manager per repetition (a single first save is one sample of a noisy figure).
    # The process's CPU time over each (about twice the wall time where the fresh pages are
    # written on two cores, the wall time where another job holds the second core).
    unwarmed, unwarmed_cpu = [], []
    for rep in range(reps):
        cold = CheckpointManager(open_store(f"s3://{bucket}/cold-{rep}"))
        tr.step()
        tr.step()
        c0 = process_cpu()
        t0 = time.perf_counter()
        cold.save(tr.position, tr.state())
        unwarmed.append(time.perf_counter() - t0)
        unwarmed_cpu.append(process_cpu() - c0)
        cold.wait()
        cold.close()
    first_stall_unwarmed = med(unwarmed)
    log.append(
        "first save, never warmed: "
        + ", ".join(f"{s:.3f}s (cpu {c:.2f}s)" for s, c in zip(unwarmed, unwarmed_cpu, strict=True))
    )
    # The pessimistic case: the warm-up started in the background one step before the first
    # save, which waits for whatever of it is left (counted in its stall).
    mgr = CheckpointManager(open_store(f"s3://{bucket}/ours"))
    mgr.warm(tr.state())
    tr.step()
    t0 = time.perf_counter()
    mgr.save(tr.position, tr.state())
    first_stall_one_step = time.perf_counter() - t0
    mgr.wait()
    stall_a, stall_b, thr_a, thr_b, durable_a = [], [], [], [], []
    path = work / "baseline.pt"
    for rep in range(reps):
        for side in ab_order(rep):
            tr.step()  # every weight and moment changes: a full upload, no delta
            if side == "A":
                t0 = time.perf_counter()
                mgr.save(tr.position, tr.state())
                stall_a.append(time.perf_counter() - t0)
                res = mgr.wait()
                durable_a.append(time.perf_counter() - t0)  # save call -> committed
                assert res is not None
                thr_a.append(res.uploaded_bytes / res.seconds)
            else:
                t0 = time.perf_counter()
                torch.save(tr.state(), path)
                t1 = time.perf_counter()
                s3.upload_file(str(path), bucket, "baseline/state.pt")
                t2 = time.perf_counter()
                stall_b.append(t2 - t0)
                thr_b.append(path.stat().st_size / (t2 - t1))
        log.append(
            f"rep {rep}: stall A {stall_a[-1]:.3f}s B {stall_b[-1]:.3f}s; "
            f"upload A {thr_a[-1] / 2**20:.0f} MiB/s B {thr_b[-1] / 2**20:.0f} MiB/s"
        )
    mgr.close()
    return {
        "stall_ratio": med(stall_a) / med(stall_b),
        # the first save's stall (buffer and worker warmed at engine start) / the steady one
        "first_stall_ratio": first_stall / med(stall_a),
        "first_stall_ratio_warm_one_step_before": first_stall_one_step / med(stall_a),
        # no warm() call: what a library user's first save blocks
        "first_stall_ratio_unwarmed": first_stall_unwarmed / med(stall_a),
        "first_save_stall_seconds_unwarmed": first_stall_unwarmed,
        "first_save_stall_seconds_unwarmed_reps": [round(x, 4) for x in unwarmed],
        "first_save_cpu_seconds_unwarmed_reps": [round(x, 3) for x in unwarmed_cpu],
        "first_save_stall_seconds_warm_one_step_before": first_stall_one_step,
        "warm_seconds": warm_seconds,
        # save call -> committed / torch.save + upload_file (durable when it returns), with
        # no training during either: the save waited for at once (its worker hurried: every
        # upload lane at full priority), the baseline alone on the machine (the figure this
        # benchmark reported as durable_ratio before; the headline is bench_durable's)
        "durable_ratio_idle": med(durable_a) / med(stall_b),
        "durable_seconds_ours_idle": med(durable_a),
        "upload_ratio": med(thr_a) / med(thr_b),
        "stall_seconds_ours": med(stall_a),
        "stall_seconds_baseline": med(stall_b),
        "first_save_stall_seconds": first_stall,
        "upload_mib_s_ours": med(thr_a) / 2**20,
        "upload_mib_s_baseline": med(thr_b) / 2**20,
        "baseline_key": "baseline/state.pt",
        "baseline_bytes": path.stat().st_size,
    }


def s3_client(server: LoopbackS3) -> Any:
    """boto3's client with the body settings of burst's chunk uploads (burst.storage.s3,
    ``S3Store.chunk_client``): no CRC32 of every part and no SHA-256 of the body in the
    signature (UNSIGNED-PAYLOAD, what boto3 sends over HTTPS by default), so neither side
    of a comparison pays a pass over its bytes that the other does not."""
    import boto3
    from botocore.config import Config

    cfg = Config(
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        s3={"payload_signing_enabled": False},
    )
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name=server.region,
        # this server's keys: boto3's default session keeps the first credentials it found
        # (an earlier server's, in this process)
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        config=cfg,
    )


def split_cores(count: int) -> tuple[list[int], list[int]]:
    """The training side's cores (the first ``count`` this process may use; 0: all of them)
    and the S3 server's (the others; all of them where none are left)."""
    allowed = sorted(os.sched_getaffinity(0))
    if count <= 0:
        return allowed, allowed
    train = allowed[: min(count, len(allowed))]
    return train, [c for c in allowed if c not in train] or allowed


@contextmanager
def pinned(cores: list[int]) -> Iterator[None]:
    """This thread, and every thread and process it starts meanwhile (they inherit it),
    on ``cores``."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def affinity(pid: int | None) -> list[int]:
    """The cores of every thread of process ``pid`` (Linux /proc), for the record."""
    if pid is None:
        return []
    cores: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            cores |= os.sched_getaffinity(int(task.name))
    return sorted(cores)


def upload_timed(s3: Any, path: Path, bucket: str) -> float:
    """``upload_file`` of ``path``; the time (time.time()) it returned."""
    s3.upload_file(str(path), bucket, "durable-baseline/state.pt")
    return time.time()


def window_ratio(quiet: list[float], busy: list[float], stall: float) -> float:
    """What the training loop lost to one save: the save's stall and every step until the
    save is durable, over as many quiet steps (their mean)."""
    return (stall + sum(busy)) / (len(busy) * (sum(quiet) / len(quiet)))


def bench_durable(
    tr: Trainer, server: LoopbackS3, bucket: str, work: Path, reps: int, log: list[str]
) -> dict[str, Any]:
    """Time to durable with the training loop stepping through every save, both sides, A and
    B alternated: burst's ``save`` (never waited for: its worker at its background priority)
    against ``torch.save`` (it blocks the loop: the state must not change under it) followed by
    boto3 ``upload_file`` (default TransferConfig: 8 MiB parts, 10 threads) on a thread of the
    trainer while it steps. Every step changes every weight and Adam moment, so each save
    uploads the whole state (``uploaded_fraction`` says so). Raw samples are returned."""
    s3 = s3_client(server)
    mgr = CheckpointManager(open_store(f"s3://{bucket}/durable"))
    mgr.warm(tr.state(), wait=True)
    tr.step()
    mgr.save(tr.position, tr.state())  # the first save of this store: nothing to compare
    mgr.wait()
    worker_cores = affinity(mgr.worker_pid)
    path = work / "durable.pt"
    uploader = ThreadPoolExecutor(1, thread_name_prefix="upload_file")
    samples: list[dict[str, Any]] = []
    for rep in range(reps):
        for side in ab_order(rep):
            quiet = [tr.step() for _ in range(3)]
            tr.step()  # every chunk changes: a full upload
            load = os.getloadavg()[0]
            c0 = process_cpu()
            t0 = time.time()
            busy: list[float] = []
            if side == "A":
                mgr.save(tr.position, tr.state())
                stall = time.time() - t0
                while mgr.busy():
                    busy.append(tr.step())
                res = mgr.wait()
                assert res is not None
                durable = res.committed_at - t0
                fraction = res.uploaded_bytes / res.total_bytes
            else:
                torch.save(tr.state(), path)
                stall = time.time() - t0
                future = uploader.submit(upload_timed, s3, path, bucket)
                while not future.done():
                    busy.append(tr.step())
                durable = future.result() - t0
                fraction = 1.0
            samples.append(
                {
                    "rep": rep,
                    "side": "burst" if side == "A" else "torch.save+upload_file",
                    "durable_s": round(durable, 4),
                    "stall_s": round(stall, 4),
                    "steps_quiet_s": [round(x, 4) for x in quiet],
                    "steps_during_s": [round(x, 4) for x in busy],
                    "window_ratio": round(window_ratio(quiet, busy or [0.0], stall), 4),
                    "uploaded_fraction": round(fraction, 4),
                    "process_cpu_s": round(process_cpu() - c0, 3),
                    "load_average": round(load, 2),
                }
            )
            s = samples[-1]
            log.append(
                f"rep {rep} durable, training: {s['side']} {durable:.2f}s (stall {stall:.3f}s,"
                f" {len(busy)} steps, window ratio {s['window_ratio']:.2f}, uploaded"
                f" {fraction:.2f}, load {load:.1f})"
            )
    mgr.close()
    uploader.shutdown()
    ours = [s for s in samples if s["side"] == "burst"]
    base = [s for s in samples if s["side"] != "burst"]
    return {
        "durable_ratio": med(s["durable_s"] for s in ours) / med(s["durable_s"] for s in base),
        "durable_seconds_ours": med(s["durable_s"] for s in ours),
        "durable_seconds_baseline": med(s["durable_s"] for s in base),
        "durable_window_ratio_ours": med(s["window_ratio"] for s in ours),
        "durable_window_ratio_baseline": med(s["window_ratio"] for s in base),
        "durable_samples": samples,
        "worker_cores": worker_cores,
    }


def bench_vs_dcp(tr: Trainer, bucket: str, work: Path, reps: int, log: list[str]) -> dict[str, Any]:
    """Stall per save: ours against DCP ``async_save`` (FileSystemWriter, one process)."""
    import torch.distributed.checkpoint as dcp

    mgr = CheckpointManager(open_store(f"s3://{bucket}/vsdcp"))
    ours: list[float] = []
    theirs: list[float] = []
    for rep in range(reps + 1):  # rep 0 warms both up
        for side in ab_order(rep):
            tr.step()
            t0 = time.perf_counter()
            if side == "A":
                mgr.save(tr.position, tr.state())
                stall = time.perf_counter() - t0
                mgr.wait()
            else:
                fut = dcp.async_save(
                    tr.state(), storage_writer=dcp.FileSystemWriter(str(work / f"dcp-{rep}"))
                )
                stall = time.perf_counter() - t0
                fut.result()  # type: ignore[union-attr]  # a Future without async_stager
            if rep:
                (ours if side == "A" else theirs).append(stall)
        if rep:
            log.append(f"rep {rep}: stall ours {ours[-1]:.3f}s, DCP async_save {theirs[-1]:.3f}s")
    mgr.close()
    return {
        "stall_ratio_vs_dcp": med(ours) / med(theirs),
        "stall_seconds_dcp_async_save": med(theirs),
    }


def bench_restore(
    tr: Trainer, server: LoopbackS3, bucket: str, reps: int, baseline_key: str, log: list[str]
) -> dict[str, Any]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name=server.region)
    # restores only: no worker process (it would start beside the first timed restore)
    mgr = CheckpointManager(open_store(f"s3://{bucket}/ours"), start_worker=False)
    target = tr.state()  # restore straight into the live model's and optimizer's tensors
    thr_a, thr_b = [], []
    for rep in range(reps):
        for side in ab_order(rep):
            if side == "A":
                t0 = time.perf_counter()
                restored = mgr.restore(into=target)
                dt_a = time.perf_counter() - t0
                thr_a.append(restored.manifest.total_bytes / dt_a)
            else:
                t0 = time.perf_counter()
                data = s3.get_object(Bucket=bucket, Key=baseline_key)["Body"].read()
                dt_b = time.perf_counter() - t0
                thr_b.append(len(data) / dt_b)
                del data
        log.append(
            f"rep {rep}: restore A {thr_a[-1] / 2**20:.0f} MiB/s, "
            f"GET B {thr_b[-1] / 2**20:.0f} MiB/s"
        )
    mgr.close()
    return {
        "restore_ratio": med(thr_a) / med(thr_b),
        "restore_mib_s_ours": med(thr_a) / 2**20,
        "get_mib_s_baseline": med(thr_b) / 2**20,
    }


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class DcpS3Arm:
    """DCP ``async_save`` to the same S3 server, in a child process whose path puts ``env``
    (s3fs, aiobotocore and the botocore they pin) first: benchmarks/dcp_s3_arm.py."""

    def __init__(
        self, env: Path, width: int, server: LoopbackS3, url: str, threads: int, mode: str
    ) -> None:
        self.mode = mode
        if not (env / "s3fs").is_dir() or not (env / "aiobotocore").is_dir():
            raise SystemExit(
                f"--dcp-s3-env {env}: no s3fs/aiobotocore there; install them with the"
                " command in benchmarks/dcp_s3_arm.py's docstring"
            )
        child_env = dict(os.environ)
        child_env["PYTHONPATH"] = os.pathsep.join([str(env), str(REPO)])
        # the body settings of burst's chunk uploads (burst.storage.s3): no CRC32, and no
        # SHA-256 of the body in the signature (a shared config file's s3 section: botocore
        # has no environment variable for it)
        child_env["AWS_REQUEST_CHECKSUM_CALCULATION"] = "when_required"
        child_env["AWS_RESPONSE_CHECKSUM_VALIDATION"] = "when_required"
        config = Path(tempfile.mkdtemp(prefix="dcp-arm-")) / "aws-config"
        config.write_text("[default]\ns3 =\n    payload_signing_enabled = false\n")
        child_env["AWS_CONFIG_FILE"] = str(config)
        self.server = server
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "benchmarks/dcp_s3_arm.py"),
                f"--width={width}",
                f"--url={url}",
                f"--endpoint={server.endpoint}",
                f"--train-threads={threads}",
                f"--mode={mode}",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env,
        )
        if not json.loads(self._line()).get("ready"):
            raise RuntimeError("the DCP arm did not start")

    def _line(self) -> str:
        """The next JSON line (DCP's daemon process may print lines of its own)."""
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the DCP arm exited (code {self.proc.wait()})")
            if line.startswith("{"):
                return line

    def rep(self, order: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.server.proc is not None
        s0 = cpu_seconds(self.server.proc.pid)
        self.proc.stdin.write(json.dumps({"order": order}) + "\n")
        self.proc.stdin.flush()
        doc: dict[str, Any] = json.loads(self._line())
        doc["server_cpu"] = cpu_seconds(self.server.proc.pid) - s0
        return doc

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=120)


def bench_step_slowdown(
    tr: Trainer,
    server: LoopbackS3,
    bucket: str,
    reps: int,
    log: list[str],
    upload_rate: float | None = None,
    dcp_arms: list[DcpS3Arm] | None = None,
) -> dict[str, Any]:
    """Per repetition: steps with no upload (A) next to steps during a full upload (B), in
    alternating order; the ratio of the two medians; the median of those ratios. Also the CPU
    seconds the worker and the (loopback) server spent per upload. With ``dcp_arms``: each
    repetition also runs DCP's side (the same, with ``dcp.async_save`` to the same server)
    in each of DCP's modes, burst's first and the DCP arms after it, then the other way
    round (``ab_order``)."""
    label = f" paced {upload_rate / 2**20:.0f} MiB/s" if upload_rate else ""
    mgr = CheckpointManager(open_store(f"s3://{bucket}/slowdown"), upload_rate=upload_rate)
    mgr.save(tr.position, tr.state())  # warm the buffer and the worker
    mgr.wait()
    ratios, medians, quiet_all, busy_all, worker_cpu, server_cpu = [], [], [], [], [], []
    samples: list[dict[str, Any]] = []
    arms = dcp_arms or []
    dcp: dict[str, dict[str, list[Any]]] = {
        a.mode: {"ratio": [], "cpu": [], "server_cpu": [], "stall": [], "of_median_steps": []}
        for a in arms
    }
    assert server.proc is not None
    for rep in range(reps):
        if ab_order(rep) == "BA":
            for arm in reversed(arms):
                _dcp_rep(arm, rep, log, dcp[arm.mode])
        quiet: list[float] = []
        busy: list[float] = []
        for side in ab_order(rep):
            if side == "A":
                quiet += [tr.step() for _ in range(5)]
            else:
                tr.step()  # every chunk changes: a full upload
                w0, s0 = cpu_seconds(mgr.worker_pid), cpu_seconds(server.proc.pid)
                t0 = time.perf_counter()
                mgr.save(tr.position, tr.state())
                stall = time.perf_counter() - t0
                while mgr.busy() or len(busy) < 2:
                    busy.append(tr.step())
                mgr.wait()
                worker_cpu.append(cpu_seconds(mgr.worker_pid) - w0)
                server_cpu.append(cpu_seconds(server.proc.pid) - s0)
        ratios.append(window_ratio(quiet, busy, stall))
        medians.append(med(busy) / med(quiet))
        samples.append(
            {
                "rep": rep,
                "stall_s": round(stall, 4),
                "steps_quiet_s": [round(x, 4) for x in quiet],
                "steps_during_s": [round(x, 4) for x in busy],
                "load_average": round(os.getloadavg()[0], 2),
            }
        )
        quiet_all += quiet
        busy_all += busy
        log.append(
            f"rep {rep}{label}: step quiet {med(quiet) * 1e3:.1f} ms, during upload "
            f"{med(busy) * 1e3:.1f} ms ({len(busy)} steps), stall {stall:.3f}s, ratio"
            f" {ratios[-1]:.2f} (of medians {medians[-1]:.2f}); "
            f"cpu worker {worker_cpu[-1]:.2f}s server {server_cpu[-1]:.2f}s"
        )
        if ab_order(rep) == "AB":
            for arm in arms:
                _dcp_rep(arm, rep, log, dcp[arm.mode])
    mgr.close()
    key = "step_slowdown" + ("_paced" if upload_rate else "")
    out = {
        key: med(ratios),
        f"{key}_reps": [round(r, 3) for r in ratios],
        # the earlier definition: median step during the upload / median quiet step (the
        # stall and the slowest steps left out)
        f"{key}_of_median_steps": med(medians),
        f"{key}_samples": samples,
        f"{key}_step_seconds_quiet": med(quiet_all),
        f"{key}_step_seconds_during_upload": med(busy_all),
        f"{key}_cpu_seconds_worker_per_upload": med(worker_cpu),
        f"{key}_cpu_seconds_server_per_upload": med(server_cpu),
    }
    for mode, m in dcp.items():
        k = f"step_slowdown_dcp_{mode}"
        out[k] = med(m["ratio"])
        out[f"{k}_reps"] = [round(r, 3) for r in m["ratio"]]
        out[f"{k}_of_median_steps"] = med(m["of_median_steps"])
        out[f"{k}_samples"] = m.get("samples", [])
        out[f"{k}_stall_seconds"] = med(m["stall"])
        # the trainer process's CPU while DCP's save runs (its own steps included; in
        # process mode DCP's daemon process is not counted)
        out[f"{k}_cpu_seconds_trainer_process"] = med(m["cpu"])
        out[f"{k}_cpu_seconds_server_per_upload"] = med(m["server_cpu"])
    if dcp:
        best = min(dcp, key=lambda mode: med(dcp[mode]["ratio"]))
        out["step_slowdown_dcp"] = med(dcp[best]["ratio"])  # DCP's best mode in this run
        out["step_slowdown_dcp_mode"] = best
        out["step_slowdown_vs_dcp"] = med(ratios) / med(dcp[best]["ratio"])
        out["step_slowdown_dcp_writer"] = "FsspecWriter over s3fs 2026.9.0, dcp.async_save"
    return out


def _dcp_rep(arm: DcpS3Arm, rep: int, log: list[str], into: dict[str, list[Any]]) -> None:
    doc = arm.rep(ab_order(rep))
    ratio = window_ratio(doc["quiet"], doc["busy"], doc["stall"])
    for k in ("cpu", "server_cpu", "stall"):
        into[k].append(doc[k])
    into["ratio"].append(ratio)
    into["of_median_steps"].append(med(doc["busy"]) / med(doc["quiet"]))
    into.setdefault("samples", []).append(
        {
            "rep": rep,
            "stall_s": round(doc["stall"], 4),
            "steps_quiet_s": [round(x, 4) for x in doc["quiet"]],
            "steps_during_s": [round(x, 4) for x in doc["busy"]],
        }
    )
    log.append(
        f"rep {rep} DCP async_save ({arm.mode}) to S3: step quiet {med(doc['quiet']) * 1e3:.1f}"
        f" ms, during upload {med(doc['busy']) * 1e3:.1f} ms ({len(doc['busy'])} steps), ratio"
        f" {ratio:.2f}; stall {doc['stall']:.3f}s; cpu trainer process {doc['cpu']:.2f}s"
        f" server {doc['server_cpu']:.2f}s"
    )


def bench_delta(width: int, bucket: str, reps: int, log: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tier in ("weights", "full"):
        ratios = []
        for rep in range(reps):
            tr = Trainer(width, trainable=2, seed=rep)
            tr.step()
            mgr = CheckpointManager(open_store(f"s3://{bucket}/delta-{tier}-{rep}"))
            mgr.save(1, tr.state(tier), tier=tier)
            first = mgr.wait()
            tr.step()
            mgr.save(2, tr.state(tier), tier=tier)
            second = mgr.wait()
            mgr.close()
            assert first is not None and second is not None
            ratios.append(second.uploaded_bytes / first.uploaded_bytes)
            log.append(
                f"delta {tier} rep {rep}: {second.uploaded_bytes} of "
                f"{first.uploaded_bytes} bytes ({ratios[-1]:.3f})"
            )
        out[f"delta_bytes_ratio_{tier}"] = med(ratios)
    return out


def bench_contended(
    args: argparse.Namespace,
    tr: Trainer,
    server: LoopbackS3,
    bucket: str,
    work: Path,
    width: int,
    log: list[str],
) -> dict[str, Any]:
    """Durable time and step slowdown with training running (bench_durable,
    bench_step_slowdown: burst's, and DCP's with ``--dcp-s3-env``), on the cores this thread
    is pinned to."""
    assert server.proc is not None
    server.create_bucket(bucket)
    reps = max(args.reps, 5)
    res: dict[str, Any] = {"s3_server_cores": affinity(server.proc.pid)}
    res.update(bench_durable(tr, server, bucket, work, reps, log))
    arms: list[DcpS3Arm] = []
    try:
        for mode in args.dcp_modes.split(",") if args.dcp_s3_env else []:
            url = f"s3://{bucket}/dcp-{mode}"
            arms.append(DcpS3Arm(args.dcp_s3_env, width, server, url, args.train_threads, mode))
        res.update(bench_step_slowdown(tr, server, bucket, reps, log, dcp_arms=arms))
    finally:
        for arm in arms:
            arm.close()
    if args.paced_rate:
        rate = args.paced_rate * 2**20
        res.update(bench_step_slowdown(tr, server, bucket, reps, log, upload_rate=rate))
        res["paced_upload_rate_mib_s"] = args.paced_rate
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="256 MiB state, under 3 minutes")
    ap.add_argument("--smoke", action="store_true", help="a tiny state (tests of this script)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/checkpoint.json")
    ap.add_argument(
        "--paced-rate",
        type=float,
        default=64.0,
        help="also measure step_slowdown with upload_rate=N MiB/s (0: skip); a detail, the"
        " headline step_slowdown uses the default (unpaced)",
    )
    ap.add_argument(
        "--train-threads",
        type=int,
        default=1,
        help="torch threads of the training loop (default 1: on a GPU box the loop leaves the"
        " host CPU mostly idle; 1 also avoids OpenMP stalls on a shared machine)",
    )
    ap.add_argument(
        "--cores",
        type=int,
        default=1,
        help="the durable and step-slowdown figures run with the training loop, the"
        " checkpoint worker, the S3 server and DCP's arm pinned to this many cores (default"
        " 1: the upload contends for the training loop's core; 0: no pinning)",
    )
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated parts to run (idle, contended): a partial run, for profiling;"
        " its JSON has only their figures",
    )
    ap.add_argument(
        "--dcp-s3-env",
        type=Path,
        default=None,
        help="a directory holding s3fs, aiobotocore and the botocore they pin (see"
        " benchmarks/dcp_s3_arm.py): also measure step_slowdown for DCP async_save to the same"
        " S3 server, alternated with burst's (step_slowdown_dcp, step_slowdown_vs_dcp)",
    )
    ap.add_argument(
        "--dcp-modes",
        default="thread,process",
        help="DCP async_save executors for --dcp-s3-env (comma-separated: thread, process);"
        " step_slowdown_vs_dcp compares with the best of them",
    )
    args = ap.parse_args(argv)
    if args.reps < 3:
        ap.error("--reps must be at least 3 (medians of at least three)")
    torch.set_num_threads(args.train_threads)
    parts = set(args.only.split(",")) if args.only else {"idle", "contended"}
    if parts - {"idle", "contended"}:
        ap.error(f"--only: unknown part(s) {sorted(parts - {'idle', 'contended'})}")
    size = "smoke" if args.smoke else "quick" if args.quick else "full"
    width = WIDTHS[size]
    log: list[str] = Log()
    started = time.time()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="burst-bench-") as tmp:
        work = Path(tmp)
        with loopback_s3(work / "s3") as server:
            bucket = "bench"
            server.create_bucket(bucket)
            tr = Trainer(width)
            tr.step()
            state_bytes = state_nbytes(tr.state())
            print(f"state {state_bytes / 2**20:.0f} MiB, {args.reps} reps", file=sys.stderr)
            res: dict[str, Any] = {}
            if "idle" in parts:
                res.update(bench_stall_and_upload(tr, server, bucket, work, args.reps, log))
                key = res.pop("baseline_key")
                res.update(bench_restore(tr, server, bucket, args.reps, key, log))
                res.update(bench_vs_dcp(tr, bucket, work, args.reps, log))
                res.update(bench_delta(width, bucket, args.reps, log))
        if "contended" in parts:
            # What a user sees: training stepping through every save, the client side of
            # the upload (burst's worker, DCP's executor, upload_file's threads) on the
            # training loop's cores (--cores), the S3 server, which stands in for a remote
            # store, on the others.
            train_cores, server_cores = split_cores(args.cores)
            res["contended_cores"] = {"training": train_cores, "s3_server": server_cores}
            with pinned(server_cores):
                server_cm = loopback_s3(work / "s3-contended")
                server = server_cm.__enter__()
            try:
                with pinned(train_cores):
                    res.update(bench_contended(args, tr, server, bucket, work, width, log))
            finally:
                server_cm.__exit__(None, None, None)
    checks = meets_goals(res, {k: g for k, g in GOALS.items() if k in res})
    doc = {
        "benchmark": "checkpoint",
        "size": size,
        "state_bytes": state_bytes,
        **{k: round(res[k], 4) for k in GOALS if k in res},
        "goals": goals_text(GOALS),
        "meets_goals": checks,
        "server": "rclone serve s3 on 127.0.0.1 (local directory backend), same host",
        "cores": os.cpu_count(),
        "reps": args.reps,
        "train_threads": args.train_threads,
        "details": {
            k: (round(v, 4) if isinstance(v, float) else v)
            for k, v in res.items()
            if k not in GOALS
        },
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "seconds": round(time.time() - started, 1),
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "log": log,
    }
    write_results(args.out, doc)
    print(json.dumps({k: doc[k] for k in ("state_bytes", *GOALS) if k in doc}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
