"""Two real processes race for the last of a team's budget: exactly one is admitted, on a
local ledger and on the loopback S3 server (rclone serve s3, which ignores conditional PUT
headers: the team lock's write-settle-read-back decides)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from burst.admission.ledger import Ledger
from burst.storage.loopback import LoopbackS3

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RACER = Path(__file__).with_name("racer.py")
BUDGET = "teams:\n  ml-research:\n    day: {usd: 100}\n"


def race(url: str, tmp_path: Path, settle_s: str) -> list[subprocess.CompletedProcess[str]]:
    Ledger.open(url).set_teams(BUDGET, "teams.yaml")
    spec = REPO / "examples" / "quickstart.yaml"
    price = str(60 / 24)  # the quickstart's 24 budget hours: $60 each, one fits in $100
    go = tmp_path / "go"
    env = {**os.environ, "BURST_LEASE_SETTLE_S": settle_s}
    procs = []
    for name in ("racer-a", "racer-b"):
        argv = [sys.executable, str(RACER), url, str(spec), name, price]
        argv += [str(tmp_path / f"{name}.ready"), str(go)]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
    end = time.monotonic() + 120
    while not all((tmp_path / f"{n}.ready").exists() for n in ("racer-a", "racer-b")):
        assert time.monotonic() < end and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.write_text("go")  # both released at once
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, ""))
    return out


def check(url: str, results: list[subprocess.CompletedProcess[str]]) -> None:
    codes = sorted(r.returncode for r in results)
    assert codes == [0, 3], [(r.returncode, r.stdout) for r in results]
    refused = next(r for r in results if r.returncode == 3).stdout.strip()
    assert refused.startswith("team ml-research: day budget has $40.00 of $100.00 left")
    states = sorted(e.state for e in Ledger.open(url).entries("ml-research"))
    assert states == ["admitted", "refused"]


def test_two_processes_race_for_the_last_of_a_budget_local(tmp_path: Path) -> None:
    url = (tmp_path / "ledger").as_uri()
    check(url, race(url, tmp_path, "0.2"))


def test_two_processes_race_for_the_last_of_a_budget_on_loopback_s3(
    s3_server: LoopbackS3, s3_bucket: str, tmp_path: Path
) -> None:
    url = f"s3://{s3_bucket}/burst/ledger"
    check(url, race(url, tmp_path, "0.5"))
