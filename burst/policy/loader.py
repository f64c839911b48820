"""Load and validate ``policies/``: facts (YAML), rules (Rego), exceptions, settings.

A bad file fails with ONE ``PolicyFileError`` line naming the file, the line, the entry and
the field, e.g. ``policies/regions.yaml:14: entry aws/ap-southeast-1: field country: ...``.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from burst import checkout
from burst.errors import BadInputError
from burst.inputs import parse_yaml, read_bytes, read_text, short
from burst.policy.location import ENV, policy_dir
from burst.policy.models import (
    DataClassesFile,
    ExceptionFile,
    ExportFile,
    JurisdictionsFile,
    PolicyException,
    ProvidersFile,
    RegionsFile,
    Settings,
)
from burst.yamllines import line_for, line_index

log = logging.getLogger(__name__)

FACT_FILES: dict[str, type[BaseModel]] = {
    "jurisdictions.yaml": JurisdictionsFile,
    "regions.yaml": RegionsFile,
    "providers.yaml": ProvidersFile,
    "export.yaml": ExportFile,
    "data_classes.yaml": DataClassesFile,
}
SETTINGS_FILE = "settings.yaml"
RULES_DIR = "rules"
EXCEPTIONS_DIR = "exceptions"
# What the decision depends on, and so what policy_sha256 covers. keys/ and admission/ belong
# to other steps (image verification, admission) and do not change a legal decision.
HASHED = (*FACT_FILES, SETTINGS_FILE, RULES_DIR, EXCEPTIONS_DIR)


class PolicyFileError(BadInputError):
    """A policy file that does not load or validate (exit 2)."""


@dataclass(frozen=True)
class RegoModule:
    path: Path
    text: str

    @property
    def is_test(self) -> bool:
        return self.path.name.endswith("_test.rego")


@dataclass
class PolicySet:
    root: Path
    jurisdictions: JurisdictionsFile
    regions: RegionsFile
    providers: ProvidersFile
    export: ExportFile
    data_classes: DataClassesFile
    settings: Settings
    exceptions: list[PolicyException]
    modules: list[RegoModule]
    sha256: str
    exception_files: dict[str, Path] = field(default_factory=dict)

    @property
    def rule_modules(self) -> list[RegoModule]:
        return [m for m in self.modules if not m.is_test]

    @property
    def test_modules(self) -> list[RegoModule]:
        return [m for m in self.modules if m.is_test]

    def data_document(self) -> dict[str, Any]:
        """The Rego base document: ``data.facts`` and ``data.exceptions``."""
        return {
            "facts": {
                "jurisdictions": _dump(self.jurisdictions)["jurisdictions"],
                "regions": _dump(self.regions)["providers"],
                "providers": _dump(self.providers)["providers"],
                "export": _dump(self.export),
                "data_classes": _dump(self.data_classes)["data_classes"],
                "model_updates": _dump(self.data_classes).get("model_updates") or {},
            },
            "exceptions": [_dump(e) for e in self.exceptions],
        }


def _dump(model: BaseModel) -> dict[str, Any]:
    # unset facts are left out, so a rule tests them with `not x` (a null would be true)
    return model.model_dump(mode="json", exclude_none=True)


def default_policy_dir() -> Path:
    """$BURST_POLICIES, else the checkout's policies/ (burst.policy.location)."""
    return policy_dir()


# --------------------------------------------------------------------------- hashing


def _hashed_files(root: Path) -> list[Path]:
    files: list[Path] = []
    for name in HASHED:
        p = root / name
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            files.extend(
                f
                for f in sorted(p.rglob("*"))
                if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts)
            )
    return sorted(files, key=lambda f: f.relative_to(root).as_posix())


