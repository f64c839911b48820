"""The checkout (or installed tree) burst runs from, computed once.

Its ``policies/``, ``terraform/`` and ``burst/pipelines/compiled/`` are the embedded defaults; the
steps' processes get it on their ``PYTHONPATH``. Settings (``BURST_POLICIES``,
``BURST_TERRAFORM_DIR``) override the directories, never this root.
"""

from __future__ import annotations

from pathlib import Path

#: The directory holding the ``burst`` package (and ``policies``, ``terraform``, ``deploy``).
ROOT = Path(__file__).resolve().parents[1]
#: An installed wheel's copies of policies/ and terraform/ (setup.py puts them there: in
#: site-packages, a top-level ``policies`` may be another distribution's package).
SHIPPED = Path(__file__).resolve().parent / "_shipped"


def _tree(name: str) -> Path:
    """The wheel's copy when this burst was installed from one, else the checkout's."""
    installed = SHIPPED / name
    return installed if installed.is_dir() else ROOT / name


POLICIES = _tree("policies")
TERRAFORM = _tree("terraform")
COMPILED = ROOT / "burst" / "pipelines" / "compiled"


def is_shipped(path: str | Path) -> bool:
    """A file of burst's own embedded defaults (policies, Terraform, the compiled templates,
    ``deploy/``, the default catalog), not one a user gave: such files may be read with the
    faster YAML loader (``burst.inputs.ShippedLoader``)."""
    try:
        resolved = Path(path).resolve()
    except (OSError, RuntimeError):
        return False
    roots = (POLICIES, TERRAFORM, COMPILED, ROOT / "deploy", ROOT / "burst" / "plan" / "catalog")
    return any(resolved.is_relative_to(root) for root in roots)
