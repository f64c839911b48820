"""Compatibility preflight: image labels against policies/gpu-requirements.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from burst.errors import BadInputError, PolicyRefusal
from burst.supplychain.compat import LABELS, check_compat, load_requirements, version_tuple

REQ = load_requirements(Path(__file__).resolve().parents[2] / "policies" / "gpu-requirements.yaml")


def labels(**over: str) -> dict[str, str]:
    base = {
        "cuda": "12.8",
        "driver": "570.26",
        "torch": "2.13.0",
        "nccl": "2.27.3",
        "deepspeed": "0.19.8",
    }
    base.update(over)
    return {LABELS[k]: v for k, v in base.items()}


def test_version_tuple_compares_numerically() -> None:
    assert version_tuple("12.10") > version_tuple("12.9")  # type: ignore[operator]
    assert version_tuple("2.13.0+cu128") == (2, 13, 0)
    assert version_tuple("abc") is None


def test_trainer_labels_fit_h100_and_b200() -> None:
    h100 = check_compat(labels(), "h100", REQ)
    assert h100["ok"] and h100["required_driver"] == "570.26"
    assert {c["name"] for c in h100["checks"]} == {
        "cuda",
        "driver.min",
        "torch",
        "nccl",
        "deepspeed",
    }
    assert check_compat(labels(), "B200", REQ)["arch"].startswith("sm_100")


def test_required_driver_is_the_larger_of_gpu_and_image() -> None:
    rec = check_compat(labels(cuda="11.8", driver="520.61.05"), "h200", REQ)
    assert rec["required_driver"] == "535.54.03"


def test_old_cuda_for_blackwell_is_refused() -> None:
    with pytest.raises(PolicyRefusal, match=r"not compatible with b200: cuda 12.4 < 12.8"):
        check_compat(labels(cuda="12.4", driver="550.54.14"), "b200", REQ)


def test_understated_driver_label_is_refused() -> None:
    with pytest.raises(PolicyRefusal, match=r"driver.min 535.54.03 < 570.26 \(CUDA 12.8 needs"):
        check_compat(labels(driver="535.54.03"), "h100", REQ)


def test_old_torch_and_nccl_are_refused_together() -> None:
    with pytest.raises(PolicyRefusal) as info:
        check_compat(labels(torch="2.6.0", nccl="2.21.5"), "b200", REQ)
    assert (
        "torch 2.6.0 < 2.7.0" in info.value.message and "nccl 2.21.5 < 2.25.1" in info.value.message
    )


def test_missing_labels_are_refused() -> None:
    partial = labels()
    del partial[LABELS["nccl"]]
    with pytest.raises(PolicyRefusal, match=r"does not declare dev\.burst\.nccl\.version"):
        check_compat(partial, "h100", REQ)


def test_unknown_gpu_and_unknown_cuda_are_refused() -> None:
    with pytest.raises(PolicyRefusal, match="'tpu-v5' has no entry"):
        check_compat(labels(), "tpu-v5", REQ)
    with pytest.raises(PolicyRefusal, match=r"CUDA 11\.2: not in cuda_min_driver"):
        check_compat(labels(cuda="11.2"), "a100", REQ)


def test_rubin_is_marked_provisional() -> None:
    rec = check_compat(labels(cuda="13.0", driver="580.65.06"), "rubin", REQ)
    assert rec["provisional"] is True


def test_bad_requirements_file(tmp_path: Path) -> None:
    bad = tmp_path / "gpu-requirements.yaml"
    bad.write_text(
        "version: 1\ncuda_min_driver: {'12.8': '570.26'}\ngpus:\n  h100: {min_cuda: x}\n"
    )
    with pytest.raises(BadInputError, match=r"gpus.h100.min_cuda: missing or not a version"):
        load_requirements(bad)
