"""Typed step documents (burst.documents): `burst schema --document NAME` prints a JSON
Schema for every document, and every step fed a document with one wrong field exits 2 with
one line naming the document and that field, before it does anything."""

from __future__ import annotations

import copy
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator

from burst.cli.main import cli
from burst.documents import (
    DOCUMENTS,
    STEP_DOCUMENTS,
    DecisionRecord,
    DocumentError,
    PlanDocument,
    ProvisionDocument,
    parse_document,
)
from burst.errors import EXIT_BAD_INPUT
from burst.plan.catalog import load_catalog
from burst.plan.placement import plan
from burst.policy import evaluate, load_policies
from burst.spec import BurstJob, load_spec

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"


@pytest.fixture(scope="module")
def job() -> BurstJob:
    return load_spec(QUICKSTART)


@pytest.fixture(scope="module")
def real_docs(job: BurstJob) -> dict[str, dict[str, Any]]:
    """The documents the real producers write for the quickstart (preflight, plan), and a
    provision document built from the plan's first candidate."""
    record = evaluate(job, load_policies()).to_json()
    planned = plan(job, load_catalog(use_env=False), record)
    infra = {"status": "provisioned", "candidate": planned["candidates"][0], "attempts": []}
    for doc in (record, planned, infra):
        json.dumps(doc)  # what a step receives is JSON
    return {"decision": record, "plan": planned, "infra": infra}


# ----------------------------------------------------------------------------- schema


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_schema_of_every_document(name: str) -> None:
    result = CliRunner().invoke(cli, ["schema", "--document", name])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    Draft202012Validator.check_schema(schema)
    assert schema["$id"].endswith(f"/{name}-v1.json")
    assert schema.get("additionalProperties") is False  # our own producer: no unknown field


@pytest.mark.parametrize("step", sorted(STEP_DOCUMENTS))
def test_schema_by_step_name(step: str) -> None:
    result = CliRunner().invoke(cli, ["schema", "--document", step])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["title"] == STEP_DOCUMENTS[step].__name__


@pytest.mark.parametrize("argv", [["--document"], ["--document", "nope"]])
def test_schema_names_the_documents_when_none_or_unknown(argv: list[str]) -> None:
    result = CliRunner().invoke(cli, ["schema", *argv])
    assert result.exit_code == EXIT_BAD_INPUT
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert all(name in lines[0] for name in DOCUMENTS)


def test_schema_without_document_is_still_the_spec() -> None:
    result = CliRunner().invoke(cli, ["schema"])
    assert result.exit_code == 0
    assert json.loads(result.output)["title"] == "BurstJob"


def test_real_documents_validate_against_their_schema(
    real_docs: dict[str, dict[str, Any]],
) -> None:
    for name, model in (("decision", DecisionRecord), ("plan", PlanDocument)):
        schema = model.model_json_schema()
        errors = list(Draft202012Validator(schema).iter_errors(real_docs[name]))
        assert not errors, [e.message for e in errors]
        assert parse_document(model, real_docs[name]).to_json() == real_docs[name]


# ----------------------------------------------------------------------------- wrong fields


def _set(doc: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    target: Any = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


#: (input, path of the field made wrong, its wrong value, how the line names the field)
WRONG = {
    "decision": (("decisions", 0, "verdict"), "maybe", "decisions[0].verdict"),
    "plan": (("candidates", 0, "nodes"), "many", "candidates[0].nodes"),
    "infra": (("candidate", "regoin"), "x", "candidate.regoin"),
}
DOC_NAMES = {"decision": "decision-record", "plan": "plan", "infra": "provision"}
#: what each step reads; steps that read no document get the plan (every input is parsed)
READS = {
    "preflight": "plan",
    "plan": "decision",
    "verify-image": "plan",
    "provision": "plan",
    "train": "infra",
    "teardown": "plan",
    "aggregate": "plan",
}


@pytest.mark.parametrize("step", sorted(STEP_DOCUMENTS))
def test_each_step_refuses_a_document_with_one_wrong_field(
    step: str,
    real_docs: dict[str, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for key in ("BURST_STEP", "BURST_RUN_ID", "BURST_RUNS_ROOT"):  # stepio sets them (its process)
        monkeypatch.setenv(key, "")
    name = READS[step]
    path, value, field = WRONG[name]
    bad = tmp_path / f"{name}.json"
    bad.write_text(json.dumps(_set(real_docs[name], path, value)))
    out = tmp_path / "out.json"
    argv = ["--spec", str(QUICKSTART), "--run-id", f"bad-{step}", "--runs-root", str(tmp_path)]
    argv += ["--input", f"{name}={bad}", "--out", str(out)]
    module = importlib.import_module(f"burst.steps.{step.replace('-', '_')}")
    code = module.main(step, module.run, argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_BAD_INPUT
    assert len(err) == 1, err
    assert f"{DOC_NAMES[name]} document" in err[0] and str(bad) in err[0]
    assert field in err[0] and "Traceback" not in err[0]
    assert not out.exists()  # refused before the step did anything


def test_inline_input_is_named_too(real_docs: dict[str, dict[str, Any]]) -> None:
    from burst.stepio import read_input

    wrong = _set(real_docs["decision"], ("data_may_leave",), "no")
    with pytest.raises(DocumentError) as info:
        read_input("decision", json.dumps(wrong))
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert info.value.one_line() == (
        "decision-record document (--input decision): data_may_leave: "
        "must be true or false (got 'no')"
    )


def test_an_unknown_input_is_bad_input() -> None:
    from burst.errors import BadInputError
    from burst.stepio import read_input

    with pytest.raises(BadInputError, match="unknown input 'plna'"):
        read_input("plna", "{}")


def test_producer_mismatch_is_a_bug_not_bad_input(real_docs: dict[str, dict[str, Any]]) -> None:
    from burst.documents import produce
    from burst.errors import EXIT_FAILURE, BurstError

    wrong = _set(real_docs["infra"], ("status",), "half-done")
    with pytest.raises(BurstError) as info:
        produce(ProvisionDocument, wrong)
    assert info.value.exit_code == EXIT_FAILURE
    assert "status" in info.value.one_line()


def test_the_candidate_capacities_are_the_planners() -> None:
    from typing import get_args

    from burst.documents.plan import PlanCapacity
    from burst.plan.placement import CANDIDATE_CAPACITIES

    assert set(get_args(PlanCapacity)) == set(CANDIDATE_CAPACITIES)
