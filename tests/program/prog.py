"""A small real training program for the fault tests of training.command (no torch: fast).

    python tests/program/prog.py MODE

It saves ``ckpt-000001.pt`` (a whole zip archive, as torch.save writes) into
``$BURST_CHECKPOINT_DIR``, waits 1.5 s (burst sees it unchanged twice and commits it), then
does what MODE says:

* ``fail``: prints two lines and exits 7;
* ``half``: starts ``ckpt-000002.pt`` and exits with half of it written (still being written);
* ``truncate``: writes ``ckpt-000002.pt`` whole, truncates it, exits 0;
* ``delete``: writes ``ckpt-000002.bin`` with its marker, deletes the file, exits 0;
* ``hang-mid-write``: writes half of ``ckpt-000002.pt``, records its pid in ``pid``, sleeps
  (the test kills it there);
* ``ignore``: ignores the notice signal and SIGTERM, sleeps;
* ``quiet``: saves nothing, sleeps 3 s, exits 0;
* ``late-hand-off``: writes ``ckpt-000002.pt`` whole under a temporary name, records its pid
  in ``pid`` (the test sends the notice then), renames it into place once the notice file is
  there (a periodic save burst first sees after the notice), and on the notice signal saves
  ``ckpt-000003.pt`` 3 s later and exits 75 (its save on the notice);
* ``resume-check``: checks ``$BURST_RESUME_FROM`` is the whole ``ckpt-000001.pt`` and exits 0.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import time
import zipfile
from pathlib import Path


def archive(step: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:  # the same bytes every time
        zf.writestr(zipfile.ZipInfo("data/step", (2026, 1, 1, 0, 0, 0)), str(step))
        weights = bytes(range(256)) * (64 * step)
        zf.writestr(zipfile.ZipInfo("data/weights", (2026, 1, 1, 0, 0, 0)), weights)
    return buf.getvalue()


def main() -> int:
    mode = sys.argv[1]
    out = Path(os.environ["BURST_CHECKPOINT_DIR"])
    if mode == "resume-check":
        got = Path(os.environ["BURST_RESUME_FROM"])
        ok = got.name == "ckpt-000001.pt" and got.read_bytes() == archive(1)
        print(f"resume from {got.name}: {'identical' if ok else 'DIFFERENT'}", flush=True)
        return 0 if ok else 9
    if mode == "quiet":
        time.sleep(3)
        return 0
    (out / "ckpt-000001.pt").write_bytes(archive(1))
    print("saved step 1", flush=True)
    time.sleep(1.5)  # burst sees it whole twice and commits it
    second = archive(2)
    if mode == "fail":
        print("loss is nan at step 2", flush=True)
        print("Traceback: ValueError: loss is nan", flush=True)
        return 7
    if mode == "half":
        with open(out / "ckpt-000002.pt", "wb") as f:
            f.write(second[: len(second) // 2])
        return 0
    if mode == "truncate":
        p = out / "ckpt-000002.pt"
        p.write_bytes(second)
        os.truncate(p, len(second) - 100)
        return 0
    if mode == "delete":
        p = out / "ckpt-000002.bin"
        p.write_bytes(second)
        (out / "ckpt-000002.bin.burst-commit").write_text("2")
        p.unlink()
        return 0
    if mode == "hang-mid-write":
        with open(out / "ckpt-000002.pt", "wb") as f:
            f.write(second[: len(second) // 2])
            f.flush()
            (out.parent / "pid").write_text(str(os.getpid()))
            time.sleep(60)
        return 0
    if mode == "late-hand-off":
        noticed: list[int] = []
        notice = signal.Signals[os.environ["BURST_NOTICE_SIGNAL"]]
        signal.signal(notice, lambda signum, frame: noticed.append(signum))
        part = out / ".ckpt-000002.part"
        part.write_bytes(second)
        (out.parent / "pid").write_text(str(os.getpid()))
        notice_file = Path(os.environ["BURST_NOTICE_FILE"])
        while not notice_file.exists():
            time.sleep(0.01)
        part.rename(out / "ckpt-000002.pt")  # written before the notice, whole only after it
        while not noticed:
            time.sleep(0.01)
        time.sleep(3)  # saving its state on the notice takes a while
        (out / "ckpt-000003.pt").write_bytes(archive(3))
        print("saved step 3 on the notice", flush=True)
        return 75
    if mode == "ignore":
        signal.signal(signal.Signals[os.environ["BURST_NOTICE_SIGNAL"]], signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        (out.parent / "pid").write_text(str(os.getpid()))
        time.sleep(60)
        return 0
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    raise SystemExit(main())
