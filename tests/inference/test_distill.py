"""The pieces of `burst distill` that do not need a trained run (the whole path is in
test_tiers_e2e.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from burst.errors import BadInputError
from burst.inference.distill import int8_state, load_int8, load_student_builder, quantize
from burst.spec import load_spec
from burst.train.example import build_student

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"


def test_int8_weights_round_trip_through_plain_tensors() -> None:
    job = load_spec(QUICKSTART)
    student = build_student(job).eval()
    q = quantize(student)
    state = int8_state(q)
    assert {v.dtype for k, v in state.items() if k.endswith(".int8")} == {torch.int8}
    again = load_int8(build_student(job), state)
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(q(x), again(x))
        assert torch.allclose(q(x), student(x), atol=0.05)


def test_a_student_that_does_not_load_is_one_line() -> None:
    job = load_spec(QUICKSTART)
    with pytest.raises(BadInputError, match=r"--student nope\.mod:f: cannot load it"):
        load_student_builder(job, "nope.mod:f")
    assert load_student_builder(job, None) is build_student
