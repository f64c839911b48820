"""Compatibility preflight: the trainer image's declared versions against the GPU type's needs.

The image declares CUDA, driver minimum, torch, NCCL and DeepSpeed in labels
(``dev.burst.*``); ``policies/gpu-requirements.yaml`` says what each GPU type needs. A missing
label, an unknown GPU type or CUDA release, or a version below a minimum is refused before any
GPU is rented (fail closed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burst.errors import BadInputError, PolicyRefusal
from burst.inputs import load_yaml_file

REQUIREMENTS_FILE = "gpu-requirements.yaml"
LABELS = {
    "cuda": "dev.burst.cuda.version",
    "driver": "dev.burst.driver.min",
    "torch": "dev.burst.torch.version",
    "nccl": "dev.burst.nccl.version",
    "deepspeed": "dev.burst.deepspeed.version",
}
_VERSION_RE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


def version_tuple(text: str) -> tuple[int, ...] | None:
    """``"2.13.0+cu128"`` -> (2, 13, 0); None when it does not start with a number."""
    m = _VERSION_RE.match(str(text))
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def _ge(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)) >= b + (0,) * (n - len(b))


@dataclass(frozen=True)
class Requirements:
    source: Path
    cuda_min_driver: dict[str, str]
    defaults: dict[str, str]
    gpus: dict[str, dict[str, Any]] = field(default_factory=dict)

    def for_gpu(self, gpu_type: str) -> dict[str, Any]:
        entry = self.gpus.get(gpu_type.lower())
        if entry is None:
            raise PolicyRefusal(
                f"GPU type {gpu_type!r} has no entry in {self.source}: its driver and CUDA needs "
                f"are unknown (known: {', '.join(sorted(self.gpus))})"
            )
        return {**self.defaults, **entry}


def load_requirements(path: Path) -> Requirements:
    if not path.exists() and not path.is_symlink():
        raise BadInputError(f"GPU requirements {path} not found")
    doc = load_yaml_file(path, what="GPU requirements file")  # bounded, like every input
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise BadInputError("must be a mapping with version: 1", where=str(path))
    table = doc.get("cuda_min_driver")
    gpus = doc.get("gpus")
    if not isinstance(table, dict) or not table:
        raise BadInputError("cuda_min_driver: must be a non-empty mapping", where=str(path))
    if not isinstance(gpus, dict) or not gpus:
        raise BadInputError("gpus: must be a non-empty mapping", where=str(path))
    for cuda, driver in table.items():
        if version_tuple(str(cuda)) is None or version_tuple(str(driver)) is None:
            raise BadInputError(f"cuda_min_driver.{cuda}: not a version", where=str(path))
    for name, entry in gpus.items():
        if not isinstance(entry, dict):
            raise BadInputError(f"gpus.{name}: must be a mapping", where=str(path))
        for k in ("min_cuda", "min_driver"):
            if version_tuple(str(entry.get(k, ""))) is None:
                raise BadInputError(f"gpus.{name}.{k}: missing or not a version", where=str(path))
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise BadInputError("defaults: must be a mapping", where=str(path))
    return Requirements(
        source=path,
        cuda_min_driver={str(k): str(v) for k, v in table.items()},
        defaults={str(k): str(v) for k, v in defaults.items()},
        gpus={str(k).lower(): v for k, v in gpus.items()},
    )


def check_compat(labels: dict[str, str], gpu_type: str, req: Requirements) -> dict[str, Any]:
    """The compatibility record for the verify-image document; PolicyRefusal on a mismatch."""
    need = req.for_gpu(gpu_type)
    missing = [label for label in LABELS.values() if not labels.get(label)]
    if missing:
        raise PolicyRefusal(
            f"image does not declare {', '.join(missing)}: its compatibility with {gpu_type} "
            "cannot be checked (set these labels at build time, see images/trainer/Dockerfile)"
        )
    have: dict[str, tuple[int, ...]] = {}
    for what, label in LABELS.items():
        parsed = version_tuple(labels[label])
        if parsed is None:
            raise PolicyRefusal(f"image label {label}={labels[label]!r} is not a version")
        have[what] = parsed
    checks: list[dict[str, Any]] = []
    problems: list[str] = []

    def check(name: str, image_value: str, minimum: str | None, why: str) -> None:
        if minimum is None:
            return
        ok = _ge(version_tuple(image_value) or (), version_tuple(minimum) or ())
        checks.append({"name": name, "image": image_value, "minimum": minimum, "ok": ok})
        if not ok:
            problems.append(f"{name} {image_value} < {minimum} ({why})")

    cuda = labels[LABELS["cuda"]]
    cuda_key = ".".join(str(x) for x in have["cuda"][:2])
    cuda_driver = req.cuda_min_driver.get(cuda_key)
    if cuda_driver is None:
        raise PolicyRefusal(
            f"image CUDA {cuda}: not in cuda_min_driver of {req.source}, so the driver it needs "
            "is unknown (add it from NVIDIA's CUDA release notes)"
        )
    check("cuda", cuda, str(need["min_cuda"]), f"{gpu_type} needs at least this CUDA")
    check(
        "driver.min",
        labels[LABELS["driver"]],
        cuda_driver,
        f"CUDA {cuda_key} needs this driver: the image's label understates it",
    )
    for what in ("torch", "nccl", "deepspeed"):
        minimum = need.get(f"min_{what}")
        check(what, labels[LABELS[what]], str(minimum) if minimum else None, f"{gpu_type} minimum")
    if problems:
        raise PolicyRefusal(f"image is not compatible with {gpu_type}: " + "; ".join(problems))
    required_driver = max(
        (str(need["min_driver"]), labels[LABELS["driver"]]),
        key=lambda v: version_tuple(v) or (),
    )
    return {
        "gpu_type": gpu_type,
        "arch": need.get("arch"),
        "ok": True,
        "provisional": bool(need.get("provisional", False)),
        "checks": checks,
        "required_driver": required_driver,
        "requirements": str(req.source),
    }
