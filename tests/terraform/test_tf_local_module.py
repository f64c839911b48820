"""The local module for real: `terraform validate` and `terraform test` (embedded Terraform),
and validation of the root module burst generates for a run."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from burst.infra.terraform import REPO_ROOT
from burst.infra.workspace import write_root

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)

LOCAL = REPO_ROOT / "terraform" / "modules" / "local-nodegroup"


def _copy_module(tmp_path: Path) -> Path:
    mod = tmp_path / "local-nodegroup"
    shutil.copytree(LOCAL, mod, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"))
    return mod


def test_validate_and_terraform_test(tf: Any, tmp_path: Path) -> None:
    mod = _copy_module(tmp_path)
    init = tf("init", "-input=false", "-no-color", chdir=mod)
    assert init.returncode == 0, init.stderr
    val = tf("validate", "-no-color", chdir=mod)
    assert val.returncode == 0 and "Success" in val.stdout, val.stdout + val.stderr
    test = tf("test", "-no-color", chdir=mod)
    out = test.stdout + test.stderr
    assert test.returncode == 0, out
    assert 'run "no_capacity_fails_at_apply_time"... pass' in out
    assert "4 passed, 0 failed" in out


def test_terraform_test_fails_when_the_emulation_breaks(tf: Any, tmp_path: Path) -> None:
    """The tftest really checks the module: without the capacity postcondition it fails."""
    mod = _copy_module(tmp_path)
    main_tf = mod / "main.tf"
    text = main_tf.read_text()
    marker = 'condition     = self.id == "" || !local.no_capacity'
    assert marker in text
    main_tf.write_text(text.replace(marker, 'condition     = self.id != "never"'))
    assert tf("init", "-input=false", "-no-color", chdir=mod).returncode == 0
    test = tf("test", "-no-color", chdir=mod)
    assert test.returncode != 0
    assert 'run "no_capacity_fails_at_apply_time"... fail' in test.stdout


def test_generated_root_validates(tf: Any, tmp_path: Path) -> None:
    root = tmp_path / "run"
    write_root(root, "validate-me")
    assert tf("init", "-input=false", "-no-color", chdir=root).returncode == 0
    val = tf("validate", "-no-color", chdir=root)
    assert val.returncode == 0, val.stdout + val.stderr
