"""Check burst's Terraform against the providers' own schemas, without the provider binaries.

    python -m devtools.schemacheck [PATH ...]        (default: terraform/)

The CDK for Terraform bindings on npm are generated from each provider's schema. Their
``.jsii`` manifest lists every resource and data source: the class's docs link names the
Terraform type and the provider version; each config property's docs link ends in
``#snake_name`` (the Terraform argument); a property without ``optional`` is required;
struct-typed properties are nested blocks; the class's other properties (and those of the
nested ``...OutputReference`` / ``...List`` classes) are the attributes a reference may read.

``PINNED`` names, per provider, the packages of the lowest and the newest provider version
the stacks' ``required_providers`` constraints admit (for which a binding exists). A package
is fetched once with ``npm pack`` into the cache directory
(``$XDG_CACHE_HOME/burst/provider-schemas``, else ``~/.cache/burst/provider-schemas``),
reduced to a compact schema there (the package is then deleted), and never committed.

Rules, per module (a directory of ``.tf`` files) and per pinned version:

``type``        the resource / data source type exists in the provider;
``argument``    every argument and nested block exists (``dynamic`` blocks included);
``required``    every required argument and block is set;
``reference``   ``TYPE.NAME.ATTR`` (and ``data.TYPE.NAME.ATTR``) reads an attribute the type
                has, nested block attributes included where the schema describes them;
``tags``        a resource whose schema takes ``tags`` (aws, azurerm) or ``labels`` (google)
                sets them, unless the module's provider block tags every resource
                (``default_tags``, ``default_labels``): the schema, not a hand-kept list,
                says which types are taggable.

Not covered: value types, conflicts between arguments, provider configuration blocks.
Types of a provider without a binding (``PINNED`` has none) are listed as unchecked.
Exit 0 when clean, 1 with one ``file:line: address: [rule] message (provider version)``
line per finding, 2 when a schema cannot be had or a file does not parse.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burst import checkout
from devtools.hclcheck import (
    HclParseError,
    Module,
    Resource,
    _line_of,
    _unq,
    modules_under,
    parse_module,
)

log = logging.getLogger(__name__)

SCHEMA_FORMAT = 1
SKIP_PROPS = frozenset({"internalValue", "fqn", "tfResourceType", "TF_RESOURCE_TYPE"})


@dataclass(frozen=True)
class Binding:
    """One npm package of provider bindings and the provider version it was generated from."""

    provider: str  # Terraform provider local name: aws, google, azurerm
    package: str
    version: str
    provider_version: str

    @property
    def label(self) -> str:
        return f"{self.provider} {self.provider_version}"

    @property
    def tarball(self) -> str:
        return f"{self.package.lstrip('@').replace('/', '-')}-{self.version}.tgz"


# Lowest and newest provider version each constraint admits that has a published binding
# (the docs links inside each package were read to find them; extraction checks it again).
PINNED: dict[str, tuple[Binding, Binding]] = {
    "aws": (
        Binding("aws", "@cdktf/provider-aws", "21.0.0", "6.0.0"),
        Binding("aws", "@cdktn/provider-aws", "25.7.0", "6.66.0"),
    ),
    "google": (
        Binding("google", "@cdktf/provider-google", "14.0.0", "6.1.0"),
        Binding("google", "@cdktf/provider-google", "16.12.1", "6.50.0"),
    ),
    "azurerm": (
        Binding("azurerm", "@cdktf/provider-azurerm", "13.0.0", "4.0.1"),
        Binding("azurerm", "@cdktn/provider-azurerm", "16.1.0", "4.73.0"),
    ),
}
META_ARGS = frozenset(
    {"count", "for_each", "depends_on", "provider", "lifecycle", "provisioner", "connection"}
)
DOCS_RE = re.compile(
    r"registry\.terraform\.io/providers/[\w-]+/([\w-]+)/([\w.]+)/docs/"
    r"(resources|data-sources)/(\w+)"
)
ANCHOR_RE = re.compile(r"docs/(?:resources|data-sources)/\w+#(\w+)")
REF_RE = re.compile(
    r"(?<![\w.])(data\.)?([a-z][a-z0-9]*_[a-z0-9_]+)\.([A-Za-z_][\w-]*)"
    r"((?:\[[^\]]*\])*)((?:\.[A-Za-z_]\w*(?:\[[^\]]*\])*)+)"
)


class SchemaUnavailable(Exception):
    """A pinned package could not be fetched or read (not a finding: exit 2)."""


# --------------------------------------------------------------------------- fetching


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "burst" / "provider-schemas"


def _npm_pack(binding: Binding, dest: Path) -> Path:
    npm = shutil.which("npm")
    if npm is None:
        raise SchemaUnavailable(f"npm is not installed: cannot fetch {binding.package}")
    dest.mkdir(parents=True, exist_ok=True)
    spec = f"{binding.package}@{binding.version}"
    log.info("fetching %s with npm pack into %s", spec, dest)
    try:
        proc = subprocess.run(
            [npm, "pack", "--silent", spec, "--pack-destination", str(dest)],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SchemaUnavailable(f"npm pack {spec}: timed out") from None
    path = dest / binding.tarball
    if proc.returncode != 0 or not path.exists():
        detail = " ".join((proc.stderr or proc.stdout).split())[:200]
        raise SchemaUnavailable(f"npm pack {spec} failed (exit {proc.returncode}): {detail}")
    return path


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


class _Extractor:
    """Reduce a package's .jsii (hundreds of MB) to {type: schema} for resources and data."""

    def __init__(self, types: dict[str, Any], binding: Binding) -> None:
        self.types = types
        self.binding = binding

    def _fqn(self, t: dict[str, Any]) -> str | None:
        if "fqn" in t:
            return str(t["fqn"])
        for key in ("collection", "union"):
            inner = t.get(key)
            if not inner:
                continue
            for sub in [*inner.get("types", []), inner.get("elementtype", {})]:
                fqn = self._fqn(sub) if sub else None
                if fqn and fqn in self.types and self.types[fqn].get("kind") == "interface":
                    return fqn
        return None

    def args(self, fqn: str, depth: int = 0) -> dict[str, Any]:
        """Config struct -> {argument: [required, nested args or None]}."""
        out: dict[str, Any] = {}
        struct = self.types.get(fqn, {})
        props = list(struct.get("properties", []))
        for base in struct.get("interfaces", []):
            if base.startswith(self.binding.package):
                props += self.types.get(base, {}).get("properties", [])
        for p in props:
            docs = json.dumps(p.get("docs", {}))
            m = ANCHOR_RE.search(docs)
            name = m.group(1) if m else _snake(p["name"])
            nested_fqn = self._fqn(p["type"])
            nested = None
            if (
                nested_fqn
                and depth < 8
                and nested_fqn.startswith(self.binding.package)
                and self.types.get(nested_fqn, {}).get("kind") == "interface"
            ):
                nested = self.args(nested_fqn, depth + 1)
            out[name] = [not p.get("optional", False), nested]
        return out

    def attrs(self, fqn: str, depth: int = 0) -> dict[str, Any]:
        """Class (resource or OutputReference) -> {attribute: nested attributes or None}."""
        out: dict[str, Any] = {}
        cls = self.types.get(fqn, {})
        names = {p["name"] for p in cls.get("properties", [])}
        for p in cls.get("properties", []):
            name = p["name"]
            if p.get("static") or name in SKIP_PROPS:
                continue
            if name.endswith("Input") and name[: -len("Input")] in names:
                continue
            nested = None
            t = p.get("type", {})
            ref = t.get("fqn", "")
            if depth < 6 and ref.startswith(self.binding.package):
                target = self.types.get(ref, {})
                if ref.endswith("List") or ref.endswith("Map"):
                    got = next((m for m in target.get("methods", []) if m["name"] == "get"), None)
                    inner = (got or {}).get("returns", {}).get("type", {}).get("fqn")
                    if inner:
                        nested = self.attrs(inner, depth + 1)
                elif target.get("kind") == "class":
                    nested = self.attrs(ref, depth + 1)
            for key in {_snake(name), _snake(re.sub(r"Attribute$", "", name))}:
                out[key] = nested
        return out

    def run(self) -> dict[str, Any]:
        resources: dict[str, Any] = {}
        data: dict[str, Any] = {}
        seen_versions: set[str] = set()
        for fqn, t in self.types.items():
            base = str(t.get("base", ""))
            if t.get("kind") != "class" or not base.endswith(
                (".TerraformResource", ".TerraformDataSource")
            ):
                continue
            m = DOCS_RE.search(t.get("docs", {}).get("summary", ""))
            if not m:
                continue
            seen_versions.add(m.group(2))
            kind, tf_type = m.group(3), m.group(4)
            params = t.get("initializer", {}).get("parameters", [])
            config = next((p["type"].get("fqn") for p in params if p["name"] == "config"), None)
            entry = {"args": self.args(config) if config else {}, "attrs": self.attrs(fqn)}
            full = (
                tf_type
                if tf_type.startswith(f"{self.binding.provider}_")
                else (f"{self.binding.provider}_{tf_type}")
            )
            (data if kind == "data-sources" else resources)[full] = entry
        if seen_versions != {self.binding.provider_version}:
            raise SchemaUnavailable(
                f"{self.binding.package}@{self.binding.version} documents provider version(s) "
                f"{', '.join(sorted(seen_versions)) or 'none'}, "
                f"not {self.binding.provider_version}"
            )
        return {
            "format": SCHEMA_FORMAT,
            "provider": self.binding.provider,
            "provider_version": self.binding.provider_version,
            "package": f"{self.binding.package}@{self.binding.version}",
            "resources": resources,
            "data_sources": data,
        }


