"""Evaluate the Rego rules in ``policies/rules/`` in-process (regopy / rego-cpp).

One interpreter per policy set; one query (``data.burst.preflight.decision``) per candidate
(region, provider). The rules produce the reasons and the verdict; this module only builds the
input document, checks the shape of what comes back and orders the reasons.

Loading the facts and modules and compiling the bundle is pure: ``Engine.shared`` keeps the
compiled engines of a process, keyed by the content that goes into the interpreter (the facts
document, the modules' names and texts, the policy directory), so an edited policy is compiled
afresh and never served stale.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import os
import re
import sys
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

from burst.policy.loader import PolicyFileError, PolicySet, RegoModule, _display
from burst.spec import BurstJob

log = logging.getLogger(__name__)

DECISION_QUERY = "data.burst.preflight.decision"
DECISION_ENTRYPOINT = "burst/preflight/decision"
VERDICTS = ("allow", "review", "deny")
EFFECT_ORDER = {"deny": 0, "review": 1, "info": 2}
# rego-cpp 1.x crashes (SIGSEGV) on `with input as {...}` in some rule shapes; replacing
# input field by field (`with input.spec as ...`) works. Refuse the crashing form up front.
WHOLE_INPUT_WITH = re.compile(r"\bwith\s+input\s+as\b")


@contextlib.contextmanager
def _engine_output_captured() -> Iterator[None]:
    """rego-cpp writes its error dump straight to file descriptor 1: keep it off the
    terminal (our one line says what is wrong); it is logged at debug level."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            dump = sink.read(64 << 10)
            if dump.strip():
                log.debug("rego-cpp output: %s", dump.decode("utf-8", "replace"))


def _rego_error(module: RegoModule, exc: Exception) -> PolicyFileError:
    text = str(exc)
    line = ""
    m = re.search(r"\|(\d+)\|", text)
    first = next((ln.strip() for ln in text.splitlines() if "errormsg" in ln), "")
    msg = re.sub(r"^\(errormsg \d+:|\)+$", "", first).strip() or "Rego does not parse"
    # rego-cpp reports byte offsets; turn the first one into a line number
    if m:
        offset = int(m.group(1))
        line = f":{module.text[:offset].count(chr(10)) + 1}"
    return PolicyFileError(f"Rego error: {msg}", where=f"{_display(module.path)}{line}")


def rego_json(value: Any) -> str:
    """JSON that rego-cpp's base-document parser accepts: it rejects exponents without a
    decimal point (``1e+26``), which is how Python writes large floats."""
    if isinstance(value, dict):
        items = (f"{json.dumps(str(k))}:{rego_json(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(rego_json(v) for v in value) + "]"
    if isinstance(value, float) and not isinstance(value, bool):
        text = repr(value)
        if text in ("inf", "-inf", "nan"):
            raise ValueError(f"{text} is not a JSON number")
        mantissa, e, exponent = text.partition("e")
        if e and "." not in mantissa:
            text = f"{mantissa}.0e{exponent}"
        return text
    return json.dumps(value)


def _load_regopy_safely() -> None:
    """Load the C++ runtime before regopy. rego-cpp's shared library carries its own C++
    allocator and runtime (``operator new``/``delete`` and GNU-unique template symbols, which
    are process-wide: the first library to define one wins); a torch imported after it in the
    same process aborts the interpreter at import ("double free or corruption", SIGABRT;
    measured with regopy 1.5.2 and torch 2.13.0: ``import regopy; import torch`` aborts, the
    reverse order works). What makes the reverse order work is libstdc++ being loaded first,
    so that is what is loaded here (a few milliseconds), not torch (seconds, and a preflight
    never trains). Where the system's libstdc++ cannot be loaded by name, torch is imported
    first when installed, as before. A process that evaluates policies and later trains, plans
    a regional run or runs a test suite must not die of that, so the order is fixed here, once,
    where regopy is first loaded (tests/policy/test_engine_load_order.py)."""
    if "regopy" in sys.modules or "torch" in sys.modules:
        return
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libstdc++.so.6")
            return
        except OSError:
            log.debug("libstdc++.so.6 does not load; importing torch before regopy instead")
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        import torch  # noqa: F401  (load order only)


