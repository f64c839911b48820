"""The DCP side of checkpoint.py's step-slowdown figure: PyTorch DCP ``async_save`` to S3.

Run by benchmarks/checkpoint.py as a child process (``--dcp-s3-env DIR``), never by hand. DCP
writes to S3 through fsspec: ``FsspecWriter`` (torch.distributed.checkpoint) over s3fs, the
path PyTorch offers for an object store. s3fs needs aiobotocore, which pins an older botocore
than this project's boto3 (aiobotocore 3.10.0: botocore >=1.43.115,<1.43.118), so the two
cannot share one environment: s3fs, aiobotocore and their botocore are installed into DIR

    pip install --target DIR --no-deps s3fs==2026.9.0 aiobotocore==3.10.0 \\
        botocore==1.43.117 aioitertools==0.13.0

and this process runs with DIR first on its path (the benchmark's own process keeps the
project's botocore). (AWS's s3torchconnector DCP writer was tried first: its CRT client
rejects rclone's CreateMultipartUpload reply, whose root element is InitiateMultipartUpload,
not InitiateMultipartUploadResult.)

Protocol: one JSON line on stdin per repetition, ``{"order": "AB"}`` (A: quiet steps, B:
steps during one background save, in that order); one JSON line back per repetition: the
step times of each side, the save's stall, and this process's CPU-seconds during B. An empty
line or EOF ends it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from checkpoint import Trainer
from harness import cpu_seconds
from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, required=True)
    ap.add_argument("--url", required=True, help="s3://bucket/prefix for the saves")
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--train-threads", type=int, default=1)
    ap.add_argument(
        "--mode",
        choices=("thread", "process"),
        default="thread",
        help="DCP's async executor: a thread of this process (the default), or its daemon"
        " process (needs a process group: one rank of gloo here, as under torchrun)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.train_threads)
    kind = AsyncCheckpointerType.PROCESS if args.mode == "process" else AsyncCheckpointerType.THREAD
    if args.mode == "process":
        import torch.distributed as dist

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    tr = Trainer(args.width)
    for _ in range(3):  # as many steps as the burst side's trainer has had before its reps
        tr.step()
    n = 0

    def save() -> Any:
        nonlocal n
        n += 1
        writer = FsspecWriter(f"{args.url}/{n}", sync_files=False, endpoint_url=args.endpoint)
        return dcp.async_save(tr.state(), storage_writer=writer, async_checkpointer_type=kind)

    save().result()  # warm-up: s3fs's session, DCP's planner
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            break
        order = json.loads(line)["order"]
        quiet: list[float] = []
        busy: list[float] = []
        stall = cpu = 0.0
        for side in order:
            if side == "A":
                quiet += [tr.step() for _ in range(5)]
                continue
            tr.step()  # every tensor changes: a full save
            c0 = cpu_seconds()
            t0 = time.perf_counter()
            fut = save()
            stall = time.perf_counter() - t0
            while not fut.done() or len(busy) < 2:
                busy.append(tr.step())
            fut.result()
            cpu = cpu_seconds() - c0
        print(json.dumps({"quiet": quiet, "busy": busy, "stall": stall, "cpu": cpu}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