def _read_compact(compact: Path) -> dict[str, Any] | None:
    if not compact.exists():
        return None
    try:
        with gzip.open(compact, "rt", encoding="utf-8") as fh:
            doc: dict[str, Any] = json.load(fh)
        if doc.get("format") == SCHEMA_FORMAT:
            return doc
    except (OSError, ValueError, EOFError, zlib.error):  # a torn or corrupt file: fetch again
        log.warning("ignoring a corrupt schema cache %s", compact)
    return None


def load_schema(binding: Binding, cache: Path | None = None) -> dict[str, Any]:
    """The compact schema of one pinned binding (fetched and extracted on first use).

    Test workers run in parallel and share the cache: the fetch is done under an exclusive
    lock of the binding's own (a second worker waits, then reads what the first wrote), and
    every file is written under a name of this process's before it is renamed into place."""
    import fcntl

    cache = cache or cache_dir()
    compact = cache / f"{binding.tarball}.schema.json.gz"
    doc = _read_compact(compact)
    if doc is not None:
        return doc
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{binding.tarball}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        doc = _read_compact(compact)  # another worker may have written it meanwhile
        if doc is not None:
            return doc
        return _fetch_and_extract(binding, cache, compact)


def _fetch_and_extract(binding: Binding, cache: Path, compact: Path) -> dict[str, Any]:
    tarball = cache / binding.tarball
    for fresh in (False, True):
        if fresh or not tarball.exists():
            tarball.unlink(missing_ok=True)
            tarball = _npm_pack(binding, cache)
        try:
            with tarfile.open(tarball) as tf:
                member = tf.extractfile("package/.jsii")
                if member is None:
                    raise KeyError("package/.jsii")
                raw = member.read()
            break
        except (tarfile.TarError, KeyError, OSError, EOFError) as exc:
            if fresh:
                raise SchemaUnavailable(f"{tarball}: no readable package/.jsii ({exc})") from None
            log.warning("%s is unreadable (%s): fetching it again", tarball, exc)
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    types = json.loads(raw)["types"]
    del raw
    doc = _Extractor(types, binding).run()
    tmp = compact.with_name(f"{compact.name}.{os.getpid()}.tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as fh:
        json.dump(doc, fh, separators=(",", ":"))
    tmp.replace(compact)
    tarball.unlink(missing_ok=True)  # the compact schema is all later runs need (~0.2 MB)
    return doc


# --------------------------------------------------------------------------- checking


@dataclass(frozen=True)
class Finding:
    file: Path
    line: int
    address: str
    rule: str
    message: str
    against: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: {self.address}"
        return f"{where}: [{self.rule}] {self.message} ({self.against})"


def provider_of(tf_type: str) -> str:
    return tf_type.split("_", 1)[0]


def _data_sources(mod: Module) -> list[Resource]:
    out = []
    for f, doc, text in mod.docs:
        for block in doc.get("data", []):
            for kind, named in block.items():
                for name, body in named.items():
                    k, n = _unq(kind), _unq(name)
                    line = _line_of(text, rf'data\s+"{re.escape(k)}"\s+"{re.escape(n)}"')
                    out.append(Resource(k, n, body, f, line))
    return out


def _bodies(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, dict)]
    return []


