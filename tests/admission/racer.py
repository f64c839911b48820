"""One contender of the admission race (tests/admission/test_race.py), a real process:
``racer.py LEDGER_URL SPEC RUN_ID PRICE READY_FILE GO_FILE``. It imports everything, says it is
ready, waits for the go, then admits once: exit 0 admitted, 3 refused (its line on stdout)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from burst.admission.admit import BudgetRefused, admit
from burst.admission.ledger import Ledger
from burst.documents.plan import Candidate
from burst.spec import load_spec


def main(argv: list[str]) -> int:
    url, spec, run_id, price, ready, go = argv
    ledger = Ledger.open(url)
    job = load_spec(Path(spec))
    cand = Candidate(region="ap-southeast-1", provider="aws", price_per_hour=float(price), gpus=8)
    Path(ready).write_text("ready")
    while not Path(go).exists():
        time.sleep(0.002)
    try:
        entry = admit(ledger, job, run_id, [cand])
    except BudgetRefused as exc:
        print(exc.one_line())
        return exc.exit_code
    print(f"admitted {entry.reserved_usd}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
