"""Settings read once: every BURST_* variable declared in burst/settings.py, read nowhere else."""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from burst import settings
from burst.errors import BadInputError
from burst.settings import Settings

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = ("burst",)
NAME = re.compile(r"^(BURST_[A-Z0-9_]+|ARGO_[A-Z_]+)$")


def _production_files() -> list[Path]:
    files = [p for d in PRODUCTION for p in sorted((REPO / d).rglob("*.py"))]
    return [p for p in files if p != REPO / "burst" / "settings.py"]


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module- and class-level ``NAME = "BURST_..."`` constants (how modules named variables)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and NAME.match(node.value.value)
        ):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node.value.value
                elif isinstance(t, ast.Attribute):
                    out[t.attr] = node.value.value
    return out


def _key(node: ast.expr, consts: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.match(node.value):
        return node.value
    if isinstance(node, ast.Name) and node.id in consts:
        return consts[node.id]
    if isinstance(node, ast.Attribute) and node.attr in consts:
        return consts[node.attr]
    return None


def _environment_reads(path: Path) -> list[str]:
    """Where ``path`` reads a BURST_* variable: ``X.get(NAME)``, ``X[NAME]`` (a load),
    ``NAME in X``, ``os.getenv(NAME)``, click's ``envvar=NAME``, for NAME a literal or a
    constant naming the variable (so ``env = dict(os.environ); env.get(...)`` is caught too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    consts = _constants(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("get", "getenv", "pop") and node.args:
                key = _key(node.args[0], consts)
            for kw in node.keywords:
                if kw.arg == "envvar" and kw.value is not None:
                    key = key or _key(kw.value, consts)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = _key(node.slice, consts)
        elif isinstance(node, ast.Compare) and any(
            isinstance(op, (ast.In, ast.NotIn)) for op in node.ops
        ):
            key = _key(node.left, consts)
        if key:
            where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
            found.append(f"{where}:{getattr(node, 'lineno', 0)} reads {key}")
    return found


#: Modules that run in a user program's interpreter, which need not have burst: they read
#: their variables themselves and import the standard library only (checked below)
PROGRAM_SIDE = ("burst/preempt/program_steps.py",)


def test_no_module_outside_settings_reads_a_burst_variable() -> None:
    files = [p for p in _production_files() if str(p.relative_to(REPO)) not in PROGRAM_SIDE]
    reads = [r for p in files for r in _environment_reads(p)]
    assert not reads, "read these through burst.settings:\n" + "\n".join(reads)


def test_program_side_modules_import_only_the_standard_library() -> None:
    for rel in PROGRAM_SIDE:
        tree = ast.parse((REPO / rel).read_text(encoding="utf-8"))
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        } | {
            (node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 0
        }
        outside = imported - set(sys.stdlib_module_names) - {"__future__"}
        assert not outside, f"{rel} imports {sorted(outside)}: it runs without burst"


def test_the_grep_catches_each_way_of_reading(tmp_path: Path) -> None:
    """The scanner above is the test: each form a module used before must be caught."""
    sample = tmp_path / "sample.py"
    forms = [
        'os.environ.get("BURST_X")',
        'os.environ["BURST_X"]',
        'os.getenv("BURST_X")',
        '"BURST_X" in os.environ',
        "os.environ.get(ENV)",
        "dict(os.environ).get(SHM_DIR_ENV)",
        "self.env.get(self.name_env)",
    ]
    prelude = 'import os\nENV = "BURST_X"\nSHM_DIR_ENV = "BURST_Y"\n'
    prelude += 'class W:\n    name_env = "BURST_Z"\n'
    for form in forms:
        sample.write_text(prelude + f"value = {form}\n")
        assert _environment_reads(sample), form
    sample.write_text(prelude + 'os.environ["BURST_X"] = "1"\nenv = {"BURST_X": "1"}\n')
    assert not _environment_reads(sample)  # setting a child's environment is not reading


def test_every_variable_named_in_production_code_is_declared() -> None:
    declared = settings.declared_names()
    named: set[str] = set()
    for path in _production_files():
        named |= {n for n in re.findall(r"\bBURST_[A-Z0-9_]+\b", path.read_text()) if n[-1] != "_"}
    assert named - declared == set(), "declare these in burst/settings.py"


def test_the_readme_table_is_generated_from_the_declarations() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert settings.readme_with_table(readme) == readme, (
        "README.md's configuration table differs from burst/settings.py: "
        "run python -m burst.settings --readme README.md"
    )
    for var in settings.declared():
        assert f"| `{var.name}` |" in readme


def test_every_declaration_has_a_meaning_and_a_unique_name() -> None:
    names = [v.name for v in settings.declared()]
    assert len(names) == len(set(names))
    for var in settings.declared():
        assert var.meaning.strip() and var.shown.strip(), var.name
        assert var.audience in (settings.USER, settings.FAULT, settings.INTERNAL, settings.DEV)


def test_a_snapshot_is_frozen_typed_and_parsed_on_read() -> None:
    s = Settings.from_env(
        {
            "BURST_RUNS_ROOT": "/tmp/r",
            "BURST_REAP_REGIONS": "a, b,,c",
            "BURST_SIGTERM_GRACE_S": "120",
            "BURST_LOG_JSON": "0",
            "HOME": "/root",  # not declared: not kept
        }
    )
    assert s.runs_root == Path("/tmp/r")
    assert s.reap_regions == ("a", "b", "c")
    assert s.sigterm_grace_s == 120.0
    assert s.log_json is False
    assert s.tf_stack == "local" and s.tf_timeout_s == 7200.0  # defaults
    with pytest.raises(AttributeError):
        s.runs_root = Path("/elsewhere")  # type: ignore[misc]
    with pytest.raises(KeyError):
        s.raw("HOME")
    bad = Settings.from_env({"BURST_SIGTERM_GRACE_S": "soon", "BURST_TF_STACK": "oci"})
    with pytest.raises(BadInputError, match="BURST_SIGTERM_GRACE_S='soon'"):
        _ = bad.sigterm_grace_s
    with pytest.raises(
        BadInputError,
        match="BURST_TF_STACK='oci' is not one of local, aws, gcp, azure, nebius, cloud",
    ):
        _ = bad.tf_stack
    assert "secret" not in repr(Settings.from_env({"ARGO_TOKEN": "secret"}))


def test_the_edge_reads_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside ``use(...)`` a later change to the environment is not seen; outside it is."""
    monkeypatch.setenv("BURST_PUSHGATEWAY", "http://a:9091")
    monkeypatch.setenv("BURST_PREEMPT_WATCHERS", "aws")  # restored after the test
    with settings.use(Settings.from_env()):
        monkeypatch.setenv("BURST_PUSHGATEWAY", "http://b:9091")
        assert settings.current().pushgateway == "http://a:9091"
        settings.export("BURST_PREEMPT_WATCHERS", "none")  # what a step hands its children
        assert settings.current().preempt_watchers == "none"
    assert settings.current().pushgateway == "http://b:9091"


def test_replace_sets_and_unsets() -> None:
    s = Settings.from_env({"BURST_TARGET": "aws"})
    assert s.replace(BURST_TARGET=None).target == "local"
    assert s.replace(BURST_TF_STACK="aws").tf_stack == "aws"
    with pytest.raises(KeyError):
        s.replace(BURST_NOT_DECLARED="1")


def test_a_relative_file_path_in_a_spec_is_what_the_schema_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 14 bug: the spec's schema said a relative file:// checkpoint store is relative to
    the spec, and it was resolved against the working directory. One rule, said and done.
    Issue 27: the rule is the runs root (in a pod the working directory is the image's
    root-owned WORKDIR; the runs volume is where a pod's user may write)."""
    from burst.spec import BurstJob
    from burst.storage.location import run_url

    schema = BurstJob.model_json_schema(by_alias=True)
    said = json.dumps(schema)
    assert "relative to the spec)" not in said
    assert said.count("relative to the working directory") >= 1  # data
    assert "under the runs root" in said  # the checkpoint store
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BURST_RUNS_ROOT", raising=False)
    assert run_url("file://ckpt", "r1") == f"file://{tmp_path}/runs/ckpt/r1"
    monkeypatch.setenv("BURST_RUNS_ROOT", "/var/lib/burst/runs")  # as in a pod
    assert run_url("file://ckpt", "r1") == "file:///var/lib/burst/runs/ckpt/r1"
    assert run_url("file://ckpt", "r1", tmp_path / "x") == f"file://{tmp_path}/x/ckpt/r1"
    assert run_url(f"file://{tmp_path}/abs", "r1") == f"file://{tmp_path}/abs/r1"


def test_a_steps_runs_root_is_the_root_of_its_relative_store_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step run by hand with ``--runs-root DIR`` and no ``$BURST_RUNS_ROOT`` put its run
    directory under DIR and a relative ``file://`` store under ./runs (found by the tiered
    inference benchmark): the step's runs root is now the one root for both, for its
    children too."""
    from burst.settings import current
    from burst.stepio import main
    from burst.storage.location import run_url

    monkeypatch.chdir(tmp_path)
    for key in ("BURST_RUNS_ROOT", "BURST_STEP", "BURST_RUN_ID"):  # the step sets them
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    seen: list[tuple[Path, str, str]] = []

    def step(ctx: Any) -> dict[str, Any]:
        seen.append((ctx.paths.dir, run_url("file://ckpt", "r1"), str(current().runs_root)))
        return {}

    argv = ["--spec", "unused.yaml", "--run-id", "r1", "--runs-root", "elsewhere"]
    assert main("plan-check", step, argv) == 0
    root = tmp_path / "elsewhere"
    assert seen == [(root / "r1", f"file://{root}/ckpt/r1", str(root))]
    assert os.environ["BURST_RUNS_ROOT"] == str(root)  # what its children (ranks) read
