"""Your own training program's checkpoints: burst's directory commit and DCP adapter against
what a SkyPilot or dstack user does with a bucket (issue 26).

    python benchmarks/your_training.py --quick      # results: benchmarks/results/your_training.json

Hugging Face Trainer on a randomly initialised GPT-2 (about 250 MiB of weights plus Adam
state; built from a config), a checkpoint every N steps, the loopback S3 server:

* baseline (A): the Trainer's own save of ``checkpoint-N`` to local disk, then an upload of the
  folder with boto3 (``upload_file`` per file, in a thread: training goes on meanwhile);
* burst (B): the same saves into the checkpoint directory, committed by burst's watcher
  (``burst.program.watcher`` + the checkpoint manager: chunks, manifest-last commit), as in
  ``training.command`` mode.

Per save: ``stall`` (training blocked: the Trainer's save, from the end of the step to
``on_save``), ``durable`` (from the same point to the checkpoint being durable in the store:
the upload's end, or burst's commit). Then ``delta_bytes_ratio`` (fine-tune with all but the
last block frozen: bytes the second checkpoint uploads / its size; baseline 1.0) and
``restore_ratio`` (newest checkpoint into an empty local directory: burst's restore / a boto3
download of the folder). The same for DCP (``dcp.async_save`` of model + optimizer):
``burst.adapters.dcp_storage.BurstStorageWriter`` against DCP's ``FileSystemWriter`` to local
disk plus a boto3 upload (s3fs, for DCP's fsspec writer, pins a botocore that conflicts with
the boto3 this project uses: not installed, see the note in the results).
A and B alternate (``harness.alternate``); medians.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from harness import (
    REPO,
    alternate,
    goals_text,
    loopback_s3,
    machine_note,
    median,
    meets_goals,
    write_results,
)

GOALS = {
    "stall_ratio": ("<=", 1.05),
    "durable_ratio": ("<=", 0.8),
    "delta_bytes_ratio": ("<=", 0.3),
    "restore_ratio": ("<=", 1.0),
}
MiB = 1 << 20


def _model(layers: int, embd: int, vocab: int) -> Any:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=vocab, n_positions=64, n_embd=embd, n_layer=layers, n_head=8)
    return GPT2LMHeadModel(cfg)


class _Tokens:
    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        ids = torch.randint(0, self.vocab, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def _bucket_upload(client: Any, bucket: str, folder: Path, prefix: str) -> None:
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder)}")


def _bucket_download(client: Any, bucket: str, prefix: str, into: Path) -> int:
    n = 0
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
    for page in pages:
        for obj in page.get("Contents", []):
            target = into / obj["Key"][len(prefix) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, obj["Key"], str(target))
            n += int(obj["Size"])
    return n


def _created(store: Any, step: int) -> float:
    from burst.checkpoint import list_checkpoints, load_manifest

    for ref in list_checkpoints(store):
        if ref.step == step:
            stamp = load_manifest(store, ref).created_at
            return dt.datetime.fromisoformat(stamp).timestamp()
    return float("nan")


# -- Hugging Face Trainer --------------------------------------------------------------------


def hf_run(side: str, args: argparse.Namespace, s3: Any, freeze: bool = False) -> dict[str, Any]:
    """One Trainer run with two saves; side "A" (disk + boto3) or "B" (burst's watcher)."""
    import boto3
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from burst.checkpoint import CheckpointManager, list_checkpoints, load_manifest
    from burst.program.watcher import DirWatcher
    from burst.storage import open_store

    work = Path(tempfile.mkdtemp(prefix=f"yt-hf-{side}-"))
    out = work / "ckpt"
    out.mkdir()
    bucket = f"yt{os.getpid()}{int(time.time() * 1000) % 10**8}{side.lower()}"
    s3.create_bucket(bucket)
    client = boto3.client("s3")
    model = _model(args.layers, args.embd, args.vocab)
    if freeze:  # fine-tune: only the last block trains
        for name, p in model.named_parameters():
            p.requires_grad = name.startswith(f"transformer.h.{args.layers - 1}.")
    saves: dict[int, dict[str, float]] = {}
    uploads: list[threading.Thread] = []

    class Timer(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, a: Any, state: Any, control: Any, **kw: Any) -> None:
            time.sleep(args.step_seconds)  # the step's compute: saves minutes apart, scaled

        def on_step_end(self, a: Any, state: Any, control: Any, **kw: Any) -> None:
            saves.setdefault(state.global_step, {})["t0"] = time.time()

        def on_save(self, a: Any, state: Any, control: Any, **kw: Any) -> None:
            rec = saves[state.global_step]
            rec["stall"] = time.time() - rec["t0"]
            if side == "A":
                folder = out / f"checkpoint-{state.global_step}"

                def up(rec: dict[str, float] = rec, folder: Path = folder) -> None:
                    _bucket_upload(client, bucket, folder, f"run/{folder.name}")
                    rec["durable"] = time.time() - rec["t0"]

                t = threading.Thread(target=up)
                t.start()
                uploads.append(t)

    store = open_store(f"s3://{bucket}/run")
    mgr = watcher = None
    if side == "B":
        mgr = CheckpointManager(store, keep_full=None, chunk_size=args.chunk_mib * MiB)
        watcher = DirWatcher(out, commit=lambda snap: mgr.save(snap.step, snap.state(), "full"))
        watcher.start()
    targs = TrainingArguments(
        output_dir=str(out),
        max_steps=2 * args.save_every,
        save_steps=args.save_every,
        per_device_train_batch_size=1,
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
        logging_steps=10_000,
        learning_rate=1e-4,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(
            model=model, args=targs, train_dataset=_Tokens(args.vocab), callbacks=[Timer()]
        )
        trainer.train()
    for t in uploads:
        t.join()
    if watcher is not None and mgr is not None:
        deadline = time.time() + 600
        want = {s for s, rec in saves.items() if "stall" in rec}
        while time.time() < deadline:
            watcher.scan()
            mgr.wait()
            if {r.step for r in list_checkpoints(store)} >= want:
                break
            time.sleep(0.2)
        watcher.stop()
        mgr.close()
        missing = want - {r.step for r in list_checkpoints(store)}
        if missing:  # a ratio over checkpoints that never committed would mean nothing
            raise SystemExit(
                f"your_training: checkpoint(s) {sorted(missing)} of the {side} run were saved "
                "but never committed: no figure is written"
            )
        for step, rec in saves.items():
            if "stall" in rec:
                rec["durable"] = _created(store, step) - rec["t0"]
    steps = sorted(s for s, rec in saves.items() if "stall" in rec)
    total = sum(
        p.stat().st_size for p in (out / f"checkpoint-{steps[-1]}").rglob("*") if p.is_file()
    )
    row: dict[str, Any] = {
        "side": side,
        "steps": steps,
        "bytes": total,
        "stall_s": [round(saves[s]["stall"], 4) for s in steps],
        "durable_s": [round(saves[s]["durable"], 4) for s in steps],
    }
    if side == "B":
        refs = list_checkpoints(store)
        last = load_manifest(store, refs[-1])
        row["delta_ratio"] = round(last.stats["uploaded_bytes"] / max(1, last.total_bytes), 4)
        row["committed"] = [r.step for r in refs]
    else:
        row["delta_ratio"] = 1.0
    # restore of the newest into an empty directory
    into = work / "restore"
    t0 = time.perf_counter()
    if side == "B":
        from burst.checkpoint import restore_checkpoint
        from burst.program.snapshot import write_entry

        write_entry(restore_checkpoint(store).state, into)
    else:
        _bucket_download(client, bucket, f"run/checkpoint-{steps[-1]}", into)
    row["restore_s"] = round(time.perf_counter() - t0, 4)
    shutil.rmtree(work, ignore_errors=True)
    return row


# -- DCP -------------------------------------------------------------------------------------


def dcp_run(side: str, args: argparse.Namespace, s3: Any, freeze: bool = False) -> dict[str, Any]:
    """Two async saves of model + Adam state (the second after one more optimizer step)."""
    import boto3
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from burst.adapters.dcp_storage import BurstStorageReader, BurstStorageWriter

    work = Path(tempfile.mkdtemp(prefix=f"yt-dcp-{side}-"))
    bucket = f"yd{os.getpid()}{int(time.time() * 1000) % 10**8}{side.lower()}"
    s3.create_bucket(bucket)
    client = boto3.client("s3")
    url = f"s3://{bucket}/run"
    model = _model(args.layers, args.embd, args.vocab)
    if freeze:
        for name, p in model.named_parameters():
            p.requires_grad = name.startswith(f"transformer.h.{args.layers - 1}.")
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    data = _Tokens(args.vocab)
    writer = BurstStorageWriter(url) if side == "B" else None
    rows: list[dict[str, float]] = []

    def step(i: int) -> None:
        batch = data[i]
        out = model(input_ids=batch["input_ids"][None], labels=batch["labels"][None])
        out.loss.backward()
        opt.step()
        opt.zero_grad()

    uploaded = 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (1, 2):
            step(n)
            msd, osd = get_state_dict(model, opt)
            state = {"model": msd, "optim": osd}
            t0 = time.perf_counter()
            if writer is not None:
                fut = dcp.async_save(state, storage_writer=writer, checkpoint_id=str(n))
                stall = time.perf_counter() - t0
                fut.result()
                assert writer.last_manifest is not None
                m = writer.last_manifest
                uploaded = m.stats["uploaded_bytes"] / max(1, m.total_bytes)
            else:
                folder = work / f"step-{n}"
                fut = dcp.async_save(state, checkpoint_id=str(folder))
                stall = time.perf_counter() - t0
                fut.result()
                _bucket_upload(client, bucket, folder, f"run/step-{n}")
            rows.append({"stall": stall, "durable": time.perf_counter() - t0})
        nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        t0 = time.perf_counter()
        if side == "B":
            msd, osd = get_state_dict(model, opt)
            dcp.load({"model": msd, "optim": osd}, storage_reader=BurstStorageReader(url))
        else:
            into = work / "restore"
            _bucket_download(client, bucket, "run/step-2", into)
            msd, osd = get_state_dict(model, opt)
            dcp.load({"model": msd, "optim": osd}, checkpoint_id=str(into))
        restore = time.perf_counter() - t0
    if writer is not None:
        writer.close()
    shutil.rmtree(work, ignore_errors=True)
    return {
        "side": side,
        "model_bytes": nbytes,
        "stall_s": [round(r["stall"], 4) for r in rows],
        "durable_s": [round(r["durable"], 4) for r in rows],
        "delta_ratio": round(uploaded, 4),
        "restore_s": round(restore, 4),
    }


# -- summary ---------------------------------------------------------------------------------


def _ratios(
    a: list[dict[str, Any]], b: list[dict[str, Any]], fb: list[dict[str, Any]]
) -> dict[str, Any]:
    """Medians over repetitions (steady state: the second save of each run) and the ratios."""

    def med(rows: list[dict[str, Any]], key: str) -> float:
        return median(r[key][-1] for r in rows)

    out = {
        "baseline": {
            "stall_s": med(a, "stall_s"),
            "durable_s": med(a, "durable_s"),
            "restore_s": median(r["restore_s"] for r in a),
        },
        "burst": {
            "stall_s": med(b, "stall_s"),
            "durable_s": med(b, "durable_s"),
            "restore_s": median(r["restore_s"] for r in b),
            "delta_ratio_frozen": median(r["delta_ratio"] for r in fb),
        },
    }
    out["stall_ratio"] = round(out["burst"]["stall_s"] / out["baseline"]["stall_s"], 3)
    out["durable_ratio"] = round(out["burst"]["durable_s"] / out["baseline"]["durable_s"], 3)
    out["delta_bytes_ratio"] = round(out["burst"]["delta_ratio_frozen"], 3)
    out["restore_ratio"] = round(out["burst"]["restore_s"] / out["baseline"]["restore_s"], 3)
    out["meets"] = meets_goals(out, GOALS)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--embd", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--save-every", type=int, default=2)
    ap.add_argument(
        "--step-seconds",
        type=float,
        default=4.0,
        help="HF: each step paced to this (a real run saves minutes apart; unpaced, the tiny "
        "model's saves come faster than either side makes them durable, and burst's watcher "
        "coalesces a save superseded before it was whole into the next: no per-save figure)",
    )
    ap.add_argument("--chunk-mib", type=int, default=8, help="burst's chunk size (HF side)")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/your_training.json"))
    args = ap.parse_args()
    reps = args.reps or (2 if args.quick else 5)
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    note = machine_note()
    root = Path(tempfile.mkdtemp(prefix="yt-s3-"))
    try:
        with loopback_s3(root / "data") as s3:

            def log(name: str) -> Any:
                return lambda rep, a, b: print(
                    f"{name} rep {rep}: A {a[-1]} | B {b[-1]}", flush=True
                )

            hf_a, hf_b = alternate(
                reps, lambda: hf_run("A", args, s3), lambda: hf_run("B", args, s3),
                after_rep=log("hf"),
            )  # fmt: skip
            hf_fb = [hf_run("B", args, s3, freeze=True) for _ in range(max(1, reps // 2))]
            dcp_a, dcp_b = alternate(
                reps, lambda: dcp_run("A", args, s3), lambda: dcp_run("B", args, s3),
                after_rep=log("dcp"),
            )  # fmt: skip
            dcp_fb = [dcp_run("B", args, s3, freeze=True) for _ in range(max(1, reps // 2))]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    hf = _ratios(hf_a, hf_b, hf_fb)
    dc = _ratios(dcp_a, dcp_b, dcp_fb)
    doc = {
        "benchmark": "your_training",
        "quick": args.quick,
        "machine": note,
        "reps": reps,
        "model": {
            "layers": args.layers,
            "embd": args.embd,
            "vocab": args.vocab,
            "step_seconds": args.step_seconds,
            "checkpoint_mib": round(hf_a[-1]["bytes"] / MiB, 1),
        },
        "goals": goals_text(GOALS),
        "hf_trainer": {**hf, "runs": {"baseline": hf_a, "burst": hf_b, "burst_frozen": hf_fb}},
        "dcp": {
            **dc,
            "runs": {"baseline": dcp_a, "burst": dcp_b, "burst_frozen": dcp_fb},
            "baseline_note": (
                "DCP FileSystemWriter to local disk + boto3 upload of the folder: DCP's fsspec "
                "writer needs s3fs, whose release here pins botocore 1.43 (this project runs "
                "boto3/botocore 1.44), so it was not installed"
            ),
        },
        "definitions": {
            "stall": "training blocked per checkpoint (steady state: the second save of a run)",
            "durable": "from the save's start to the checkpoint durable in the store",
            "delta_bytes_ratio": "all but the last block frozen: 2nd checkpoint's uploaded "
            "bytes / its size (baseline uploads everything: 1.0)",
            "restore": "newest checkpoint into an empty local directory (HF) / into the "
            "model and optimizer (DCP): burst's restore vs a boto3 download",
        },
    }
    write_results(args.out, doc)
    for name, part in (("hf_trainer", hf), ("dcp", dc)):
        print(
            f"{name}: stall {part['stall_ratio']} durable {part['durable_ratio']} "
            f"delta {part['delta_bytes_ratio']} restore {part['restore_ratio']} {part['meets']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
