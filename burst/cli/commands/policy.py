"""burst policy: check, test and explain the legal-preflight policies."""

from __future__ import annotations

from pathlib import Path

import click

from burst.errors import EXIT_FAILURE
from burst.inputs import short

POLICIES_OPTION = click.option(
    "--policies",
    "policy_dir",
    type=click.Path(file_okay=False, path_type=str),
    default=None,
    help="Policy directory (default: $BURST_POLICIES, else the repository's policies/).",
)


@click.group("policy")
def command() -> None:
    """Check, test and explain the policies in policies/ (facts in YAML, rules in Rego)."""


@command.command("check")
@POLICIES_OPTION
def check(policy_dir: str | None) -> None:
    """Load and validate every policy file; print the policy hash."""
    from burst.policy import load_policies
    from burst.policy.engine import Engine
    from burst.policy.loader import rule_catalog

    ps = load_policies(policy_dir)
    Engine(ps, with_tests=True)  # every module parses
    _check_supply_chain_files(ps.root)
    click.echo(
        f"{ps.root}: valid ({len(ps.jurisdictions.jurisdictions)} jurisdictions, "
        f"{sum(len(p.regions) for p in ps.regions.providers.values())} regions, "
        f"{len(ps.providers.providers)} providers, {len(rule_catalog(ps))} rules, "
        f"{len(ps.exceptions)} exceptions); policy sha256 {ps.sha256}"
    )


def _check_supply_chain_files(root: Path) -> None:
    """The policy directory's other files: gpu-requirements.yaml and keys/trust.yaml (and the
    keys it names), when present, read as `burst image verify` and the train step read them."""
    from burst.supplychain.compat import REQUIREMENTS_FILE, load_requirements
    from burst.supplychain.trust import TRUST_FILE, load_trust

    requirements = root / REQUIREMENTS_FILE
    if requirements.exists() or requirements.is_symlink():
        load_requirements(requirements)
    keys = root / "keys"
    if (keys / TRUST_FILE).exists() or (keys / TRUST_FILE).is_symlink():
        load_trust(keys)


@command.command("test")
@POLICIES_OPTION
@click.option("-k", "match", default=None, help="Only tests whose name contains this.")
@click.option("-v", "--verbose", is_flag=True, help="List every test, not only failures.")
def test(policy_dir: str | None, match: str | None, verbose: bool) -> None:
    """Run the Rego unit tests in policies/rules/*_test.rego (exit 1 if one fails, 2 if no
    test matches)."""
    from burst.policy import load_policies
    from burst.policy.testing import run_policy_tests

    results = run_policy_tests(load_policies(policy_dir), match)
    if not results:
        from burst.errors import BadInputError

        what = f"whose name contains {short(match)}" if match else "in policies/rules/*_test.rego"
        raise BadInputError(f"no Rego unit test {what}")
    failed = [r for r in results if not r.passed]
    for r in results:
        if verbose or not r.passed:
            mark = "PASS" if r.passed else "FAIL"
            click.echo(f"{mark} {r.file}::{r.name}" + (f" ({r.detail})" if r.detail else ""))
    click.echo(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    if failed:
        raise SystemExit(EXIT_FAILURE)


@command.command("explain")
@POLICIES_OPTION
@click.argument("rule", required=False)
def explain(policy_dir: str | None, rule: str | None) -> None:
    """Show RULE: its header, its Rego source and the facts it draws on (no RULE: list all)."""
    from burst.errors import BadInputError
    from burst.policy import load_policies
    from burst.policy.explain import explain_rule, list_rules

    ps = load_policies(policy_dir)
    if rule is None:
        for line in list_rules(ps):
            click.echo(line)
        return
    text = explain_rule(ps, rule.upper())
    if text is None:
        raise BadInputError(f"no rule {short(rule)}; `burst policy explain` lists them")
    click.echo(text)