def _interpreter_inputs(
    policies: PolicySet, with_tests: bool, data: dict[str, Any] | None
) -> tuple[str, list[RegoModule]]:
    """What goes into an interpreter: the base document as JSON, and the modules."""
    document = data if data is not None else policies.data_document()
    data_json = rego_json({**document, "index": lookup_index(document)})
    return data_json, list(policies.modules if with_tests else policies.rule_modules)


def _content_key(root: str, data_json: str, modules: Sequence[RegoModule], with_tests: bool) -> str:
    h = hashlib.sha256()
    for part in (root, "tests" if with_tests else "rules", data_json):
        h.update(len(part).to_bytes(8, "big") + part.encode())
    for module in modules:
        for part in (module.path.name, module.text):
            h.update(len(part).to_bytes(8, "big") + part.encode())
    return h.hexdigest()


# Compiled engines of this process, newest last (Engine.shared); a few policy sets at a time.
SHARED_ENGINES = 16
_shared: OrderedDict[str, Engine] = OrderedDict()
_shared_lock = threading.Lock()


class Engine:
    """A loaded interpreter for one PolicySet."""

    def __init__(
        self, policies: PolicySet, *, with_tests: bool = False, data: dict[str, Any] | None = None
    ) -> None:
        self._setup(policies, *_interpreter_inputs(policies, with_tests, data))

    @classmethod
    def shared(
        cls, policies: PolicySet, *, with_tests: bool = False, data: dict[str, Any] | None = None
    ) -> Engine:
        """An engine for this content, compiled once per process: the same facts, modules and
        directory give the same engine (its bundle already compiled); any change of content
        gives a new one. Use it read-only (``evaluate``)."""
        data_json, modules = _interpreter_inputs(policies, with_tests, data)
        key = _content_key(str(policies.root), data_json, modules, with_tests)
        with _shared_lock:
            engine = _shared.get(key)
            if engine is not None:
                _shared.move_to_end(key)
                return engine
        engine = cls.__new__(cls)
        engine._setup(policies, data_json, modules)
        engine._bundle()
        with _shared_lock:
            _shared[key] = engine
            while len(_shared) > SHARED_ENGINES:
                _shared.popitem(last=False)
        return engine

    def _setup(self, policies: PolicySet, data_json: str, modules: list[RegoModule]) -> None:
        _load_regopy_safely()
        from regopy import Interpreter

        self.policies = policies
        self._compiled: Any = None
        self._runner: Any = None
        self._input: Any = None
        self._lock = threading.Lock()
        self.rego = Interpreter()
        self.rego.add_data_json(data_json)
        for module in modules:
            lineno = next(
                (
                    i + 1
                    for i, ln in enumerate(module.text.splitlines())
                    if WHOLE_INPUT_WITH.search(ln.split("#", 1)[0])
                ),
                None,
            )
            if lineno is not None:
                raise PolicyFileError(
                    "`with input as {...}` crashes rego-cpp; replace fields instead "
                    "(`with input.spec as ... with input.candidate as ...`)",
                    where=f"{_display(module.path)}:{lineno}",
                )
            try:
                with _engine_output_captured():
                    self.rego.add_module(module.path.name, module.text)
            except Exception as exc:  # regopy.RegoError: a module that does not parse
                raise _rego_error(module, exc) from None

    def _bundle(self) -> Any:
        """Compile the rules once: a query on the interpreter recompiles everything (~90 ms
        here with these facts), a compiled bundle answers in a few milliseconds."""
        if self._compiled is None:
            from regopy import Interpreter

            try:
                with _engine_output_captured():
                    self._compiled = self.rego.build(None, [DECISION_ENTRYPOINT])
            except Exception as exc:  # regopy.RegoError: rules that do not compile
                raise PolicyFileError(
                    f"Rego rules do not compile: {_first_line(exc)}",
                    where=_display(self.policies.root / "rules"),
                ) from None
            self._runner = Interpreter()
        return self._compiled

    def _parse(self, ok: bool, text: str, what: str) -> Any:
        where = _display(self.policies.root / "rules")
        if not ok:
            raise PolicyFileError(
                f"Rego evaluation failed for {what}: {_first_line(text)}", where=where
            )
        if text.strip() == "undefined":
            return None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PolicyFileError(
                f"Rego result of {what} is not valid JSON near "
                f"{text[max(0, exc.pos - 60) : exc.pos + 20]!r} (a sprintf of a computed string? "
                "see the note in rules/common.rego)",
                where=where,
            ) from None
        if isinstance(doc, list):
            doc = doc[0] if doc else {}
        exprs = doc.get("expressions", [])
        return exprs[0] if exprs else None

    def query(self, query: str) -> Any:
        """Run an ad-hoc query (slow: recompiles); the first expression's value, or None."""
        from regopy.rego_shared import (
            rego_free_output,
            rego_output_ok,
            rego_output_string,
            rego_query,
        )

        # the raw C API: regopy's Output parses the JSON itself and raises a bare
        # JSONDecodeError when rego-cpp prints a string unescaped
        impl = rego_query(self.rego._impl, query)
        try:
            ok, text = rego_output_ok(impl), rego_output_string(impl)
        finally:
            rego_free_output(impl)
        return self._parse(ok, text, query)

    def evaluate(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The decision for one input document (one candidate)."""
        from regopy import Input
        from regopy.rego_shared import (
            rego_bundle_query_entrypoint,
            rego_free_output,
            rego_output_ok,
            rego_output_string,
        )

        with self._lock:  # one input at a time: a shared engine may be used from threads
            bundle = self._bundle()
            self._input = Input(doc)  # keep it alive while the interpreter may read it
            self._runner.set_input(self._input)
            impl = rego_bundle_query_entrypoint(
                self._runner._impl, bundle._impl, DECISION_ENTRYPOINT
            )
            try:
                ok, text = rego_output_ok(impl), rego_output_string(impl)
            finally:
                rego_free_output(impl)
        return _check_decision(self._parse(ok, text, DECISION_QUERY), self.policies)


def lookup_index(document: dict[str, Any]) -> dict[str, Any]:
    """Lookups the rules need, built once from the facts (rego-cpp is slow at scanning every
    provider's regions inside a query): region code -> the countries any provider places it
    in, and country -> the jurisdictions that claim it. More than one entry: ambiguous (the
    rules then treat the region or country as unknown)."""
    facts = document.get("facts", {})
    regions: dict[str, list[str]] = {}
    for provider in facts.get("regions", {}).values():
        for code, region in (provider.get("regions") or {}).items():
            country = region.get("country")
            if country is not None and country not in regions.setdefault(code, []):
                regions[code].append(country)
    countries: dict[str, list[str]] = {}
    for code, j in facts.get("jurisdictions", {}).items():
        for country in j.get("countries") or []:
            countries.setdefault(country, []).append(code)
    return {"region_countries": regions, "country_jurisdictions": countries}


def _first_line(exc: object) -> str:
    return " ".join(str(exc).split())[:300]


def _check_decision(result: Any, policies: PolicySet) -> dict[str, Any]:
    where = _display(policies.root / "rules")
    if not isinstance(result, dict) or result.get("verdict") not in VERDICTS:
        raise PolicyFileError(
            f"{DECISION_QUERY} must be an object with verdict allow/review/deny "
            f"(got {json.dumps(result)[:120]})",
            where=where,
        )
    reasons = []
    for r in result.get("reasons", []):
        missing = [k for k in ("rule", "effect", "message", "source") if not r.get(k)]
        if missing or r["effect"] not in EFFECT_ORDER:
            raise PolicyFileError(
                f"a rule produced a reason without {', '.join(missing) or 'a valid effect'}: "
                f"{json.dumps(r)[:160]}",
                where=where,
            )
        reasons.append({k: r[k] for k in ("rule", "effect", "message", "source", "fact") if k in r})
    waivers = {(w["rule"], w.get("fact")): w for w in result.get("waivers", [])}
    for r in reasons:
        w = waivers.get((r["rule"], r.get("fact")))
        if w is not None and r["effect"] == "review":
            r["waived_by"] = w["exception"]
            r["waiver_expires"] = w["expires"]
    reasons.sort(
        key=lambda r: (
            EFFECT_ORDER[r["effect"]],
            "waived_by" in r,
            r["rule"],
            r.get("fact", ""),
            r["message"],
        )
    )
    out: dict[str, Any] = {"verdict": result["verdict"], "reasons": reasons}
    satisfied = []
    for s in result.get("satisfied", []):
        missing = [k for k in ("rule", "message", "source") if not s.get(k)]
        if missing:
            raise PolicyFileError(
                f"a rule produced a satisfied entry without {', '.join(missing)}: "
                f"{json.dumps(s)[:160]}",
                where=where,
            )
        satisfied.append({k: s[k] for k in ("rule", "message", "source", "fact") if k in s})
    out["satisfied"] = sorted(satisfied, key=lambda s: (s["rule"], s.get("fact", ""), s["message"]))
    sources = result.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(x, dict) for x in sources):
        raise PolicyFileError(f"{DECISION_QUERY}.sources must be a list", where=where)
    out["sources"] = sorted(sources, key=lambda x: str(x.get("region", "")))
    for key in ("data_may_move", "data_may_leave"):
        if key in result:
            if not isinstance(result[key], bool):
                raise PolicyFileError(
                    f"{DECISION_QUERY}.{key} must be true or false "
                    f"(got {json.dumps(result[key])[:60]})",
                    where=where,
                )
            out[key] = result[key]
    duties = result.get("localisation", [])
    if not isinstance(duties, list) or not all(isinstance(d, dict) for d in duties):
        raise PolicyFileError(f"{DECISION_QUERY}.localisation must be a list", where=where)
    out["localisation"] = sorted(duties, key=lambda d: str(d.get("fact", "")))
    return out


def input_document(
    job: BurstJob, region: str, provider: str, *, today: dt.date, max_fact_age_days: int
) -> dict[str, Any]:
    """The Rego ``input`` for one candidate: only the spec fields the rules read."""
    return {
        "today": today.isoformat(),
        "stale_before": (today - dt.timedelta(days=max_fact_age_days)).isoformat(),
        "spec": {
            "name": job.name,
            "sha256": job.sha256(),
            "data": {
                "classification": job.data.classification,
                "origin": job.data.origin,
                "region": job.data.region,
                # where the data is stored today: the shards' regions, else data.region
                "shards": sorted(job.data.shards or {}),
                "transfer_safeguards": [s.lower() for s in job.data.transfer_safeguards],
            },
            "model": {
                "weights": job.model.weights,
                "training_ops": job.model.training_ops,
                "export_sensitivity": job.model.export_sensitivity,
            },
            "organization": {
                "name": job.organization.name,
                "headquarters": job.organization.headquarters,
                "parent_headquarters": job.organization.parent_headquarters,
            },
            "compute": {"gpu_type": job.compute.gpu_type.lower()},
            "training": training_input(job),
        },
        "candidate": {"region": region, "provider": provider},
    }


def training_input(job: BurstJob) -> dict[str, Any]:
    """The training strategy as the rules read it (policies/rules/model_update.rego):
    ``regional_sync`` is null unless the strategy is regional-sync."""
    training = job.training
    strategy, sync = training.strategy, training.regional_sync
    if strategy != "regional-sync" or sync is None:
        return {"strategy": strategy, "regional_sync": None}
    return {
        "strategy": strategy,
        "regional_sync": {
            "regions": list(sync.regions or []),
            "aggregation_region": sync.aggregation_region,
        },
    }