def _is_block(value: Any) -> bool:
    return any(b.get("__is_block__") for b in _bodies(value)) and not isinstance(value, str)


def _check_body(
    body: dict[str, Any], args: dict[str, Any], where: str, top: bool
) -> Iterator[tuple[str, str]]:
    """(rule, message) for unknown and missing arguments of one body and its blocks."""
    present = set()
    for key, value in body.items():
        name = _unq(key)
        if name.startswith("__") or (top and name in META_ARGS):
            continue
        if name == "dynamic":
            for dyn in _bodies(value):
                for dname, dbody in dyn.items():
                    dname = _unq(dname)
                    if dname.startswith("__"):
                        continue
                    spec = args.get(dname)
                    if spec is None or spec[1] is None:
                        yield "argument", f"{where}: unknown block {dname!r} (dynamic)"
                        continue
                    present.add(dname)
                    for b in _bodies(dbody):
                        for content in _bodies(b.get("content")):
                            yield from _check_body(content, spec[1], f"{where}.{dname}", False)
            continue
        spec = args.get(name)
        if spec is None:
            close = [a for a in args if _close(a, name)]
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            yield "argument", f"{where}: unknown argument {name!r}{hint}"
            continue
        present.add(name)
        if spec[1] is not None and _is_block(value):
            for b in _bodies(value):
                yield from _check_body(b, spec[1], f"{where}.{name}", False)
    for name, (required, _) in sorted(args.items()):
        if required and name not in present and name != "id":
            yield "required", f"{where}: required argument {name!r} is not set"


