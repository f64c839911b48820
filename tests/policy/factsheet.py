"""The fact sheet's fact ids, read from its YAML blocks line by line (the sheet's YAML is
not all valid YAML, so it is scanned, not parsed).

An id names one statement the sheet gives: ``SG.outbound`` (a jurisdiction's field),
``eccns.3A090.a``, ``timeline.2025-05-13``, ``country_groups_for_checker.3`` (a list item),
``regions.aws.me-central-1``, ``gpu_availability.aws``, ``preemption_notice.aws_spot``,
``strati_2024``, ``unreliable.2`` (section 5, "do NOT encode"). Its confidence is the first
``confidence:`` inside its lines (None when it gives none); a split one ("med (Decree 13) /
low (PDPL 2025)") counts as its lowest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ORDER = {"unknown": 0, "low": 1, "med": 2, "high": 3}
BLOCK = re.compile(r"```yaml\n(.*?)```", re.S)
KEY = re.compile(r"^(\s*)(?:- )?([A-Za-z0-9_.:-]+):(?:\s|$)")
CONF = re.compile(r"confidence:\s*\"?([^#\n}]*)")


@dataclass(frozen=True)
class SheetFact:
    id: str
    confidence: str | None  # lowest confidence named in its lines, None when none


def lowest(text: str) -> str | None:
    found = [w for w in re.findall(r"\b(high|med|low|unknown)\b", text)]
    return min(found, key=ORDER.__getitem__) if found else None


def _confidence(lines: list[str]) -> str | None:
    for line in lines:
        m = CONF.search(line)
        if m:
            return lowest(m.group(1))
    return None


def fact_ids(path: Path) -> dict[str, SheetFact]:
    out: dict[str, SheetFact] = {}
    for block in BLOCK.findall(path.read_text(encoding="utf-8")):
        lines = block.splitlines()
        spans: list[tuple[str, int]] = []  # (id, first line)
        top = ""
        item = ""
        counters: dict[str, int] = {}
        for i, line in enumerate(lines):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            indent = len(line) - len(line.lstrip())
            m = KEY.match(line)
            if indent == 0 and line.startswith("- jurisdiction:"):
                item = line.split(":", 1)[1].split("#")[0].strip()
                top = "jurisdiction"
                continue
            if indent == 0 and line.startswith("- "):  # section 5: unreliable sources
                counters["unreliable"] = counters.get("unreliable", 0) + 1
                spans.append((f"unreliable.{counters['unreliable']}", i))
                continue
            if indent == 0 and m:
                top = m.group(2)
                if top in ("meta",):
                    spans.append(("", i))
                elif top not in (
                    "eccns",
                    "timeline",
                    "regions",
                    "gpu_availability",
                    "preemption_notice",
                    "data_transfer_pricing",
                    "country_groups_for_checker",
                ):
                    spans.append((top, i))
                continue
            if top == "jurisdiction" and indent == 2 and m:
                # a jurisdiction's own `source:` list is where its facts come from, not a fact
                spans.append((f"{item}.{m.group(2)}" if m.group(2) != "source" else "", i))
            elif top in ("eccns", "gpu_availability", "preemption_notice") and indent == 2 and m:
                if m.group(2) not in ("source", "confidence"):
                    spans.append((f"{top}.{m.group(2)}", i))
            elif top == "data_transfer_pricing" and indent == 2 and m:
                spans.append((f"{top}.{m.group(2)}", i))
            elif top == "timeline" and line.startswith("  - date:"):
                date = line.split(":", 1)[1].strip().split()[0]
                spans.append((f"timeline.{date}", i))
            elif top == "country_groups_for_checker" and line.startswith("  - "):
                counters[top] = counters.get(top, 0) + 1
                spans.append((f"{top}.{counters[top]}", i))
            elif top == "regions" and indent == 2 and m:
                item = m.group(2)
            elif top == "regions" and "{code:" in line:
                code = line.split("code:", 1)[1].split(",")[0].strip()
                spans.append((f"regions.{item}.{code}", i))
        # a list's own trailing confidence (country_groups_for_checker) belongs to every item
        for n, (ident, start) in enumerate(spans):
            if not ident:
                continue
            end = spans[n + 1][1] if n + 1 < len(spans) else len(lines)
            conf = _confidence(lines[start:end])
            if conf is None and ident.startswith("country_groups_for_checker."):
                conf = _confidence(lines[start:])
            out[ident] = SheetFact(ident, conf)
    return out
