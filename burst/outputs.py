"""Files the CLI writes where the user asked (``--out``, ``--html``, ``--chart``...).

One mechanism, so a path that cannot be written (a missing or read-only directory, a
directory in the way, a full disk) is one ``BadInputError`` line naming the file and the
option that chose it (exit 2), never an "unexpected error": the path came from the user.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from burst.errors import BadInputError
from burst.inputs import short


def _refuse(path: Path, option: str, exc: OSError) -> BadInputError:
    import errno

    name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    why = f"{name}: {exc.strerror}" if exc.strerror else name
    return BadInputError(f"cannot write {short(str(path), 200)} ({why}): choose another {option}")


def write_output(path: str | Path, text: str, *, option: str, make_parents: bool = True) -> Path:
    """Write ``text`` to ``path`` atomically (a temporary file renamed over it)."""
    out = Path(path)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        if make_parents:
            out.parent.mkdir(parents=True, exist_ok=True)
        if out.is_dir():
            raise IsADirectoryError(21, "Is a directory")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise _refuse(out, option, exc) from None
    return out


def write_json_output(path: str | Path, doc: Any, *, option: str) -> Path:
    text = json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
    return write_output(path, text, option=option)
