"""The expression subset the runner evaluates (expr-lang and govaluate as Argo uses them)."""

from __future__ import annotations

import pytest

from burst.runner import expr
from burst.runner.tags import UnresolvedTag, substitute


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("10 % 4 == 2 && !false", True),
        ("'a' == 'a' || x == 1", True),
        ("asInt('41') + 1", 42),
        ("'pod deleted by kubelet' contains 'pod deleted'", True),
        ("'imminent node shutdown' matches 'node (shutdown|loss)'", True),
        ("'abc' startsWith 'ab' and 'abc' endsWith 'bc'", True),
        ("2 in [1, 2, 3]", True),
        ("not (3 >= 4)", True),
        ("-2 < -1", True),
        ("inputs.parameters['candidate-index'] == '0'", True),
        ("jsonpath(doc, '$.outputs.sel.zone')", "a"),
        ("toJson(jsonpath(doc, '$.outputs.list'))", "[1,2]"),
        ("len(jsonpath(doc, '$.outputs.list'))", 2),
    ],
)
def test_evaluates(text: str, value: object) -> None:
    env = {
        "x": 0,
        "inputs": {"parameters": {"candidate-index": "0"}},
        "doc": '{"outputs": {"sel": {"zone": "a"}, "list": [1, 2]}}',
    }
    assert expr.evaluate_text(text, env) == value


@pytest.mark.parametrize("text", ["1 +", "a ==", "(1", "f(", "1 ? 2 : 3", "a = 1", "'open"])
def test_malformed_expressions_do_not_parse(text: str) -> None:
    with pytest.raises(expr.ExprError):
        expr.parse(text)


def test_unknown_names_and_functions_fail() -> None:
    with pytest.raises(expr.ExprError, match="unknown name 'Failed'"):
        expr.evaluate_text("Failed != 'Succeeded'", {})  # an unquoted operand
    with pytest.raises(expr.ExprError, match="unknown function 'upper'"):
        expr.evaluate_text("upper('x')", {})
    with pytest.raises(expr.ExprError, match=r"unknown function 'sprig\.upper'"):
        expr.evaluate_text("sprig.upper('x')", {})  # only sprig.b64enc / b64dec
    assert expr.evaluate_text("sprig.b64dec(sprig.b64enc('a: 1'))", {}) == "a: 1"


def test_references_lists_every_name_path() -> None:
    node = expr.parse("asInt(inputs.parameters['n']) + steps.a.outputs.parameters.x")
    assert expr.references(node) == [
        ("inputs", "parameters", "n"),
        ("steps", "a", "outputs", "parameters", "x"),
    ]


def test_substitute_plain_and_expression_tags() -> None:
    v = {"workflow.name": "run-1", "inputs.parameters.n": "2"}
    assert substitute("{{workflow.name}}/{{=asInt(inputs.parameters.n) * 3}}", v) == "run-1/6"
    with pytest.raises(UnresolvedTag, match=r"workflow\.uid"):
        substitute("{{workflow.uid}}", v)
