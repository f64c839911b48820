"""make setup installs with uv, which reads none of pip's configuration: scripts/uv_pip_args.py
hands pip's indexes and find-links to uv (where these machines keep the CPU torch wheel)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("uv_pip_args", REPO / "scripts" / "uv_pip_args.py")
assert _spec is not None and _spec.loader is not None
uv_pip_args = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uv_pip_args)


def test_pips_indexes_and_find_links_become_uv_options(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    listed = "\n".join(
        [
            f":env:.find-links='{wheels}'",
            "global.cert='/etc/ssl/certs/ca-certificates.crt'",
            f"global.extra-index-url='file://{tmp_path} file://{tmp_path}/missing'",
            "global.find-links='/not/this/one'",  # the variable wins over the files
            "global.index-url='https://mirror.example/simple'",
            "install.find-links='/nor/this/one'",  # nor the install section
        ]
    )
    assert uv_pip_args.uv_args(listed) == [
        "--index-url", "https://mirror.example/simple",
        "--extra-index-url", f"file://{tmp_path}",  # the missing folder left out, as pip does
        "--find-links", str(wheels),
    ]  # fmt: skip


def test_no_pip_configuration_gives_no_options() -> None:
    assert uv_pip_args.uv_args("") == []
