"""``burst policy explain RULE``: a rule's header, its Rego, and the facts it rests on.

Each rule in ``policies/rules/*.rego`` starts with a header comment:

    # rule: XFER-NO-SAFEGUARD
    # effect: deny
    # summary: personal data leaves its origin without a transfer safeguard ...
    # facts: jurisdictions.*.outbound
"""

from __future__ import annotations

from typing import Any

from burst.policy.loader import PolicySet, _display, rule_catalog


def _header(lines: list[str], start: int) -> tuple[dict[str, str], int]:
    fields: dict[str, str] = {}
    i = start
    while i < len(lines) and lines[i].startswith("#"):
        key, _, value = lines[i].lstrip("#").strip().partition(":")
        if value:
            fields[key.strip()] = value.strip()
        i += 1
    return fields, i


def _body(lines: list[str], start: int) -> list[str]:
    out: list[str] = []
    for line in lines[start:]:
        out.append(line)
        if line.rstrip() == "}":
            break
    return out


def _walk(node: Any, parts: list[str], path: str) -> list[tuple[str, dict[str, Any]]]:
    if not parts:
        if isinstance(node, dict) and "confidence" in node:
            return [(path, node)]
        if isinstance(node, list):
            return [
                (f"{path}.{item.get('id', i)}", item)
                for i, item in enumerate(node)
                if isinstance(item, dict) and "confidence" in item
            ]
        return []
    head, rest = parts[0], parts[1:]
    if not isinstance(node, dict):
        return []
    keys = list(node) if head == "*" else [head] if head in node else []
    found: list[tuple[str, dict[str, Any]]] = []
    for k in keys:
        found.extend(_walk(node[k], rest, f"{path}.{k}" if path else k))
    return found


def facts_for(ps: PolicySet, patterns: str) -> list[str]:
    facts = ps.data_document()["facts"]
    lines = []
    for pattern in (p.strip() for p in patterns.split(",") if p.strip()):
        for path, fact in _walk(facts, pattern.split("."), ""):
            parts = path.split(".")
            if parts[0] == "regions" and len(parts) > 3 and parts[2] == "regions":
                path = ".".join(parts[:2] + parts[3:])  # as the rules cite it: regions.P.R.x
            src = fact.get("source") or ["(no source in the fact sheet)"]
            lines.append(
                f"  {path}: confidence {fact['confidence']}, "
                f"last verified {fact['last_verified']}, source {src[0]}"
            )
    return lines


def list_rules(ps: PolicySet) -> list[str]:
    out = []
    for rid, (module, start) in sorted(rule_catalog(ps).items()):
        fields, _ = _header(module.text.splitlines(), start)
        out.append(f"{rid:<26} {fields.get('effect', '?'):<10} {fields.get('summary', '')}")
    return out


def explain_rule(ps: PolicySet, rule_id: str) -> str | None:
    catalog = rule_catalog(ps)
    if rule_id not in catalog:
        return None
    module, start = catalog[rule_id]
    lines = module.text.splitlines()
    fields, body_start = _header(lines, start)
    text = [
        f"rule:    {rule_id}",
        f"effect:  {fields.get('effect', '?')}",
        f"summary: {fields.get('summary', '')}",
        f"defined: {_display(module.path)}:{start + 1}",
    ]
    fact_lines = facts_for(ps, fields.get("facts", ""))
    if fact_lines:
        text.append(f"facts ({len(fact_lines)}):")
        text.extend(fact_lines)
    text.append("rego:")
    text.extend(f"  {ln}" for ln in _body(lines, body_start))
    return "\n".join(text)
