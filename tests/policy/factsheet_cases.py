"""Run the fact-sheet case set (tests/policy/factsheet_cases.yaml) through the real preflight:
each case is the quickstart spec with changes merged in, evaluated for one candidate against
the shipped policies (or a copy with extra sign-offs). Used by test_factsheet_cases.py and
runnable alone: ``python tests/policy/factsheet_cases.py`` prints every disagreement."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from policy_helpers import POLICIES, job_from

from burst.policy import PolicySet, evaluate, load_policies

CASES = Path(__file__).resolve().parent / "factsheet_cases.yaml"
TODAY = dt.date(2026, 11, 23)


def load_cases() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(CASES.read_text())
    return doc


class Runner:
    """Policy copies with extra sign-offs, built once per distinct set."""

    def __init__(self, doc: dict[str, Any], workdir: Path) -> None:
        self.presets: dict[str, dict[str, Any]] = doc.get("signoffs", {})
        self.workdir = workdir
        self.cache: dict[str, PolicySet] = {}

    def policies(self, extra: list[Any]) -> PolicySet:
        entries = [self.presets[e] if isinstance(e, str) else e for e in extra]
        key = json.dumps(entries, sort_keys=True, default=str)
        if key not in self.cache:
            if not entries:
                self.cache[key] = load_policies(POLICIES)
            else:
                root = self.workdir / f"p{len(self.cache)}"
                shutil.copytree(POLICIES, root)
                (root / "exceptions" / "case-signoffs.yaml").write_text(
                    yaml.safe_dump({"exceptions": entries}, sort_keys=False)
                )
                self.cache[key] = load_policies(root)
        return self.cache[key]

    def decide(self, case: dict[str, Any]) -> dict[str, Any]:
        provider, region = case["candidate"].split("/")
        over = dict(case.get("spec", {}))
        over.setdefault("compute", {})
        over["compute"] = {**over["compute"], "regions": [region], "providers": [provider]}
        job = job_from(over)
        today = case.get("today", TODAY)
        if isinstance(today, str):
            today = dt.date.fromisoformat(today)
        record = evaluate(
            job,
            self.policies(case.get("signoffs", [])),
            today=today,
            max_fact_age_days=case.get("max_fact_age_days"),
        ).to_json()
        decision: dict[str, Any] = record["decisions"][0]
        return decision


def main() -> int:
    doc = load_cases()
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner(doc, Path(tmp))
        for case in doc["cases"]:
            d = runner.decide(case)
            want = case["expect"]
            ok = d["verdict"] in (want if isinstance(want, list) else [want])
            blocking = [
                r["rule"] + (f"[{r['fact']}]" if r.get("fact") else "")
                for r in d["reasons"]
                if r["effect"] in ("deny", "review") and "waived_by" not in r
            ]
            if not ok:
                bad += 1
            print(
                f"{'OK ' if ok else 'BAD'} {case['name']}: want {want} got {d['verdict']} "
                f"{'' if ok else blocking}"
            )
    print(f"{len(doc['cases'])} cases, {bad} disagreements")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
