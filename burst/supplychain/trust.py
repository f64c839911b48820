"""The trust policy: which public keys may sign which repositories.

``policies/keys/trust.yaml``::

    version: 1
    keys:                       # every trusted key, by name; a .pub file not listed is ignored
      burst-dev:
        file: burst-dev.pub     # PEM, ECDSA P-256 (cosign.pub format), relative to this file
        description: ...
    rules:                      # a repository matches the first rule whose pattern matches
      - name: local-development
        repositories: ["burst.local/*", "localhost:*/*"]   # fnmatch: * also matches "/"
        keys: [burst-dev]

A repository that no rule covers is refused, as is a key the rule does not list (fail closed).
The directory is an explicit one (``--keys-dir``), else ``<policies>/keys`` where
``<policies>`` is ``$BURST_POLICIES``, else the checkout's ``policies/``: the one resolution
order of ``burst.policy.location``, shared with the legal preflight.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from burst.errors import BadInputError, PolicyRefusal
from burst.inputs import load_yaml_file
from burst.policy.location import keys_dir, policy_dir
from burst.supplychain.reference import normalise_repository
from burst.supplychain.signature import fingerprint, load_public_key

TRUST_FILE = "trust.yaml"
KEY_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")


def policies_dir() -> Path:
    """The policy directory (``burst.policy.location.policy_dir``): gpu-requirements.yaml."""
    return policy_dir()


@dataclass(frozen=True)
class TrustedKey:
    name: str
    path: Path
    key: ec.EllipticCurvePublicKey
    description: str = ""

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)


@dataclass(frozen=True)
class TrustRule:
    name: str
    repositories: tuple[str, ...]
    keys: tuple[str, ...]

    def matches(self, repository: str) -> str | None:
        """The first pattern that matches ``repository`` (normalised), or None."""
        for pattern in self.repositories:
            if fnmatch.fnmatchcase(repository, pattern):
                return pattern
        return None


@dataclass(frozen=True)
class TrustPolicy:
    source: Path
    keys: dict[str, TrustedKey]
    rules: tuple[TrustRule, ...] = field(default_factory=tuple)

    def rule_for(self, repository: str) -> tuple[TrustRule, str]:
        repo = normalise_repository(repository)
        for rule in self.rules:
            pattern = rule.matches(repo)
            if pattern is not None:
                return rule, pattern
        raise PolicyRefusal(
            f"no trust rule in {self.source} covers repository {repo}: no key may sign it "
            "(add a rule with the keys allowed to sign it)"
        )

    def key_for(self, repository: str, key_name: str) -> tuple[TrustedKey, TrustRule, str]:
        """The trusted key ``key_name`` if the policy lets it sign ``repository``."""
        if key_name not in self.keys:
            raise PolicyRefusal(
                f"key {key_name!r} is not a trusted key in {self.source} "
                f"(trusted: {', '.join(sorted(self.keys)) or 'none'})"
            )
        rule, pattern = self.rule_for(repository)
        if key_name not in rule.keys:
            raise PolicyRefusal(
                f"key {key_name!r} may not sign repository {normalise_repository(repository)}: "
                f"rule {rule.name!r} ({pattern}) allows only {', '.join(rule.keys)}"
            )
        return self.keys[key_name], rule, pattern


def load_trust(directory: Path | None = None) -> TrustPolicy:
    """Load and check ``trust.yaml`` and every key it names; BadInputError on any defect."""
    base = directory or keys_dir()
    path = base / TRUST_FILE
    if not path.exists() and not path.is_symlink():
        raise BadInputError(f"trust policy {path} not found (no key is trusted)")
    doc = load_yaml_file(path, what="trust policy")  # bounded: file type, size, aliases, keys
    if not isinstance(doc, dict):
        raise BadInputError("must be a mapping with keys: and rules:", where=str(path))
    if doc.get("version") != 1:
        raise BadInputError("version: must be 1", where=str(path))
    unknown = set(doc) - {"version", "keys", "rules"}
    if unknown:
        raise BadInputError(f"unknown field(s) {sorted(unknown)}", where=str(path))
    keys = {name: _load_key(path, base, name, entry) for name, entry in _mapping(doc, "keys", path)}
    rules = tuple(_rule(path, i, entry, keys) for i, entry in enumerate(_list(doc, "rules", path)))
    return TrustPolicy(path, keys, rules)


def _mapping(doc: dict[str, Any], key: str, path: Path) -> list[tuple[str, Any]]:
    value = doc.get(key)
    if not isinstance(value, dict) or not value:
        raise BadInputError(f"{key}: must be a non-empty mapping", where=str(path))
    return list(value.items())


def _list(doc: dict[str, Any], key: str, path: Path) -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list) or not value:
        raise BadInputError(f"{key}: must be a non-empty list", where=str(path))
    return value


def _load_key(path: Path, base: Path, name: Any, entry: Any) -> TrustedKey:
    where = f"{path}: keys.{name}"
    if not isinstance(name, str) or not name or not set(name) <= KEY_NAME_CHARS:
        raise BadInputError("key names are lowercase letters, digits, '-', '_', '.'", where=where)
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
        raise BadInputError("must be a mapping with file: <name>.pub", where=where)
    try:
        key_path, inside = (base / entry["file"]).resolve(), base.resolve()
    except (OSError, RuntimeError):  # a symlink loop (3.12: RuntimeError)
        raise BadInputError(f"file {entry['file']!r}: a symlink loop", where=where) from None
    if inside not in key_path.parents:
        raise BadInputError(f"file {entry['file']!r} must be inside {base}", where=where)
    try:
        key = load_public_key(key_path, name)
    except BadInputError as exc:
        raise BadInputError(exc.message, where=where) from None
    return TrustedKey(name, key_path, key, str(entry.get("description", "")))


def _rule(path: Path, i: int, entry: Any, keys: dict[str, TrustedKey]) -> TrustRule:
    where = f"{path}: rules[{i}]"
    if not isinstance(entry, dict):
        raise BadInputError("must be a mapping (name, repositories, keys)", where=where)
    name = entry.get("name", f"rules[{i}]")
    repos = entry.get("repositories")
    rule_keys = entry.get("keys")
    if not isinstance(repos, list) or not repos or not all(isinstance(r, str) for r in repos):
        raise BadInputError("repositories: must be a non-empty list of patterns", where=where)
    if not isinstance(rule_keys, list) or not rule_keys:
        raise BadInputError("keys: must be a non-empty list of key names", where=where)
    for k in rule_keys:
        if k not in keys:
            raise BadInputError(f"keys: {k!r} is not defined under keys:", where=where)
    return TrustRule(str(name), tuple(repos), tuple(rule_keys))