def policy_sha256(root: str | Path) -> str:
    """SHA-256 over (relative path, content) of every file the preflight reads."""
    root = Path(root)
    h = hashlib.sha256()
    for f in _hashed_files(root):
        rel = f.relative_to(root).as_posix().encode()
        try:
            data = read_bytes(f, what="policy file")
        except BadInputError as exc:
            raise PolicyFileError(exc.message, where=_display(f)) from None
        h.update(len(rel).to_bytes(8, "big") + rel + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


# --------------------------------------------------------------------------- YAML + lines


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except (ValueError, OSError, RuntimeError):  # elsewhere; a symlink loop (3.12: RuntimeError)
        return str(path)


def _read_yaml(path: Path) -> tuple[Any, str]:
    where = _display(path)
    if not path.exists() and not path.is_symlink():
        raise PolicyFileError("policy file is missing", where=where)
    try:  # bounded: file type, size, aliases, duplicated keys, dates, numbers
        text = read_text(path, what="policy file")
        data = parse_yaml(text, where, what="policy file", shipped=checkout.is_shipped(path))
    except BadInputError as exc:
        raise PolicyFileError(exc.message, where=exc.where) from None
    if not isinstance(data, dict):
        raise PolicyFileError("a policy file must be a YAML mapping", where=f"{where}:1")
    return data, text


# Top-level keys whose children are named entries (entry = first key below them).
_ENTRY_DEPTH = {
    "jurisdictions": 1,
    "providers": 1,
    "data_classes": 1,
    "accelerator_classes": 1,
    "exceptions": 1,
}


def _entry_and_field(loc: tuple[str | int, ...], data: Any) -> tuple[str, str]:
    """Split a pydantic location into (entry, field), e.g. ('aws/ap-southeast-1', 'country')."""
    parts = [str(p) for p in loc]
    if not parts:
        return "(file)", "(file)"
    top = parts[0]
    if top == "providers" and len(parts) >= 4 and parts[2] == "regions":
        return f"{parts[1]}/{parts[3]}", ".".join(parts[4:]) or "(entry)"
    if top == "exceptions" and len(parts) >= 2 and isinstance(loc[1], int):
        items = data.get("exceptions") if isinstance(data, dict) else None
        ident = f"#{loc[1] + 1}"
        if isinstance(items, list) and loc[1] < len(items) and isinstance(items[loc[1]], dict):
            ident = str(items[loc[1]].get("id", ident))
        return ident, ".".join(parts[2:]) or "(entry)"
    if top in _ENTRY_DEPTH and len(parts) >= 2:
        return parts[1], ".".join(parts[2:]) or "(entry)"
    return top, ".".join(parts[1:]) or top


def _validate(path: Path, model: type[BaseModel]) -> Any:
    data, text = _read_yaml(path)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        # dict keys validated by a field validator come back without the key: keep what we have
        entry, fld = _entry_and_field(loc, data)
        line = line_for(line_index(text), loc, root=False)
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"] == "value_error":
            pass  # the validator's own message already names the value
        elif "input" in err and not isinstance(err["input"], dict | list):
            msg += f" (got {short(err['input'])})"
        more = len(exc.errors()) - 1
        tail = f" (+{more} more problem{'s' if more > 1 else ''} in this file)" if more else ""
        where = f"{_display(path)}:{line}" if line else _display(path)
        raise PolicyFileError(f"entry {entry}: field {fld}: {msg}{tail}", where=where) from None


# --------------------------------------------------------------------------- cross-checks


def _cross_check(ps: PolicySet) -> None:
    """References between files: region countries, localization classes, exception rules."""
    known_classes = set(ps.data_classes.data_classes)
    jpath = _display(ps.root / "jurisdictions.yaml")
    for code, j in ps.jurisdictions.jurisdictions.items():
        for loc in j.localization:
            for c in loc.classes:
                if c not in known_classes:
                    raise PolicyFileError(
                        f"entry {code}: field localization.{loc.id}.classes: unknown data class "
                        f"{c!r} (see data_classes.yaml)",
                        where=jpath,
                    )
        for c in j.important_data.classes if j.important_data else []:
            if c not in known_classes:
                raise PolicyFileError(
                    f"entry {code}: field important_data.classes: unknown data class {c!r} "
                    "(see data_classes.yaml)",
                    where=jpath,
                )
    owner: dict[str, str] = {}
    for code, j in ps.jurisdictions.jurisdictions.items():
        for country in j.countries:
            if country in owner:
                raise PolicyFileError(
                    f"entry {code}: field countries: {country} is already in {owner[country]} "
                    "(a country belongs to one jurisdiction)",
                    where=jpath,
                )
            owner[country] = code
    licence_countries = set(ps.export.destination_licence_countries)
    rpath = _display(ps.root / "regions.yaml")
    for pname, pr in ps.regions.providers.items():
        for rname, region in pr.regions.items():
            listed = region.country in licence_countries
            if region.country_groups.destination_licence != listed:
                raise PolicyFileError(
                    f"entry {pname}/{rname}: field country_groups.destination_licence: "
                    f"{str(region.country_groups.destination_licence).lower()} disagrees with "
                    f"export.yaml destination_licence_countries ({region.country} "
                    f"{'is' if listed else 'is not'} listed)",
                    where=rpath,
                )
    rule_ids = set(rule_catalog(ps))
    for exc in ps.exceptions:
        if exc.rule not in rule_ids:
            raise PolicyFileError(
                f"entry {exc.id}: field rule: no rule {exc.rule!r} in {RULES_DIR}/ "
                "(see `burst policy explain`)",
                where=_display(ps.exception_files[exc.id]),
            )


RULE_HEADER = re.compile(r"^#\s*rule:\s*([A-Z][A-Z0-9-]+)\s*$")


def rule_catalog(ps: PolicySet) -> dict[str, tuple[RegoModule, int]]:
    """Rule ids declared by ``# rule: ID`` header comments in the Rego modules."""
    found: dict[str, tuple[RegoModule, int]] = {}
    for m in ps.rule_modules:
        for i, line in enumerate(m.text.splitlines()):
            match = RULE_HEADER.match(line)
            if match:
                rid = match.group(1)
                if rid in found:
                    raise PolicyFileError(
                        f"rule {rid} is declared twice (also in {found[rid][0].path.name})",
                        where=f"{_display(m.path)}:{i + 1}",
                    )
                found[rid] = (m, i)
    return found


# --------------------------------------------------------------------------- loading


def _rego(path: Path) -> RegoModule:
    try:
        return RegoModule(path, read_text(path, what="Rego rule file"))
    except BadInputError as exc:
        raise PolicyFileError(exc.message, where=_display(path)) from None


def load_policies(root: str | Path | None = None) -> PolicySet:
    """Load and validate a policy directory. Raises PolicyFileError (exit 2)."""
    root = policy_dir(root)
    if not root.is_dir():
        raise PolicyFileError(
            f"policy directory not found (pass --policies DIR or set ${ENV})", where=str(root)
        )
    facts = {name: _validate(root / name, model) for name, model in FACT_FILES.items()}
    settings_path = root / SETTINGS_FILE
    # present but not a readable regular file (a FIFO, a directory, a dangling link): refused by
    # the bounded reader, never silently replaced by the defaults (fail closed)
    present = settings_path.exists() or settings_path.is_symlink()
    settings = _validate(settings_path, Settings) if present else Settings()

    exceptions: list[PolicyException] = []
    exception_files: dict[str, Path] = {}
    exc_dir = root / EXCEPTIONS_DIR
    if exc_dir.is_dir():
        for f in sorted([*exc_dir.glob("*.yaml"), *exc_dir.glob("*.yml")]):
            for e in _validate(f, ExceptionFile).exceptions:
                if e.id in exception_files:
                    raise PolicyFileError(
                        f"entry {e.id}: field id: exception id used twice "
                        f"(also in {exception_files[e.id].name})",
                        where=_display(f),
                    )
                exceptions.append(e)
                exception_files[e.id] = f

    rules_dir = root / RULES_DIR
    modules = [_rego(p) for p in sorted(rules_dir.glob("*.rego"))] if rules_dir.is_dir() else []
    if not any(not m.is_test for m in modules):
        raise PolicyFileError("no Rego rules (*.rego) found", where=_display(rules_dir))

    ps = PolicySet(
        root=root,
        jurisdictions=facts["jurisdictions.yaml"],
        regions=facts["regions.yaml"],
        providers=facts["providers.yaml"],
        export=facts["export.yaml"],
        data_classes=facts["data_classes.yaml"],
        settings=settings,
        exceptions=exceptions,
        modules=modules,
        sha256=policy_sha256(root),
        exception_files=exception_files,
    )
    _cross_check(ps)
    log.debug("loaded policies from %s (sha256 %s)", root, ps.sha256[:12])
    return ps
