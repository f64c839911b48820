"""Every compiled manifest passes the three offline checks; broken copies fail the checks that
should catch them (and the ones that cannot see the fault stay quiet, which is why there are
three)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from burst.runner.lint import lint

from .checks import all_problems, raw_schema, roundtrip_diff, schema_errors
from .conftest import GOLDENS, load, workflow_templates


def _template(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in manifest["spec"]["templates"] if t["name"] == name)


def test_the_goldens_are_three_templates_and_the_reapers_cron() -> None:
    assert GOLDENS == [
        "burst-reaper-cron.yaml",
        "burst-reaper.yaml",
        "burst-regional.yaml",
        "burst-train.yaml",
    ]
    assert [load(n)["kind"] for n in GOLDENS] == ["CronWorkflow"] + ["WorkflowTemplate"] * 3


@pytest.mark.parametrize("name", GOLDENS)
def test_golden_passes_all_three_checks(name: str) -> None:
    problems = all_problems(load(name), workflow_templates())
    assert problems == {"roundtrip": [], "schema": [], "strict": [], "lint": []}


def test_schema_copy_is_argo_v4_and_says_int_or_string_is_a_string() -> None:
    schema = raw_schema()
    assert "io.argoproj.workflow.v1alpha1.WorkflowTemplate" in schema["definitions"]
    # the published schema's IntOrString is only "string": the patch is needed because Hera
    # writes backoff.factor (and a literal activeDeadlineSeconds) as integers
    assert schema["definitions"]["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] == {
        "type": "string"
    }


def test_unpatched_schema_rejects_an_integer_int_or_string(train: dict[str, Any]) -> None:
    errors = schema_errors(train, "raw")
    assert any("retryStrategy/backoff/factor" in e for e in errors), errors
    assert schema_errors(train, "lenient") == []


def test_typo_in_a_field_fails_strict_schema_and_roundtrip(train: dict[str, Any]) -> None:
    broken = copy.deepcopy(train)
    t = _template(broken, "teardown")
    t["afinity"] = t.pop("affinity")
    assert schema_errors(broken, "lenient") == []  # the published schema lets typos through
    strict = schema_errors(broken, "strict")
    assert any("afinity" in e for e in strict), strict
    assert any("afinity" in d for d in roundtrip_diff(broken))


def test_typo_inside_a_container_fails_strict_schema(train: dict[str, Any]) -> None:
    broken = copy.deepcopy(train)
    c = _template(broken, "train")["container"]
    c["comand"] = c.pop("command")
    assert any("comand" in e for e in schema_errors(broken, "strict"))


def test_wrong_type_fails_both_schemas(train: dict[str, Any]) -> None:
    broken = copy.deepcopy(train)
    broken["spec"]["activeDeadlineSeconds"] = "a day"
    assert schema_errors(broken, "lenient")
    assert schema_errors(broken, "strict")
    assert roundtrip_diff(broken)


def test_missing_exit_handler_fails_lint_only(train: dict[str, Any]) -> None:
    broken = copy.deepcopy(train)
    del broken["spec"]["onExit"]
    assert schema_errors(broken, "strict") == []  # valid Argo, but teardown would not run
    assert roundtrip_diff(broken) == []
    assert any("no exit handler" in p for p in lint(broken))


def test_exit_handler_naming_a_missing_or_dag_template_fails_lint(train: dict[str, Any]) -> None:
    broken = copy.deepcopy(train)
    broken["spec"]["onExit"] = "cleanup"
    assert any("'cleanup' does not exist" in p for p in lint(broken))
    broken = copy.deepcopy(train)
    handler = _template(broken, "exit-handler")
    handler["dag"] = {"tasks": [{"name": "teardown", "template": "teardown"}]}
    del handler["steps"]
    assert any("must be a Steps template" in p for p in lint(broken))


def test_undeclared_workflow_parameter_fails_lint(train: dict[str, Any]) -> None:
    broken = copy.deepcopy(train)
    broken["spec"]["arguments"]["parameters"] = [
        p for p in broken["spec"]["arguments"]["parameters"] if p["name"] != "team"
    ]
    assert schema_errors(broken, "strict") == []
    problems = lint(broken)
    assert any("workflow parameter 'team' is not declared" in p for p in problems), problems


def test_undeclared_input_parameter_fails_lint(train: dict[str, Any]) -> None:
    broken = copy.deepcopy(train)
    t = _template(broken, "provision")
    t["inputs"]["parameters"] = [p for p in t["inputs"]["parameters"] if p["name"] != "event"]
    problems = lint(broken)
    assert any("input parameter 'event' is not declared" in p for p in problems)
    assert any("passes parameter 'event'" in p for p in problems)


def test_reference_to_an_undeclared_output_fails_lint(train: dict[str, Any]) -> None:
    broken = copy.deepcopy(train)
    _template(broken, "provision")["outputs"]["parameters"][0]["name"] = "infrastructure"
    problems = lint(broken)
    assert any("declares no such output" in p and "infra" in p for p in problems), problems


def test_reference_to_a_later_step_fails_lint(train: dict[str, Any]) -> None:
    broken = copy.deepcopy(train)
    main = _template(broken, "main")
    main["steps"][1][0]["arguments"]["parameters"][0]["value"] = (
        "{{steps.place.outputs.parameters.decision}}"
    )
    assert any("not an earlier step" in p for p in lint(broken))


def test_missing_template_fails_lint(train: dict[str, Any]) -> None:
    broken = copy.deepcopy(train)
    _template(broken, "main")["steps"][0][0]["template"] = "preflite"
    assert any("template 'preflite' does not exist" in p for p in lint(broken))


def test_unquoted_when_operand_fails_lint(train: dict[str, Any]) -> None:
    broken = copy.deepcopy(train)
    step = _template(broken, "place")["steps"][3][0]
    step["when"] = "{{steps.train.status}} != 'Succeeded'"
    problems = lint(broken)
    assert any("{{steps.train.status}} must be quoted" in p for p in problems), problems


def test_retry_expression_that_does_not_parse_fails_lint(train: dict[str, Any]) -> None:
    broken = copy.deepcopy(train)
    _template(broken, "train")["retryStrategy"]["expression"] = "lastRetry.exitCode == '75' ||"
    assert any("expression does not parse" in p for p in lint(broken))
    _template(broken, "train")["retryStrategy"]["expression"] = "lastRetry.exitcode == '75'"
    assert any("lastRetry.exitcode" in p for p in lint(broken))


# -- the reaper: a WorkflowTemplate without exit handler, called by a CronWorkflow ----------------


def test_only_a_template_that_provisions_nothing_may_go_without_an_exit_handler(
    reaper: dict[str, Any], train: dict[str, Any]
) -> None:
    from burst.runner.lint import NO_EXIT_HANDLER_ANNOTATION

    assert lint(reaper) == []
    undeclared = copy.deepcopy(reaper)
    del undeclared["metadata"]["annotations"][NO_EXIT_HANDLER_ANNOTATION]
    assert any("no exit handler" in p for p in lint(undeclared))
    assert lint(reaper, require_exit_handler=True)  # an explicit demand wins
    misspelt = copy.deepcopy(reaper)
    misspelt["metadata"]["annotations"][NO_EXIT_HANDLER_ANNOTATION] = "no"
    assert any("must be 'none'" in p for p in lint(misspelt))
    # train provisions: declaring it needs no teardown is refused, with or without a handler
    claimed = copy.deepcopy(train)
    claimed["metadata"].setdefault("annotations", {})[NO_EXIT_HANDLER_ANNOTATION] = "none"
    assert any("'provision'" in p and "provision:" in p for p in lint(claimed)), lint(claimed)
    assert any("spec.onExit is set" in p for p in lint(claimed))
    del claimed["spec"]["onExit"]
    assert any("'provision'" in p for p in lint(claimed))
    assert not any("no exit handler (spec.onExit)" in p for p in lint(claimed))
    # a provisioning step added to the reaper (regional's, in a script) is seen too
    grown = copy.deepcopy(reaper)
    grown["spec"]["templates"].append(
        {
            "name": "grow",
            "script": {"image": "x", "source": "python -m burst.steps.regional_provision"},
        }
    )
    assert any("['grow'] provision" in p for p in lint(grown))


def test_the_cron_sets_only_what_a_workflow_may_override_in_reference_mode(
    reaper: dict[str, Any], reaper_cron: dict[str, Any]
) -> None:
    """Argo's controller with templateReferencing Strict/Secure ends a Workflow in Error when it
    calls a template and sets anything else (the cron's Workflows are copies of its
    workflowSpec): valid Argo otherwise, so only the lint sees it."""
    wfspec = reaper_cron["spec"]["workflowSpec"]
    assert set(wfspec) == {"workflowTemplateRef", "arguments"}
    for key in ("serviceAccountName", "securityContext", "templates"):
        broken = copy.deepcopy(reaper_cron)
        broken["spec"]["workflowSpec"][key] = copy.deepcopy(reaper["spec"][key])
        assert schema_errors(broken, "strict") == []
        assert any(f"also sets ['{key}']" in p for p in lint(broken)), key
    nameless = copy.deepcopy(reaper_cron)
    nameless["spec"]["workflowSpec"]["workflowTemplateRef"] = {}
    assert any("names no WorkflowTemplate" in p for p in lint(nameless))


def test_a_reference_must_name_a_shipped_template_and_its_parameters(
    reaper_cron: dict[str, Any],
) -> None:
    templates = workflow_templates()
    assert lint(reaper_cron, workflow_templates=templates) == []
    missing = copy.deepcopy(reaper_cron)
    missing["spec"]["workflowSpec"]["workflowTemplateRef"]["name"] = "burst-reeper"
    assert any(
        "'burst-reeper' does not exist" in p for p in lint(missing, workflow_templates=templates)
    )
    assert lint(missing) == []  # without the templates, the fields only
    # a misspelt parameter: Argo adds it beside the template's, which keeps its default
    misspelt = copy.deepcopy(reaper_cron)
    param = next(
        p for p in misspelt["spec"]["workflowSpec"]["arguments"]["parameters"]
        if p["name"] == "state-bucket"
    )  # fmt: skip
    param["name"] = "state_bucket"
    assert any(
        "passes parameter 'state_bucket'" in p for p in lint(misspelt, workflow_templates=templates)
    )
    entry = copy.deepcopy(reaper_cron)
    entry["spec"]["workflowSpec"]["entrypoint"] = "reap-all"
    assert any("'reap-all' does not exist" in p for p in lint(entry, workflow_templates=templates))
    # a run of burst-train that does not pass the spec, which has no default
    run = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "burst-"},
        "spec": {"workflowTemplateRef": {"name": "burst-train"}},
    }
    problems = lint(run, workflow_templates=templates)
    assert any("does not pass parameter 'spec'" in p for p in problems), problems
    assert not any("no exit handler" in p for p in problems)  # the template's runs
