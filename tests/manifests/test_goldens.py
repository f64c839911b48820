"""The committed goldens are exactly what the Hera definitions compile to (`make goldens`)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from burst.pipelines.build import render_all

from .conftest import COMPILED, GOLDENS


def test_goldens_match_the_definitions() -> None:
    rendered = render_all()
    assert sorted(rendered) == GOLDENS
    for name, text in rendered.items():
        assert (COMPILED / name).read_text(encoding="utf-8") == text, (
            f"burst/pipelines/compiled/{name} drifted from burst/pipelines/: run `make goldens`"
        )


def test_compile_writes_the_goldens(
    tmp_path: Path, burst_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    out = tmp_path / "compiled"
    proc = burst_cli(["compile", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == GOLDENS
    for name in GOLDENS:
        assert (out / name).read_bytes() == (COMPILED / name).read_bytes()


@pytest.mark.e2e
def test_compile_check_fails_on_drift(
    tmp_path: Path, burst_cmd: list[str], burst_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    out = tmp_path / "compiled"
    subprocess.run([*burst_cmd, "compile", "--out", str(out)], check=True, capture_output=True)
    ok = burst_cli(["compile", "--check", "--out", str(out)])
    assert ok.returncode == 0, ok.stderr
    golden = out / "burst-train.yaml"
    golden.write_text(golden.read_text().replace("limit: '{{workflow", "limit: '{{ workflow"))
    drift = burst_cli(["compile", "--check", "--out", str(out)])
    assert drift.returncode == 1
    assert "burst-train.yaml" in drift.stdout and "make goldens" in drift.stderr
    assert "{{ workflow" in golden.read_text()  # --check writes nothing


def test_compile_refuses_a_definition_that_fails_the_lint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    import burst.pipelines.build
    from burst.cli.main import cli

    real = burst.pipelines.build.manifest

    def without_exit_handler(name: str) -> dict[str, Any]:
        doc = real(name)
        doc.get("spec", {}).pop("onExit", None)
        return doc

    monkeypatch.setattr(burst.pipelines.build, "manifest", without_exit_handler)
    out = tmp_path / "compiled"
    result = CliRunner().invoke(cli, ["compile", "--out", str(out)])
    assert result.exit_code == 2
    assert "burst-train.yaml" in result.output and "no exit handler" in result.output
    assert not out.exists()  # nothing written
