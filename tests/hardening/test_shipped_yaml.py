"""burst's own YAML files (policies, the default catalog, the compiled templates, deploy/) are
read by ``ShippedLoader`` (libyaml's parser, about 10x faster: the policies were 0.1-0.2
CPU-s of every preflight); a file a user gives by ``BoundedLoader`` (pure Python: libyaml's
composer recurses in C, and a deep enough hostile file could overflow the stack). Both apply
the same refusals, and give the same values for every shipped file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from burst import checkout
from burst.errors import BadInputError
from burst.inputs import BoundedLoader, ShippedLoader, parse_yaml

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(
    p
    for pattern in (
        "policies/**/*.yaml",
        "burst/plan/catalog/*.yaml",
        "burst/pipelines/compiled/*.yaml",
        "deploy/**/*.yaml",
    )
    for p in REPO.glob(pattern)
)


def test_every_shipped_file_is_shipped_and_loads_the_same_with_both_loaders() -> None:
    assert ShippedLoader is not BoundedLoader, "PyYAML here has libyaml: the fast loader is used"
    assert len(SHIPPED) > 20
    for path in SHIPPED:
        assert checkout.is_shipped(path), path
        text = path.read_text(encoding="utf-8")
        # (deploy/ has files of several documents: every document is compared)
        fast = list(yaml.load_all(text, Loader=ShippedLoader))
        assert fast == list(yaml.load_all(text, Loader=BoundedLoader)), path


def test_a_users_file_is_not_shipped(tmp_path: Path) -> None:
    copy = tmp_path / "policies" / "jurisdictions.yaml"
    copy.parent.mkdir()
    copy.write_text((REPO / "policies" / "jurisdictions.yaml").read_text())
    assert not checkout.is_shipped(copy)
    assert not checkout.is_shipped(REPO / "examples" / "quickstart.yaml")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a: 1\na: 2\n", "s.yaml:2: a: duplicated key 'a'"),
        ("x: 1e999\n", "is not a finite number"),
        ("d: 2026-02-30\n", "is not a valid date or time"),
        ("n: 010\n", "has a leading zero"),
        ("t: 1:30\n", "is a base-60 number"),
        ("a: &a [*a]\n", "a recursive YAML alias"),
        ("- 99999999999999999999999\n", "integer beyond 64 bits"),
        (
            "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
            + "".join(
                f"{k}: &{k} [{', '.join(['*' + p] * 10)}]\n"
                for p, k in zip("abcd", "bcde", strict=True)
            ),
            "expands to more than",
        ),
    ],
)
def test_both_loaders_refuse_the_same_way(text: str, problem: str) -> None:
    lines = []
    for shipped in (False, True):
        with pytest.raises(BadInputError) as info:
            parse_yaml(text, "s.yaml", shipped=shipped)
        lines.append(info.value.one_line())
    assert lines[0] == lines[1] and problem in lines[0], lines
    assert parse_yaml("n: '010'\nt: \"1:30\"\n", "s.yaml", shipped=True) == {
        "n": "010",
        "t": "1:30",
    }
