"""What every step document shares: the base model, the step envelope and the one-line error.

A document that does not match its model is a ``DocumentError`` (``BadInputError``, exit 2):
one line naming the document, where it came from (file or input), the field and what is
wrong, as ``burst validate`` does for a spec (``burst.spec``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from burst.errors import BadInputError
from burst.field_problems import describe


class Document(BaseModel):
    """A document burst writes itself: unknown fields are refused (a typo is not ignored)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    def to_json(self) -> dict[str, Any]:
        """The JSON object as the producer built it (fields it did not set are left out)."""
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True)


class Detail(BaseModel):
    """A nested detail record that carries producer-specific keys (measurements, a notice):
    typed where the consumers read it, open to more keys."""

    model_config = ConfigDict(extra="allow", defer_build=True)


class StepDocument(Document):
    """The envelope ``burst.stepio`` adds to every step's document."""

    step: str | None = None
    run_id: str | None = None
    seconds: float | None = None
    error: str | None = None
    exit_code: int | None = None


class DocumentError(BadInputError):
    """A document of the wrong shape (exit 2). ``problems`` holds one entry per field."""

    def __init__(self, name: str, source: str | None, problems: list[str]) -> None:
        where = f"{name} document" + (f" ({source})" if source else "")
        super().__init__(f"{where}: {problems[0]}" + _more(problems))
        self.document = name
        self.source = source
        self.problems = problems


def _more(problems: list[str]) -> str:
    return f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""


def problems_of(exc: ValidationError) -> list[str]:
    return [describe(e) for e in exc.errors()]