def _close(a: str, b: str) -> bool:
    if abs(len(a) - len(b)) > 2:
        return False
    import difflib

    return difflib.SequenceMatcher(None, a, b).ratio() >= 0.8


def _walk_strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k not in ("description", "error_message"):
                yield from _walk_strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk_strings(v)
    elif isinstance(node, str):
        yield node


def _segments(path: str) -> list[str]:
    return [s for s in re.split(r"(?:\[[^\]]*\])*\.", path.lstrip(".")) if s]


# Where a resource carries the run's tags, per provider: the argument the schema must have
# for the resource to be taggable, and the provider block setting that tags every resource.
TAG_ARGS = {"aws": ("tags", "default_tags"), "google": ("labels", "default_labels"),
            "azurerm": ("tags", None)}  # fmt: skip


def _providers_with_default_tags(mod: Module) -> set[str]:
    found = set()
    for _, doc, _ in mod.docs:
        for block in doc.get("provider", []):
            for name, body in block.items():
                name = _unq(name)
                spec = TAG_ARGS.get(name)
                if spec and spec[1] and isinstance(body, dict) and spec[1] in body:
                    found.add(name)
    return found


def _untagged(r: Resource, args: dict[str, Any], default_tags: set[str]) -> str | None:
    """``tags``: a resource whose schema takes tags (labels) sets them, unless its provider
    block tags every resource (``default_tags``, ``default_labels``)."""
    provider = provider_of(r.kind)
    spec = TAG_ARGS.get(provider)
    if spec is None or spec[0] not in args or provider in default_tags:
        return None
    if spec[0] in r.body:
        return None
    return f"{r.kind} takes {spec[0]} but sets none: give it the run's tags"


