"""What a `burst` process pays to start: registering the commands imports no document model
and no pydantic (a suite starts ~170 `burst` processes; pydantic and the documents were 0.15
CPU-seconds of each), and what the commands write out instead stays true to the code."""

from __future__ import annotations

import subprocess
import sys

from burst.cli.commands.schema import DOCUMENT_NAMES
from burst.documents import DOCUMENTS


def test_schema_lists_every_document_by_name() -> None:
    assert tuple(DOCUMENTS) == DOCUMENT_NAMES


def test_registering_the_commands_imports_neither_pydantic_nor_the_documents() -> None:
    code = (
        "import sys, burst.cli.main as m\n"
        "assert len(m.cli.commands) > 20, m.cli.commands\n"
        "print(sorted(n for n in sys.modules if n == 'pydantic' or n.startswith('burst.documents')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", out
