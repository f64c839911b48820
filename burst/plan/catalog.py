"""The planning catalog: data files of facts, each ``{value, source, date}``.

The default catalog ships in ``burst/plan/catalog/default.yaml``. User files (``$BURST_CATALOG``,
several separated by ``os.pathsep``, then ``--catalog FILE`` options, later files winning)
override any fact: mapping sections merge per key and per field, list sections (``regions``,
``offers``, ``shapes``) merge per identity (provider, region[, gpu_type[, instance]]). Every
problem is one line naming the file, the entry and the field (``BadInputError``, exit 2).

An offer is how a provider sells a GPU type in a region: instances of ``gpus_per_instance``
GPUs, every GPU of an instance billed. ``shapes`` lists smaller instances of the same offer
(a 1-GPU preset beside the 8-GPU node): the planner rents the smallest that holds a job
(``burst.plan.billing``); everything but the price (availability, MTBF, notice, supply) is
the offer's.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burst import checkout
from burst.errors import BadInputError
from burst.inputs import parse_yaml, read_text, short
from burst.yamllines import line_for, line_index

log = logging.getLogger(__name__)

DEFAULT_CATALOG = Path(__file__).with_name("catalog") / "default.yaml"
ENV_VAR = "BURST_CATALOG"
DATE_RE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")
AVAILABILITY = ("available", "unknown", "unavailable")
LINK_CLASSES = ("same_az", "cross_az", "cross_region", "cross_continent")

# A checker returns an error text or None. ``nullable`` facts may have value null (unknown).
Check = Callable[[Any], str | None]


NUMBER_MAX = 1e12  # no catalog figure (prices, hours, GB, Gbit/s) is larger


def _number(lo: float, lo_open: bool = False, hi: float | None = None) -> Check:
    top = NUMBER_MAX if hi is None else hi

    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int | float):
            return f"must be a number (got {short(v)})"
        if not math.isfinite(v):
            return f"must be a finite number (got {short(v)})"
        if v < lo or (lo_open and v == lo):
            return f"must be {'>' if lo_open else '>='} {lo} (got {short(v)})"
        if v > top:
            return f"must be <= {top:g} (got {short(v)})"
        return None

    return check


def _text(v: Any) -> str | None:
    return (
        None if isinstance(v, str) and v.strip() else f"must be a non-empty string (got {short(v)})"
    )


def _availability(v: Any) -> str | None:
    if isinstance(v, str) and v in AVAILABILITY:
        return None
    return f"must be one of {', '.join(AVAILABILITY)} (got {short(v)})"


NONNEG = _number(0)
POSITIVE = _number(0, lo_open=True)

# field -> (check, nullable, required)
FactSchema = dict[str, tuple[Check, bool, bool]]
ASSUMPTIONS: FactSchema = {
    "mfu": (_number(0, True, 1), False, True),
    "checkpoint_bytes_per_param": (POSITIVE, False, True),
    "host_copy_gb_per_s": (POSITIVE, False, True),
    "upload_gb_per_s": (POSITIVE, False, True),
    "startup_s": (NONNEG, False, True),
    "restart_s": (NONNEG, False, True),
    "orchestration_usd": (NONNEG, False, True),
    "labour_usd": (NONNEG, False, True),
    "on_demand_node_mtbf_hours": (POSITIVE, False, True),
    "sync_bytes_per_param": (POSITIVE, False, True),
}
GPU: FactSchema = {
    "peak_tflops": (POSITIVE, True, True),
    # a GPU no offer lists (Rubin): the price the seeds quote, per GPU-hour, used only when
    # no offer anywhere in the catalog prices this GPU type (price_basis "reference")
    "reference_spot_usd_per_gpu_hour": (NONNEG, True, False),
    "reference_on_demand_usd_per_gpu_hour": (NONNEG, True, False),
}
PROVIDER: FactSchema = {
    "notice_s": (NONNEG, True, True),
    "spot_node_mtbf_hours": (POSITIVE, True, True),
    "inter_region_usd_per_gb": (NONNEG, True, True),
    "cross_az_usd_per_gb": (NONNEG, True, True),
    "storage_usd_per_gb_month": (NONNEG, True, True),
}
REGION: FactSchema = {"area": (_text, False, True)}
OFFER: FactSchema = {
    "on_demand_usd_per_hour": (NONNEG, True, True),
    "spot_usd_per_hour": (NONNEG, True, True),
    "availability": (_availability, False, True),
    "spot_node_mtbf_hours": (POSITIVE, True, False),
    "notice_s": (NONNEG, True, False),
    "max_gpus": (_number(1), True, False),  # the region can supply at most this many GPUs
    "max_gpus_per_zone": (_number(1), True, False),
}
LINK: FactSchema = {
    "gb_per_s": (POSITIVE, False, True),
    "latency_ms": (NONNEG, False, True),
    "usd_per_gb": (NONNEG, False, True),
}
OFFER_PLAIN = {"instance": _text, "gpus_per_instance": _number(1)}
#: a smaller instance of an offer: its GPUs and its prices (the rest is the offer's)
SHAPE: FactSchema = {
    "on_demand_usd_per_hour": (NONNEG, True, True),
    "spot_usd_per_hour": (NONNEG, True, True),
}
SHAPE_PLAIN = {"gpus_per_instance": _number(1)}
SHAPE_PRICES = tuple(SHAPE)
SECTIONS = (
    "catalog_version",
    "sources",
    "assumptions",
    "gpus",
    "providers",
    "regions",
    "offers",
    "shapes",
    "links",
)


@dataclass(frozen=True)
class Fact:
    """One catalog value with where it came from. ``value`` None means unknown."""

    value: Any
    source: str
    date: str
    file: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "date": self.date}


@dataclass(frozen=True)
class Offer:
    provider: str
    region: str
    gpu_type: str
    instance: str
    gpus_per_instance: int
    facts: dict[str, Fact]

    def fact(self, name: str) -> Fact | None:
        return self.facts.get(name)


@dataclass
class Catalog:
    files: list[str]
    sources: dict[str, str] = field(default_factory=dict)
    assumptions: dict[str, Fact] = field(default_factory=dict)
    gpus: dict[str, dict[str, Fact]] = field(default_factory=dict)
    providers: dict[str, dict[str, Fact]] = field(default_factory=dict)
    regions: dict[tuple[str, str], dict[str, Fact]] = field(default_factory=dict)
    offers: dict[tuple[str, str, str], Offer] = field(default_factory=dict)
    # smaller instances of an offer: (provider, region, gpu_type, instance) -> its GPUs and
    # price facts (``shapes_of`` merges them with the offer's other facts)
    shapes: dict[tuple[str, str, str, str], tuple[int, dict[str, Fact]]] = field(
        default_factory=dict
    )
    links: dict[str, dict[str, Fact]] = field(default_factory=dict)
    shape_files: dict[tuple[str, str, str, str], tuple[str, str]] = field(default_factory=dict)

    def assumption(self, name: str) -> float:
        return float(self.assumptions[name].value)

    def provider_fact(self, provider: str, name: str) -> Fact | None:
        return self.providers.get(provider, {}).get(name)

    def area(self, provider: str, region: str) -> str | None:
        entry = self.regions.get((provider, region))
        return None if entry is None else str(entry["area"].value)

    def offer(self, provider: str, region: str, gpu_type: str) -> Offer | None:
        return self.offers.get((provider, region, gpu_type))

    def shapes_of(self, provider: str, region: str, gpu_type: str) -> list[Offer]:
        """Every instance the site sells the GPU type as, fewest GPUs first: the offer and its
        smaller ``shapes`` (each with the offer's facts but its own prices); [] without an
        offer."""
        offer = self.offer(provider, region, gpu_type)
        if offer is None:
            return []
        out = [offer]
        for (p, r, g, instance), (gpus, prices) in self.shapes.items():
            if (p, r, g) == (provider, region, gpu_type):
                facts = {**offer.facts, **prices}
                out.append(Offer(p, r, g, instance, gpus, facts))
        return sorted(out, key=lambda o: (o.gpus_per_instance, o.instance))

    def link(self, cls: str) -> dict[str, float]:
        return {k: float(f.value) for k, f in self.links[cls].items()}

    def gpu_fact(self, gpu_type: str, name: str) -> Fact | None:
        return self.gpus.get(gpu_type, {}).get(name)

    def highest_known_on_demand(self, gpu_type: str) -> tuple[float, Offer] | None:
        """The highest on-demand price per GPU-hour known for a GPU type, and its offer."""
        best: tuple[float, Offer] | None = None
        sites = [o for o in self.offers.values() if o.gpu_type == gpu_type]
        for off in (s for o in sites for s in self.shapes_of(o.provider, o.region, gpu_type)):
            price = off.facts["on_demand_usd_per_hour"].value
            if off.gpu_type != gpu_type or price is None:
                continue
            per_gpu = float(price) / off.gpus_per_instance
            if best is None or per_gpu > best[0]:
                best = (per_gpu, off)
        return best


# --------------------------------------------------------------------------- parsing


class _Reader:
    """Validates one file's raw document; every error names file, entry and field."""

    def __init__(self, path: str, text: str = "") -> None:
        self.path = path
        self.text = text

    def fail(self, entry: str, fld: str | None, problem: str) -> BadInputError:
        where = f"{entry}: {fld}" if fld else entry
        return BadInputError(f"{where}: {problem}", where=self._at(entry, fld, problem))

    def _at(self, entry: str, fld: str | None, problem: str) -> str:
        """``file:LINE`` of the entry's field (its value or date when the problem is there)."""
        if not self.text:
            return self.path
        path: list[str | int] = []
        for part in entry.split(" ", 1)[0].split("."):
            name, _, index = part.partition("[")
            path.append(name)
            if index.rstrip("]").isdigit():
                path.append(int(index.rstrip("]")))
        if fld:
            path.append(fld)
            sub = problem.split(" ", 1)[0]
            if sub in ("value", "date", "source"):
                path.append(sub)
        line = line_for(line_index(self.text), tuple(path), root=False)
        return f"{self.path}:{line}" if line else self.path

    def fact(self, entry: str, name: str, raw: Any, check: Check, nullable: bool) -> Fact:
        if not isinstance(raw, dict):
            raise self.fail(entry, name, "must be a mapping {value, source, date}")
        extra = set(raw) - {"value", "source", "date"}
        if extra:
            raise self.fail(
                entry,
                name,
                f"unknown key(s) {', '.join(sorted(map(str, extra)))}"
                " (a fact has value, source, date)",
            )
        for key in ("value", "source", "date"):
            if key not in raw:
                raise self.fail(
                    entry, name, f"missing '{key}' (every value needs a source and a date)"
                )
        value = raw["value"]
        if value is None:
            if not nullable:
                raise self.fail(entry, name, "value must be known here (null is not allowed)")
        else:
            problem = check(value)
            if problem:
                raise self.fail(entry, name, f"value {problem}")
        source = raw["source"]
        if not isinstance(source, str) or not source.strip():
            raise self.fail(entry, name, "source must be a non-empty string")
        date = raw["date"]
        if isinstance(date, dt.date):
            date = date.isoformat()
        date = str(date)
        if not DATE_RE.match(date):
            raise self.fail(
                entry, name, f"date must be YYYY, YYYY-MM or YYYY-MM-DD (got {short(date)})"
            )
        return Fact(value, source, date, self.path)

    def facts(
        self, entry: str, raw: Any, schema: FactSchema, plain: Iterable[str] = ()
    ) -> dict[str, Fact]:
        if not isinstance(raw, dict):
            raise self.fail(entry, None, "must be a mapping of fields")
        out: dict[str, Fact] = {}
        for name, value in raw.items():
            if name in plain:
                continue
            if name not in schema:
                known = ", ".join(sorted([*schema, *plain]))
                raise self.fail(entry, str(name), f"unknown field (known: {known})")
            check, nullable, _ = schema[name]
            out[name] = self.fact(entry, name, value, check, nullable)
        return out

    def named(
        self, section: str, raw: Any, schema: FactSchema, names: Iterable[str] | None = None
    ) -> dict[str, dict[str, Fact]]:
        if not isinstance(raw, dict):
            raise self.fail(section, None, "must be a mapping of names to entries")
        out = {}
        for name, body in raw.items():
            if names is not None and name not in names:
                raise self.fail(
                    f"{section}.{name}", None, f"unknown entry (known: {', '.join(names)})"
                )
            out[str(name)] = self.facts(f"{section}.{name}", body, schema)
        return out

    def keyed(
        self,
        section: str,
        raw: Any,
        keys: tuple[str, ...],
        schema: FactSchema,
        plain: dict[str, Check] | None = None,
    ) -> list[tuple[tuple[str, ...], str, dict]]:
        """A list section: returns (identity, entry label, {facts..., plain...}) per item."""
        plain = plain or {}
        if not isinstance(raw, list):
            raise self.fail(section, None, "must be a list of entries")
        out = []
        for i, item in enumerate(raw):
            label = f"{section}[{i}]"
            if not isinstance(item, dict):
                raise self.fail(label, None, "must be a mapping")
            ident = []
            for k in keys:
                v = item.get(k)
                if not isinstance(v, str) or not v.strip():
                    raise self.fail(label, k, "required (a non-empty string)")
                ident.append(v)
            label = f"{section}[{i}] {'/'.join(ident)}"
            body = {k: v for k, v in item.items() if k not in keys}
            facts: dict[str, Any] = self.facts(label, body, schema, plain)
            for name, check in plain.items():
                if name in body:
                    problem = check(body[name])
                    if problem:
                        raise self.fail(label, name, problem)
                    facts[name] = body[name]
            out.append((tuple(ident), label, facts))
        return out


def _read_yaml(path: Path) -> tuple[dict[str, Any], str]:
    # bounded: file type, size, aliases, duplicated keys, dates, non-finite and huge numbers
    text = read_text(path, what="catalog")
    doc = parse_yaml(text, str(path), what="catalog", shipped=checkout.is_shipped(path))
    if doc is None:
        return {}, text
    if not isinstance(doc, dict):
        raise BadInputError("a catalog must be a YAML mapping of sections", where=str(path))
    return doc, text


def _merge_file(cat: Catalog, path: Path) -> None:
    doc, text = _read_yaml(path)
    r = _Reader(str(path), text)
    unknown = set(doc) - set(SECTIONS)
    if unknown:
        name = sorted(map(str, unknown))[0]
        raise r.fail(name, None, f"unknown section (known: {', '.join(SECTIONS)})")
    version = doc.get("catalog_version", 1)
    if version != 1:
        raise r.fail("catalog_version", None, f"must be 1 (got {short(version)})")
    sources = doc.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise r.fail("sources", None, "must map source names to descriptions (strings)")
    cat.sources.update({str(k): v for k, v in sources.items()})
    if "assumptions" in doc:
        cat.assumptions.update(r.facts("assumptions", doc["assumptions"], ASSUMPTIONS))
    for name, facts in r.named("gpus", doc.get("gpus", {}), GPU).items():
        cat.gpus.setdefault(name, {}).update(facts)
    for name, facts in r.named("providers", doc.get("providers", {}), PROVIDER).items():
        cat.providers.setdefault(name, {}).update(facts)
    for name, facts in r.named("links", doc.get("links", {}), LINK, LINK_CLASSES).items():
        cat.links.setdefault(name, {}).update(facts)
    for ident, _, facts in r.keyed(
        "regions", doc.get("regions", []), ("provider", "region"), REGION
    ):
        cat.regions.setdefault((ident[0], ident[1]), {}).update(facts)
    for ident, label, body in r.keyed(
        "offers", doc.get("offers", []), ("provider", "region", "gpu_type"), OFFER, OFFER_PLAIN
    ):
        key = (ident[0], ident[1], ident[2])
        old = cat.offers.get(key)
        instance = body.pop("instance", old.instance if old else None)
        per = body.pop("gpus_per_instance", old.gpus_per_instance if old else None)
        if instance is None or per is None:
            missing = "instance" if instance is None else "gpus_per_instance"
            raise r.fail(label, missing, "required for a new offer")
        facts = dict(old.facts) if old else {}
        facts.update(body)
        cat.offers[key] = Offer(key[0], key[1], key[2], str(instance), int(per), facts)
    for ident, label, body in r.keyed(
        "shapes",
        doc.get("shapes", []),
        ("provider", "region", "gpu_type", "instance"),
        SHAPE,
        SHAPE_PLAIN,
    ):
        skey = (ident[0], ident[1], ident[2], ident[3])
        held = cat.shapes.get(skey)
        gpus = body.pop("gpus_per_instance", held[0] if held else None)
        if gpus is None:
            raise r.fail(label, "gpus_per_instance", "required for a new shape")
        prices = dict(held[1]) if held else {}
        prices.update(body)
        cat.shapes[skey] = (int(gpus), prices)
        cat.shape_files[skey] = (str(path), label)


def _check_complete(cat: Catalog) -> None:
    """After merging: every required fact is present (the error names the file to fix)."""

    def need(where: str, entry: str, facts: dict[str, Fact], schema: FactSchema) -> None:
        for name, (_, _, required) in schema.items():
            if required and name not in facts:
                raise BadInputError(f"{entry}: {name}: required field is missing", where=where)

    last = cat.files[-1]
    need(last, "assumptions", cat.assumptions, ASSUMPTIONS)
    for name, facts in cat.gpus.items():
        need(_file_of(facts, last), f"gpus.{name}", facts, GPU)
    for name, facts in cat.providers.items():
        need(_file_of(facts, last), f"providers.{name}", facts, PROVIDER)
    for cls in LINK_CLASSES:
        if cls not in cat.links:
            raise BadInputError(f"links.{cls}: required entry is missing", where=last)
        need(_file_of(cat.links[cls], last), f"links.{cls}", cat.links[cls], LINK)
    for (p, reg), facts in cat.regions.items():
        need(_file_of(facts, last), f"regions {p}/{reg}", facts, REGION)
    for key, off in cat.offers.items():
        need(_file_of(off.facts, last), f"offers {'/'.join(key)}", off.facts, OFFER)
    for skey, (gpus, prices) in cat.shapes.items():
        where, label = cat.shape_files[skey]
        need(where, label, prices, SHAPE)
        offer = cat.offer(*skey[:3])
        if offer is None:
            raise BadInputError(
                f"{label}: no offer {'/'.join(skey[:3])} to be a smaller shape of (a shape "
                "needs its offer: provider, region, gpu_type)",
                where=where,
            )
        if gpus >= offer.gpus_per_instance:
            raise BadInputError(
                f"{label}: gpus_per_instance must be fewer than the offer's "
                f"{offer.gpus_per_instance} ({offer.instance}): a shape is a smaller instance "
                f"(got {gpus})",
                where=where,
            )


def _file_of(facts: dict[str, Fact], default: str) -> str:
    for f in facts.values():
        return f.file
    return default


def catalog_files(extra: Iterable[str | Path] = (), use_env: bool = True) -> list[Path]:
    """Default catalog, then $BURST_CATALOG files, then ``extra`` (later files win)."""
    files = [DEFAULT_CATALOG]
    if use_env:
        from burst.settings import current

        files += list(current().catalog)
    files += [Path(p) for p in extra]
    return files


def load_catalog(extra: Iterable[str | Path] = (), use_env: bool = True) -> Catalog:
    """Load and validate the default catalog merged with the user's override files."""
    files = catalog_files(extra, use_env)
    cat = Catalog(files=[str(p) for p in files])
    for path in files:
        _merge_file(cat, path)
    _check_complete(cat)
    log.debug("catalog loaded from %s: %d offers", cat.files, len(cat.offers))
    return cat
