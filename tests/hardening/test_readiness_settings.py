"""`burst validate`'s checks read their time limits before any check starts: a bad setting
is the one problem reported, and the entrypoint is not built for nothing (a torch process:
about 4 CPU-seconds)."""

from __future__ import annotations

import pytest

from burst.errors import BadInputError
from burst.readiness import check_ready
from burst.spec import load_spec
from tests.conftest import QUICKSTART


@pytest.mark.parametrize(
    "var", ["BURST_STORE_CHECK_S", "BURST_ENTRYPOINT_CHECK_S"], ids=["store", "entrypoint"]
)
def test_a_bad_time_limit_is_reported_before_any_check_runs(
    var: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = load_spec(QUICKSTART)
    # an entrypoint that cannot be imported: were the check run, it would be a second problem
    broken = job.model_copy(
        update={"training": job.training.model_copy(update={"entrypoint": "no_such_mod:build"})}
    )
    monkeypatch.setenv(var, "1e300")
    problems = check_ready(broken)
    assert len(problems) == 1, [p.one_line() for p in problems]
    assert isinstance(problems[0], BadInputError) and var in problems[0].one_line()