def check_module(mod: Module, schemas: dict[str, dict[str, Any]]) -> tuple[list[Finding], set[str]]:
    """Findings of one module against one schema per provider; and the types left unchecked."""
    findings: list[Finding] = []
    unchecked: set[str] = set()
    declared: dict[tuple[bool, str, str], str] = {}
    default_labels = _providers_with_default_tags(mod)
    items = [(False, r) for r in mod.resources] + [(True, d) for d in _data_sources(mod)]
    for is_data, r in items:
        if r.kind == "terraform_data":
            continue
        schema = schemas.get(provider_of(r.kind))
        if schema is None:
            unchecked.add(r.kind)
            continue
        against = f"{schema['provider']} {schema['provider_version']}"
        table = schema["data_sources" if is_data else "resources"]
        address = f"{'data.' if is_data else ''}{r.kind}.{r.name}"
        declared[(is_data, r.kind, r.name)] = r.kind
        entry = table.get(r.kind)
        if entry is None:
            findings.append(
                Finding(r.file, r.line, address, "type", f"unknown type {r.kind!r}", against)
            )
            continue
        for rule, message in _check_body(r.body, entry["args"], r.kind, True):
            findings.append(Finding(r.file, r.line, address, rule, message, against))
        if not is_data:
            missing_tags = _untagged(r, entry["args"], default_labels)
            if missing_tags:
                findings.append(Finding(r.file, r.line, address, "tags", missing_tags, against))
    for f, doc, text in mod.docs:
        for value in _walk_strings(doc):
            for m in REF_RE.finditer(value):
                is_data, kind, name = bool(m.group(1)), m.group(2), m.group(3)
                if (is_data, kind, name) not in declared:
                    continue
                schema = schemas[provider_of(kind)]
                table = schema["data_sources" if is_data else "resources"]
                entry = table.get(kind)
                if entry is None:
                    continue
                tree: dict[str, Any] | None = entry["attrs"]
                for seg in _segments(m.group(5)):
                    if tree is None:
                        break
                    if seg not in tree:
                        ref = m.group(0)
                        findings.append(
                            Finding(
                                f,
                                _line_of(text, re.escape(ref)),
                                ref,
                                "reference",
                                f"{kind} has no attribute {seg!r}",
                                f"{schema['provider']} {schema['provider_version']}",
                            )
                        )
                        break
                    tree = tree[seg]
    return findings, unchecked


def check_paths(
    paths: Iterable[Path], which: str = "both", cache: Path | None = None
) -> tuple[list[Finding], set[str]]:
    """Every module under ``paths`` against the lowest and/or newest pinned schemas."""
    modules = [parse_module(d, files) for d, files in modules_under(paths)]
    wanted = {
        provider_of(r.kind)
        for m in modules
        for r in [*m.resources, *_data_sources(m)]
        if provider_of(r.kind) in PINNED
    }
    picks = {"lowest": (0,), "newest": (1,), "both": (0, 1)}[which]
    findings: list[Finding] = []
    unchecked: set[str] = set()
    for i in picks:
        schemas = {p: load_schema(PINNED[p][i], cache) for p in sorted(wanted)}
        for mod in modules:
            found, left = check_module(mod, schemas)
            findings.extend(found)
            unchecked |= left
    return findings, unchecked


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="schemacheck: %(message)s")
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args] or [checkout.TERRAFORM]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        sys.stderr.write(f"schemacheck: no such path: {', '.join(missing)}\n")
        return 2
    try:
        findings, unchecked = check_paths(paths)
    except (HclParseError, SchemaUnavailable) as exc:
        sys.stderr.write(f"schemacheck: {exc}\n")
        return 2
    for finding in findings:
        sys.stderr.write(f"{finding}\n")
    if unchecked:
        sys.stderr.write(
            "schemacheck: no published schema for "
            + ", ".join(sorted(unchecked))
            + ": static checks only\n"
        )
    sys.stderr.write(f"schemacheck: {len(findings)} finding(s)\n")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
